//! How the suite opens transports of a backend: [`Fixture`], and the two fixtures every
//! backend gets from its [`BackendFactory`] (for every [`OpenBackend`], [`Setting`]): [`Plain`]
//! and [`Faulty`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use blockwire::{BlockTransport, Clock, Region, Transport, TransportOptions};
use blockwire_core::{Backend, BackendOptions, OpenBackend, RegionSpan, Result};

use crate::fault::{FaultPlan, FaultyBackend};

/// The shape and settings of one transport a case opens.
///
/// ```
/// let spec = blockwire_conformance::Spec::new(16, 4096).with_fields(serde_json::json!({"m": 1}));
/// assert_eq!(spec.num_blocks, 16);
/// ```
#[derive(Clone, Debug)]
pub struct Spec {
    /// Blocks in the region.
    pub num_blocks: u32,
    /// Bytes per block.
    pub block_len: usize,
    /// Config fields (fingerprint).
    pub config_fields: Option<serde_json::Map<String, serde_json::Value>>,
    /// Close timeout.
    pub close_timeout: Duration,
    /// Stall timeout (`TransportOptions::stall_timeout`).
    pub stall_timeout: Option<Duration>,
    /// `TransportOptions::max_consecutive_failures`.
    pub max_consecutive_failures: u32,
    /// The stall watchdog's clock (`TransportOptions::clock`); `None`: the system clock.
    pub clock: Option<Arc<dyn Clock>>,
    /// `TransportOptions::notification_capacity`; `None`: the default.
    pub notification_capacity: Option<usize>,
    /// `TransportOptions::telemetry`.
    pub telemetry: bool,
    /// A [`Faulty`] fixture's backend reports `posts_in_caller`
    /// ([`crate::FaultPlan::defer_posts`]), so the transport posts through its posting thread;
    /// a [`Plain`] one ignores it.
    pub deferred_posting: bool,
}

impl Spec {
    /// `num_blocks` blocks of `block_len` bytes, no config fields, a 5 s close timeout.
    ///
    /// ```
    /// assert_eq!(blockwire_conformance::Spec::new(2, 8).block_len, 8);
    /// ```
    pub fn new(num_blocks: u32, block_len: usize) -> Self {
        Spec {
            num_blocks,
            block_len,
            config_fields: None,
            close_timeout: Duration::from_secs(5),
            stall_timeout: Some(blockwire::DEFAULT_STALL_TIMEOUT),
            max_consecutive_failures: blockwire::DEFAULT_MAX_CONSECUTIVE_FAILURES,
            clock: None,
            notification_capacity: None,
            telemetry: false,
            deferred_posting: false,
        }
    }

    /// With config fields (a JSON object; anything else means none).
    ///
    /// ```
    /// let s = blockwire_conformance::Spec::new(2, 8).with_fields(serde_json::json!({"a": 1}));
    /// assert!(s.config_fields.is_some());
    /// ```
    pub fn with_fields(mut self, fields: serde_json::Value) -> Self {
        self.config_fields = fields.as_object().cloned();
        self
    }

    /// With a close timeout.
    ///
    /// ```
    /// let s = blockwire_conformance::Spec::new(2, 8).with_close_timeout(std::time::Duration::ZERO);
    /// assert!(s.close_timeout.is_zero());
    /// ```
    pub fn with_close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Sets the stall timeout.
    ///
    /// ```
    /// let s = blockwire_conformance::Spec::new(2, 8).with_stall_timeout(None);
    /// assert!(s.stall_timeout.is_none());
    /// ```
    pub fn with_stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Sets how many consecutive failures fault a peer.
    ///
    /// ```
    /// let s = blockwire_conformance::Spec::new(2, 8).with_max_consecutive_failures(0);
    /// assert_eq!(s.max_consecutive_failures, 0);
    /// ```
    pub fn with_max_consecutive_failures(mut self, failures: u32) -> Self {
        self.max_consecutive_failures = failures;
        self
    }

    /// With an inbox capacity (`TransportOptions::notification_capacity`).
    ///
    /// ```
    /// let s = blockwire_conformance::Spec::new(1, 64).with_notification_capacity(2);
    /// assert_eq!(s.notification_capacity, Some(2));
    /// ```
    pub fn with_notification_capacity(mut self, capacity: usize) -> Self {
        self.notification_capacity = Some(capacity);
        self
    }

