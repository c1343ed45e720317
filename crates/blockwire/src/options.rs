//! [`TransportOptions`]: settings shared by every backend.

use std::sync::Arc;
use std::time::Duration;

use blockwire_core::BackendOptions;

use crate::clock::{Clock, SystemClock};

/// How long `close` waits for running transfers before it returns and leaves them to a reaper.
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default of [`TransportOptions::stall_timeout`] (defined in `blockwire_core`, where backends
/// see it too).
///
/// ```
/// assert_eq!(blockwire::DEFAULT_STALL_TIMEOUT, std::time::Duration::from_secs(5));
/// ```
pub use blockwire_core::DEFAULT_STALL_TIMEOUT;

/// Default of [`TransportOptions::max_consecutive_failures`].
///
/// ```
/// assert_eq!(blockwire::DEFAULT_MAX_CONSECUTIVE_FAILURES, 3);
/// ```
pub const DEFAULT_MAX_CONSECUTIVE_FAILURES: u32 = 3;

/// Settings of a transport, whatever its backend.
///
/// ```
/// use blockwire::TransportOptions;
/// use std::time::Duration;
/// let fields = serde_json::json!({"model": "llama-3-8b", "dtype": "bf16", "layers": 32});
/// let opts = TransportOptions::default()
///     .with_config_fields(fields.as_object().cloned())
///     .with_close_timeout(Duration::from_secs(1))
///     .with_backend_option("copy_threads", "2");
/// assert_eq!(opts.close_timeout, Duration::from_secs(1));
/// ```
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct TransportOptions {
    /// Model config values whose fingerprint peers must share; `None` or empty: compatible
    /// with any peer.
    pub config_fields: Option<serde_json::Map<String, serde_json::Value>>,
    /// Bound on how long `close` waits for running transfers.
    pub close_timeout: Duration,
    /// A peer with transfers in flight of which none has completed for this long is taken
    /// for dead or unreachable: the backend is asked to cut its connection
    /// ([`blockwire_core::Backend::fail_peer`]) and its transfers fail as a remote
    /// disconnect; `None` waits for the library. Checked when the peer's transfers are polled
    /// or cancelled, against [`TransportOptions::clock`].
    pub stall_timeout: Option<Duration>,
    /// The clock the stall watchdog reads ([`SystemClock`] by default; a test sets a
    /// [`ManualClock`](crate::ManualClock) to advance it by hand). The close timeout and the
    /// backends' own timers keep real time.
    pub clock: Arc<dyn Clock>,
    /// A peer whose transfers fail this many times in a row (reported failed by `poll`, or
    /// refused at submission), with no success between, is judged unusable
    /// ([`blockwire_core::PeerFault::ConsecutiveFailures`]); `0` never faults a peer for
    /// failures alone. A remote disconnect, a stall cut or a failed state check faults it at
    /// once, whatever this says.
    pub max_consecutive_failures: u32,
    /// Backend-specific `key=value` options (see each backend's docs).
    pub backend: BackendOptions,
    /// The transport's name, carried in its descriptor: the sender its notifications carry,
    /// so a target can tell who sent one without having added the sender as a peer. `None`
    /// (the default) generates a name unique to the transport at open, across hosts
    /// (`bw-<host>-<pid>-<n>-<64 random bits in hex>`); one given must pass
    /// [`blockwire_core::name_problem`]. With NIXL it is the agent's name, which NIXL keys
    /// remote agents by: a name given must be unique in the fleet.
    pub name: Option<String>,
    /// How many arrived notifications wait to be drained at most, all senders together; one
    /// arriving beyond is dropped and counted (see [`blockwire_core::kit::Inbox`]).
    pub notification_capacity: usize,
    /// Telemetry per transfer and per peer ([`crate::telemetry`]): off by default, and free
    /// when off (no clock is read, nothing recorded).
    pub telemetry: bool,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            config_fields: None,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            clock: Arc::new(SystemClock),
            max_consecutive_failures: DEFAULT_MAX_CONSECUTIVE_FAILURES,
            backend: BackendOptions::default(),
            name: None,
            notification_capacity: blockwire_core::kit::Inbox::DEFAULT_CAPACITY,
            telemetry: false,
        }
    }
}

