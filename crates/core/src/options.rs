//! [`BackendOptions`]: backend-specific settings as `key=value` strings.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::{BackendError, BackendErrorKind};

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

    /// Parses `k=v,k=v` (empty input gives no options).
    ///
    /// ```
    /// # use blockwire_core::BackendOptions;
    /// assert!(BackendOptions::parse_list("novalue").is_err());
    /// ```
    pub fn parse_list(list: &str) -> Result<Self, BackendError> {
        let mut out = Self::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                BackendError::new(
                    BackendErrorKind::InvalidOption,
                    format!("option {item:?} is not key=value"),
                )
            })?;
            out.set(k.trim(), v.trim());
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