    /// With telemetry on (`TransportOptions::telemetry`).
    ///
    /// ```
    /// assert!(blockwire_conformance::Spec::new(1, 64).with_telemetry(true).telemetry);
    /// ```
    pub fn with_telemetry(mut self, on: bool) -> Self {
        self.telemetry = on;
        self
    }

    /// With deferred posting forced on a [`Faulty`] fixture (see [`Spec::deferred_posting`]).
    ///
    /// ```
    /// assert!(blockwire_conformance::Spec::new(1, 64).with_deferred_posting(true).deferred_posting);
    /// ```
    pub fn with_deferred_posting(mut self, on: bool) -> Self {
        self.deferred_posting = on;
        self
    }

    /// With the stall watchdog reading `clock` (a [`blockwire::ManualClock`] lets a case
    /// advance it instead of sleeping).
    ///
    /// ```
    /// use blockwire::{Clock, ManualClock};
    /// let clock = ManualClock::new();
    /// let s = blockwire_conformance::Spec::new(2, 8).with_clock(clock.clone());
    /// clock.advance(std::time::Duration::from_secs(1));
    /// assert_eq!(s.clock.map(|c| c.now()), Some(clock.now()));
    /// ```
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The transport options of this spec, with `backend` as the backend options.
    ///
    /// ```
    /// use blockwire_core::BackendOptions;
    /// let spec = blockwire_conformance::Spec::new(2, 8).with_max_consecutive_failures(3);
    /// let o = spec.options(BackendOptions::new().with("tls", "tcp"));
    /// assert_eq!(o.max_consecutive_failures, 3);
    /// assert_eq!(o.backend.to_list(), "tls=tcp");
    /// ```
    pub fn options(&self, backend: BackendOptions) -> TransportOptions {
        let options = TransportOptions::default()
            .with_config_fields(self.config_fields.clone())
            .with_close_timeout(self.close_timeout)
            .with_stall_timeout(self.stall_timeout)
            .with_max_consecutive_failures(self.max_consecutive_failures)
            .with_backend_options(backend);
        let options = options.with_telemetry(self.telemetry);
        let options = match self.notification_capacity {
            Some(capacity) => options.with_notification_capacity(capacity),
            None => options,
        };
        match &self.clock {
            Some(clock) => options.with_clock(Arc::clone(clock)),
            None => options,
        }
    }
}

/// A transport a case opened, with its fault switches when the fixture injects faults.
///
/// ```
/// use blockwire::Transport;
/// use blockwire_conformance::{Fixture, Plain, Setting, Spec};
/// use blockwire_shm::ShmBackend;
/// let o = Plain(Setting::<ShmBackend>::default()).open(&Spec::new(4, 4096))?;
/// assert_eq!(o.transport.num_blocks(), 4);
/// assert!(o.faults.is_none()); // a plain fixture injects nothing
/// # Ok::<(), blockwire::Error>(())
/// ```
pub struct Opened<T> {
    /// The transport.
    pub transport: T,
    /// The fault switches of its backend (`None` for a plain fixture).
    pub faults: Option<FaultPlan>,
}

/// Opens transports of one backend configuration for the suite.
///
/// ```
/// use blockwire::Transport;
/// use blockwire_conformance::{Faulty, Fixture, Setting, Spec};
/// use blockwire_shm::ShmBackend;
/// fn pair<F: Fixture>(fx: &F) -> blockwire::Result<(F::Transport, F::Transport)> {
///     let spec = Spec::new(2, 64);
///     Ok((fx.open(&spec)?.transport, fx.open(&spec)?.transport))
/// }
/// let (a, b) = pair(&Faulty(Setting::<ShmBackend>::default()))?;
/// a.add_remote_peer(&"b".into(), &b.descriptor()?)?;
/// assert_eq!(a.peers(), vec!["b".into()]);
/// # Ok::<(), blockwire::Error>(())
/// ```
pub trait Fixture: Send + Sync + 'static {
    /// The transport type.
    type Transport: Transport + 'static;

    /// Name used as the first part of every case's test name (`shm`, `shm+faults`).
    ///
    /// ```
    /// use blockwire_conformance::{Faulty, Fixture, Plain, Setting};
    /// use blockwire_shm::ShmBackend;
    /// assert_eq!(Plain(Setting::<ShmBackend>::default()).name(), "shm");
    /// assert_eq!(Faulty(Setting::<ShmBackend>::default()).name(), "shm+faults");
    /// ```
    fn name(&self) -> String;

    /// Opens a transport.
    ///
    /// ```
    /// use blockwire::Transport;
    /// use blockwire_conformance::{Faulty, Fixture, Setting, Spec};
    /// use blockwire_shm::ShmBackend;
    /// let spec = Spec::new(4, 4096).with_fields(serde_json::json!({"model": "m"}));
    /// let o = Faulty(Setting::<ShmBackend>::default()).open(&spec)?;
    /// assert!(o.faults.is_some());
    /// assert_eq!(o.transport.block_len(), 4096);
    /// assert_eq!(o.transport.fingerprint().len(), 16);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>>;
}