impl TransportOptions {
    /// Sets the config fields the fingerprint is computed from.
    ///
    /// ```
    /// # use blockwire::TransportOptions;
    /// let o = TransportOptions::default().with_config_fields(None);
    /// assert!(o.config_fields.is_none());
    /// ```
    pub fn with_config_fields(
        mut self,
        fields: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Self {
        self.config_fields = fields;
        self
    }

    /// Sets the stall timeout (`None`: never cut a peer for want of progress).
    ///
    /// ```
    /// # use blockwire::TransportOptions;
    /// # use std::time::Duration;
    /// let o = TransportOptions::default().with_stall_timeout(Some(Duration::from_secs(2)));
    /// assert_eq!(o.stall_timeout, Some(Duration::from_secs(2)));
    /// ```
    pub fn with_stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Sets the clock of the stall watchdog.
    ///
    /// ```
    /// use blockwire::{open, Clock, ManualClock, Region, Transport, TransportOptions};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let opts = TransportOptions::default()
    ///     .with_stall_timeout(Some(Duration::from_secs(30)))
    ///     .with_clock(clock.clone());
    /// assert_eq!(opts.clock.now(), clock.now());
    /// let t = open("shm", Region::new(2, 64)?, opts)?;
    /// // Thirty seconds pass for the watchdog at once: a peer whose transfers ran all that
    /// // time without one completing would be cut at the next poll.
    /// clock.advance(Duration::from_secs(30));
    /// assert!(t.poll(None)?.failed.is_empty()); // nothing in flight: nothing to cut
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets how many consecutive transfer failures fault a peer (`0`: never, for failures
    /// alone).
    ///
    /// ```
    /// # use blockwire::TransportOptions;
    /// let o = TransportOptions::default().with_max_consecutive_failures(5);
    /// assert_eq!(o.max_consecutive_failures, 5);
    /// ```
    pub fn with_max_consecutive_failures(mut self, failures: u32) -> Self {
        self.max_consecutive_failures = failures;
        self
    }

    /// Sets the close timeout.
    ///
    /// ```
    /// # use blockwire::TransportOptions;
    /// # use std::time::Duration;
    /// let o = TransportOptions::default().with_close_timeout(Duration::ZERO);
    /// assert_eq!(o.close_timeout, Duration::ZERO);
    /// ```
    pub fn with_close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Sets one backend-specific option.
    ///
    /// ```
    /// # use blockwire::TransportOptions;
    /// let o = TransportOptions::default().with_backend_option("chunk_bytes", "65536");
    /// assert!(!o.backend.is_empty());
    /// ```
    pub fn with_backend_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.backend.set(key, value);
        self
    }

    /// With a name ([`TransportOptions::name`]).
    ///
    /// ```
    /// let o = blockwire::TransportOptions::default().with_name("prefill-0");
    /// assert_eq!(o.name.as_deref(), Some("prefill-0"));
    /// ```
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// With an inbox capacity ([`TransportOptions::notification_capacity`]).
    ///
    /// ```
    /// let o = blockwire::TransportOptions::default().with_notification_capacity(64);
    /// assert_eq!(o.notification_capacity, 64);
    /// ```
    pub fn with_notification_capacity(mut self, capacity: usize) -> Self {
        self.notification_capacity = capacity;
        self
    }

    /// With telemetry on or off ([`TransportOptions::telemetry`]).
    ///
    /// ```
    /// assert!(blockwire::TransportOptions::default().with_telemetry(true).telemetry);
    /// ```
    pub fn with_telemetry(mut self, on: bool) -> Self {
        self.telemetry = on;
        self
    }

    /// Replaces the backend-specific options.
    ///
    /// ```
    /// # use blockwire::{BackendOptions, TransportOptions};
    /// let o = TransportOptions::default().with_backend_options(BackendOptions::new());
    /// assert!(o.backend.is_empty());
    /// ```
    pub fn with_backend_options(mut self, backend: BackendOptions) -> Self {
        self.backend = backend;
        self
    }
}
