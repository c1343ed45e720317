//! [`BackendOptions`]: backend-specific settings as `key=value` strings.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use crate::kit::{Doorbell, Inbox};
use crate::{BackendError, BackendErrorKind};

/// The default stall timeout of a transport (`blockwire::TransportOptions::stall_timeout`):
/// how long a peer may make no progress before it is cut. Here so that a backend that bounds
/// something by it without being given one (see [`BackendOptions::stall_timeout`]) uses the
/// same value.
///
/// ```
/// assert_eq!(blockwire_core::DEFAULT_STALL_TIMEOUT, std::time::Duration::from_secs(5));
/// ```
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Backend-specific options, as `key=value` strings (from a command line, a config file or
/// code). A backend takes the keys it knows and calls [`BackendOptions::finish`], so a
/// misspelled key is an error rather than silently ignored.
///
/// ```
/// use blockwire_core::BackendOptions;
/// let mut o = BackendOptions::parse_list("copy_threads=2,chunk_bytes=65536").unwrap();
/// assert_eq!(o.take::<usize>("copy_threads").unwrap(), Some(2));
/// assert_eq!(o.take::<usize>("chunk_bytes").unwrap(), Some(65536));
/// assert_eq!(o.take::<usize>("absent").unwrap(), None);
/// o.finish("shm").unwrap();
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendOptions {
    values: BTreeMap<String, String>,
    /// The transport's stall timeout, which the transport sets: see
    /// [`BackendOptions::stall_timeout`].
    stall_timeout: Option<Duration>,
    /// The transport's name and inbox, which the transport sets: see
    /// [`BackendOptions::with_identity`].
    identity: Option<(String, Inbox)>,
    /// The transport's doorbell, which the transport sets: see
    /// [`BackendOptions::with_doorbell`].
    doorbell: Option<Doorbell>,
}

impl BackendOptions {
    /// No options.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// assert!(BackendOptions::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// With the transport's stall timeout (`blockwire::TransportOptions::stall_timeout`),
    /// which the transport passes to its backend this way: how long a peer may make no
    /// progress before it is cut. A backend that gives up on a peer by itself derives its bound
    /// from this one, so that one setting bounds both (libfabric fails posts the provider keeps
    /// refusing after half of it: the peer then fails as a remote disconnect before the
    /// watchdog would cut it as stalled).
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = blockwire_core::BackendOptions::new().with_stall_timeout(Some(Duration::from_secs(2)));
    /// assert_eq!(o.stall_timeout(), Some(Duration::from_secs(2)));
    /// assert!(o.is_empty()); // not a key: `finish` never sees it
    /// ```
    pub fn with_stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// The transport's stall timeout (`None`: never give up on a peer for want of progress;
    /// also what a backend opened without a transport sees).
    ///
    /// ```
    /// assert_eq!(blockwire_core::BackendOptions::new().stall_timeout(), None);
    /// ```
    pub fn stall_timeout(&self) -> Option<std::time::Duration> {
        self.stall_timeout
    }

    /// With the transport's name (carried in its descriptor, and the sender of its
    /// notifications) and the inbox its backend's receive path hands arriving notifications
    /// to. The transport passes both this way.
    ///
    /// ```
    /// use blockwire_core::{BackendOptions, kit::Inbox};
    /// let inbox = Inbox::new(16);
    /// let o = BackendOptions::new().with_identity("decode-0", inbox.clone());
    /// assert_eq!(o.name(), Some("decode-0"));
    /// assert_eq!(o.inbox(), inbox);
    /// assert!(o.is_empty()); // not a key
    /// ```
    pub fn with_identity(mut self, name: impl Into<String>, inbox: Inbox) -> Self {
        self.identity = Some((name.into(), inbox));
        self
    }

    /// The transport's name; `None` for a backend opened without a transport.
    ///
    /// ```
    /// use blockwire_core::{BackendOptions, kit::Inbox};
    /// assert_eq!(BackendOptions::new().name(), None);
    /// let o = BackendOptions::new().with_identity("decode-0", Inbox::new(1));
    /// assert_eq!(o.name(), Some("decode-0"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.identity.as_ref().map(|(n, _)| n.as_str())
    }

    /// The inbox arriving notifications go to: the transport's, or for a backend opened
    /// without a transport, a fresh one nobody drains.
    pub fn inbox(&self) -> Inbox {
        self.identity
            .as_ref()
            .map_or_else(Inbox::default, |(_, i)| i.clone())
    }

    /// With the doorbell the backend rings whenever one of its transfers ends (see
    /// [`crate::Capabilities::doorbell`]), so the transport's `poll_wait` sleeps until there
    /// is something to report. The transport passes it this way.
    ///
    /// ```
    /// use blockwire_core::{BackendOptions, kit::Doorbell};
    /// let bell = Doorbell::new();
    /// let o = BackendOptions::new().with_doorbell(bell.clone());
    /// assert_eq!(o.doorbell(), bell);
    /// assert!(o.is_empty()); // not a key
    /// ```
    pub fn with_doorbell(mut self, doorbell: Doorbell) -> Self {
        self.doorbell = Some(doorbell);
        self
    }

    /// The doorbell to ring when a transfer ends: the transport's, or for a backend opened
    /// without a transport, a fresh one nobody waits on.
    pub fn doorbell(&self) -> Doorbell {
        self.doorbell.clone().unwrap_or_default()
    }

    /// Parses `k=v,k=v` (empty input gives no options). A value may itself hold commas, as
    /// UCX transport lists do: a piece without `=` continues the previous value
    /// (`tls=cma,tcp,progress=thread` sets `tls` to `cma,tcp`).
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let mut o = BackendOptions::parse_list("tls=cma,tcp,progress=thread").unwrap();
    /// assert_eq!(o.take::<String>("tls").unwrap().as_deref(), Some("cma,tcp"));
    /// assert!(BackendOptions::parse_list("novalue").is_err());
    /// ```
    pub fn parse_list(list: &str) -> Result<Self, BackendError> {
        let mut out = Self::new();
        let mut last: Option<String> = None;
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match (item.split_once('='), &last) {
                (Some((k, v)), _) => {
                    out.set(k.trim(), v.trim());
                    last = Some(k.trim().to_owned());
                }
                (None, Some(key)) => {
                    if let Some(v) = out.values.get_mut(key) {
                        v.push(',');
                        v.push_str(item);
                    }
                }
                (None, None) => {
                    return Err(BackendError::new(
                        BackendErrorKind::InvalidOption,
                        format!("option {item:?} is not key=value"),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Sets one option (builder style).
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let o = BackendOptions::new().with("copy_threads", "4");
    /// assert!(!o.is_empty());
    /// ```
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(key, value);
        self
    }

    /// Sets one option.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let mut o = BackendOptions::new();
    /// o.set("k", "v");
    /// assert_eq!(o.take::<String>("k").unwrap().as_deref(), Some("v"));
    /// ```
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.values.insert(key.into(), value.into());
    }

    /// The options as `k=v,k=v` (what [`BackendOptions::parse_list`] reads).
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let o = BackendOptions::new().with("b", "2").with("a", "1");
    /// assert_eq!(o.to_list(), "a=1,b=2");
    /// assert_eq!(BackendOptions::parse_list(&o.to_list()).unwrap(), o);
    /// ```
    pub fn to_list(&self) -> String {
        let items: Vec<String> = self
            .values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        items.join(",")
    }

    /// The options, sorted by key.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let o = BackendOptions::new().with("k", "v");
    /// assert_eq!(o.iter().collect::<Vec<_>>(), vec![("k", "v")]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether no option is set.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// assert!(BackendOptions::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Removes `key` and parses its value.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let mut o = BackendOptions::new().with("n", "many");
    /// assert!(o.take::<u32>("n").is_err());
    /// ```
    pub fn take<T: FromStr>(&mut self, key: &str) -> Result<Option<T>, BackendError>
    where
        T::Err: std::fmt::Display,
    {
        match self.values.remove(key) {
            None => Ok(None),
            Some(v) => v.parse::<T>().map(Some).map_err(|e| {
                BackendError::new(
                    BackendErrorKind::InvalidOption,
                    format!("option {key}={v:?}: {e}"),
                )
            }),
        }
    }

    /// Removes `key` and parses its value as a whole number of microseconds, refusing
    /// (`InvalidOption`) one over `max`: for the spins and sleeps backends take from their
    /// options, which a thread would otherwise keep a core for, or panic adding to the clock.
    ///
    /// ```
    /// # use blockwire_core::{BackendErrorKind, BackendOptions};
    /// # use std::time::Duration;
    /// let max = Duration::from_secs(1);
    /// let mut o = BackendOptions::new().with("spin_us", "50").with("long_us", "1000001");
    /// assert_eq!(o.take_micros("spin_us", max).unwrap(), Some(Duration::from_micros(50)));
    /// assert_eq!(o.take_micros("absent_us", max).unwrap(), None);
    /// let err = o.take_micros("long_us", max).unwrap_err();
    /// assert_eq!(err.kind(), BackendErrorKind::InvalidOption);
    /// assert!(err.message().contains("long_us"));
    /// ```
    pub fn take_micros(
        &mut self,
        key: &str,
        max: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        let Some(micros) = self.take::<u64>(key)? else {
            return Ok(None);
        };
        let value = Duration::from_micros(micros);
        if value > max {
            return Err(BackendError::new(
                BackendErrorKind::InvalidOption,
                format!("option {key}={micros}: at most {}", max.as_micros()),
            ));
        }
        Ok(Some(value))
    }

    /// Removes every option whose key starts with `prefix`; returns them without the prefix.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let mut o = BackendOptions::new().with("param.num_threads", "4").with("other", "1");
    /// assert_eq!(o.take_prefixed("param."), vec![("num_threads".to_owned(), "4".to_owned())]);
    /// assert_eq!(o.take::<u32>("other").unwrap(), Some(1));
    /// ```
    pub fn take_prefixed(&mut self, prefix: &str) -> Vec<(String, String)> {
        let keys: Vec<String> = self
            .values
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let v = self.values.remove(&k)?;
                Some((k[prefix.len()..].to_owned(), v))
            })
            .collect()
    }

    /// Fails when keys remain that the backend did not take.
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// let err = BackendOptions::new().with("typo", "1").finish("shm").unwrap_err();
    /// assert!(err.message().contains("typo"));
    /// ```
    pub fn finish(self, backend: &str) -> Result<(), BackendError> {
        if self.values.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = self.values.keys().map(String::as_str).collect();
        Err(BackendError::new(
            BackendErrorKind::InvalidOption,
            format!("backend {backend} has no option(s) {}", keys.join(", ")),
        ))
    }
}