/// Makes a backend over a region, for [`Plain`] and [`Faulty`]. Every backend that implements
/// [`OpenBackend`] has one: [`Setting`]. Write one only for a backend that needs more to open
/// than a span and options.
///
/// ```
/// use blockwire_conformance::{BackendFactory, Fixture, Plain, Spec};
/// use blockwire_core::{BackendOptions, OpenBackend, RegionSpan, Result};
/// struct OneThread;
/// impl BackendFactory for OneThread {
///     type Backend = blockwire_shm::ShmBackend;
///     fn name(&self) -> String { "shm-1".into() }
///     fn options(&self) -> BackendOptions { BackendOptions::new().with("copy_threads", "1") }
///     unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend> {
///         // SAFETY: forwarded from the caller.
///         unsafe { blockwire_shm::ShmBackend::open(span, options) }
///     }
/// }
/// assert_eq!(Plain(OneThread).name(), "shm-1");
/// Plain(OneThread).open(&Spec::new(2, 64))?;
/// # Ok::<(), blockwire::Error>(())
/// ```
pub trait BackendFactory: Send + Sync + 'static {
    /// The backend.
    type Backend: Backend;

    /// Name of this configuration (`shm`, `ucx-tcp`, ...).
    ///
    /// ```
    /// use blockwire_conformance::{BackendFactory, Setting};
    /// use blockwire_shm::ShmBackend;
    /// assert_eq!(Setting::<ShmBackend>::default().name(), "shm");
    /// ```
    fn name(&self) -> String;

    /// Backend options of this configuration.
    ///
    /// ```
    /// use blockwire_conformance::{BackendFactory, Setting};
    /// use blockwire_shm::ShmBackend;
    /// assert!(Setting::<ShmBackend>::default().options().is_empty()); // the default: no options
    /// ```
    fn options(&self) -> BackendOptions {
        BackendOptions::new()
    }

    /// Opens the backend over `span`.
    ///
    /// # Safety
    ///
    /// `span` must stay valid until the backend is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use blockwire_conformance::{BackendFactory, Setting};
    /// use blockwire_shm::ShmBackend;
    /// use blockwire_core::{Backend, RegionSpan};
    /// let mut mem = vec![0u8; 2 * 64];
    /// let base = std::ptr::NonNull::new(mem.as_mut_ptr()).expect("a vector is never null");
    /// let span = RegionSpan::new(base, 2, 64).expect("a valid shape");
    /// let f = Setting::<ShmBackend>::default();
    /// // SAFETY: `mem` outlives the backend and is not touched while it runs.
    /// let backend = unsafe { f.make(span, f.options())? };
    /// assert_eq!(backend.kind(), "shm");
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend>;
}

/// The backend as it is.
///
/// ```
/// use blockwire::Transport;
/// use blockwire_conformance::{Fixture, Plain, Setting, Spec};
/// use blockwire_shm::ShmBackend;
/// let fx = Plain(Setting::<ShmBackend>::default());
/// let o = fx.open(&Spec::new(2, 64))?;
/// assert_eq!(o.transport.backend_kind(), "shm");
/// assert!(o.faults.is_none());
/// # Ok::<(), blockwire::Error>(())
/// ```
pub struct Plain<F>(pub F);

/// The backend wrapped in [`FaultyBackend`]; named `<name>+faults`.
///
/// ```
/// use blockwire::{Error, Transport};
/// use blockwire_conformance::{Faulty, Fixture, Setting, Spec};
/// use blockwire_shm::ShmBackend;
/// let fx = Faulty(Setting::<ShmBackend>::default());
/// let (a, b) = (fx.open(&Spec::new(2, 64))?, fx.open(&Spec::new(2, 64))?);
/// let plan = a.faults.expect("a faulty fixture has switches");
/// a.transport.add_remote_peer(&"b".into(), &b.transport.descriptor()?)?;
/// assert_eq!(plan.connected_peers(), 1);
/// plan.fail_nth_post(1);
/// let posted = a.transport.write_blocks(&"b".into(), &[0], &[0]);
/// assert!(matches!(posted, Err(Error::Submit { .. })));
/// # Ok::<(), blockwire::Error>(())
/// ```
pub struct Faulty<F>(pub F);

impl<F: BackendFactory> Fixture for Plain<F> {
    type Transport = BlockTransport<F::Backend>;

    fn name(&self) -> String {
        self.0.name()
    }

    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>> {
        let region = Region::new(spec.num_blocks, spec.block_len)?;
        let transport =
            BlockTransport::open_with(region, spec.options(self.0.options()), |s, o| {
                // SAFETY: `open_with` passes the span of the region the transport owns and drops
                // the backend first.
                unsafe { self.0.make(s, o) }
            })?;
        Ok(Opened {
            transport,
            faults: None,
        })
    }
}

impl<F: BackendFactory> Fixture for Faulty<F> {
    type Transport = BlockTransport<FaultyBackend<F::Backend>>;

    fn name(&self) -> String {
        format!("{}+faults", self.0.name())
    }

    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>> {
        let plan = FaultPlan::new();
        plan.defer_posts(spec.deferred_posting);
        let region = Region::new(spec.num_blocks, spec.block_len)?;
        let p = plan.clone();
        let transport =
            BlockTransport::open_with(region, spec.options(self.0.options()), |s, o| {
                // SAFETY: as for `Plain`.
                let inner = unsafe { self.0.make(s, o)? };
                Ok(FaultyBackend::new(inner, p))
            })?;
        Ok(Opened {
            transport,
            faults: Some(plan),
        })
    }
}

/// The one generic [`BackendFactory`]: a backend `B` with one setting (its backend options),
/// named `<kind>` or `<kind>-<name>`. A backend's `tests/suite.rs` lists its settings with it.
///
/// ```
/// use blockwire_conformance::{trials, BackendFactory, Plain, Setting};
/// use blockwire_shm::ShmBackend;
/// assert_eq!(Setting::<ShmBackend>::default().name(), "shm");
/// let one = Setting::<ShmBackend>::new("1", "copy_threads=1");
/// assert_eq!(one.name(), "shm-1");
/// assert_eq!(one.option_list(), "copy_threads=1");
/// let all = trials(Plain(one));
/// assert!(all.iter().any(|t| t.name() == "shm-1::data::write_lands_at_remote_index"));
/// ```
pub struct Setting<B> {
    name: String,
    options: BackendOptions,
    backend: PhantomData<fn() -> B>,
}

impl<B: OpenBackend> Setting<B> {
    /// The setting named `<kind>-<name>` whose transports use `options` (`k=v,...`; panics on
    /// a malformed list, which is a bug in the suite that lists it).
    ///
    /// ```
    /// use blockwire_conformance::{BackendFactory, Setting};
    /// let s = Setting::<blockwire_shm::ShmBackend>::new("big-chunks", "chunk_bytes=1048576");
    /// assert_eq!(s.name(), "shm-big-chunks");
    /// ```
    pub fn new(name: &str, options: &str) -> Self {
        Setting {
            name: format!("{}-{name}", B::KIND),
            options: BackendOptions::parse_list(options).expect("a k=v,... option list"),
            backend: PhantomData,
        }
    }

    /// The backend options of this setting, as `k=v,...` (for a peer process).
    ///
    /// ```
    /// use blockwire_conformance::Setting;
    /// let s = Setting::<blockwire_shm::ShmBackend>::new("1", "copy_threads=1");
    /// assert_eq!(s.option_list(), "copy_threads=1");
    /// ```
    pub fn option_list(&self) -> String {
        self.options.to_list()
    }
}

impl<B> Clone for Setting<B> {
    fn clone(&self) -> Self {
        Setting {
            name: self.name.clone(),
            options: self.options.clone(),
            backend: PhantomData,
        }
    }
}

impl<B: OpenBackend> Default for Setting<B> {
    /// The backend with no options, named after its kind.
    fn default() -> Self {
        Setting {
            name: B::KIND.to_owned(),
            options: BackendOptions::new(),
            backend: PhantomData,
        }
    }
}

impl<B: OpenBackend> BackendFactory for Setting<B> {
    type Backend = B;

    fn name(&self) -> String {
        self.name.clone()
    }

    fn options(&self) -> BackendOptions {
        self.options.clone()
    }

    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<B> {
        // SAFETY: forwarded from the caller.
        unsafe { B::open(span, options) }
    }
}
