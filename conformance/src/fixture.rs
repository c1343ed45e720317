//! How the suite opens transports of a backend: [`Fixture`], and the two fixtures every
//! backend gets from its [`BackendFactory`]: [`Plain`] and [`Faulty`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use blockwire::{BlockTransport, Clock, Region, Transport, TransportOptions};
use blockwire_core::{Backend, BackendOptions, RegionSpan, Result};

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

    fn options(&self, backend: BackendOptions) -> TransportOptions {
        let options = TransportOptions::default()
            .with_config_fields(self.config_fields.clone())
            .with_close_timeout(self.close_timeout)
            .with_stall_timeout(self.stall_timeout)
            .with_max_consecutive_failures(self.max_consecutive_failures)
            .with_backend_options(backend);
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
/// use blockwire_conformance::{Fixture, Plain, ShmFactory, Spec};
/// let o = Plain(ShmFactory::default()).open(&Spec::new(4, 4096))?;
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
/// use blockwire_conformance::{Faulty, Fixture, ShmFactory, Spec};
/// fn pair<F: Fixture>(fx: &F) -> blockwire::Result<(F::Transport, F::Transport)> {
///     let spec = Spec::new(2, 64);
///     Ok((fx.open(&spec)?.transport, fx.open(&spec)?.transport))
/// }
/// let (a, b) = pair(&Faulty(ShmFactory::default()))?;
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
    /// use blockwire_conformance::{Faulty, Fixture, Plain, ShmFactory};
    /// assert_eq!(Plain(ShmFactory::default()).name(), "shm");
    /// assert_eq!(Faulty(ShmFactory::default()).name(), "shm+faults");
    /// ```
    fn name(&self) -> String;

    /// Opens a transport.
    ///
    /// ```
    /// use blockwire::Transport;
    /// use blockwire_conformance::{Faulty, Fixture, ShmFactory, Spec};
    /// let spec = Spec::new(4, 4096).with_fields(serde_json::json!({"model": "m"}));
    /// let o = Faulty(ShmFactory::default()).open(&spec)?;
    /// assert!(o.faults.is_some());
    /// assert_eq!(o.transport.block_len(), 4096);
    /// assert_eq!(o.transport.fingerprint().len(), 16);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>>;
}

/// Makes a backend over a region: what a backend crate provides to be run by the suite.
///
/// ```
/// use blockwire_conformance::{BackendFactory, Fixture, Plain, Spec};
/// use blockwire_core::{BackendOptions, RegionSpan, Result};
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
    /// use blockwire_conformance::{BackendFactory, ShmFactory};
    /// assert_eq!(ShmFactory::default().name(), "shm");
    /// ```
    fn name(&self) -> String;

    /// Backend options of this configuration.
    ///
    /// ```
    /// use blockwire_conformance::{BackendFactory, ShmFactory};
    /// assert!(ShmFactory::default().options().is_empty()); // the default: no options
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
    /// use blockwire_conformance::{BackendFactory, ShmFactory};
    /// use blockwire_core::{Backend, RegionSpan};
    /// let mut mem = vec![0u8; 2 * 64];
    /// let base = std::ptr::NonNull::new(mem.as_mut_ptr()).expect("a vector is never null");
    /// let span = RegionSpan::new(base, 2, 64).expect("a valid shape");
    /// let f = ShmFactory::default();
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
/// use blockwire_conformance::{Fixture, Plain, ShmFactory, Spec};
/// let fx = Plain(ShmFactory::default());
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
/// use blockwire_conformance::{Faulty, Fixture, ShmFactory, Spec};
/// let fx = Faulty(ShmFactory::default());
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

/// The shm backend with default options.
///
/// ```
/// use blockwire_conformance::{trials, BackendFactory, Plain, ShmFactory};
/// assert_eq!(ShmFactory::default().name(), "shm");
/// let all = trials(Plain(ShmFactory::default()));
/// assert!(all.iter().any(|t| t.name() == "shm::data::write_lands_at_remote_index"));
/// ```
#[cfg(feature = "shm")]
#[derive(Default)]
pub struct ShmFactory {
    _private: PhantomData<()>,
}

#[cfg(feature = "shm")]
impl BackendFactory for ShmFactory {
    type Backend = blockwire_shm::ShmBackend;

    fn name(&self) -> String {
        "shm".into()
    }

    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend> {
        // SAFETY: forwarded from the caller.
        unsafe { blockwire_shm::ShmBackend::open(span, options) }
    }
}

/// The ucx backend with one setting (backend options as `k=v,...`), named `ucx-<name>`.
///
/// ```
/// # #[cfg(feature = "ucx")] {
/// use blockwire_conformance::{BackendFactory, UcxFactory};
/// let f = UcxFactory::new("tcp", "tls=tcp");
/// assert_eq!(f.name(), "ucx-tcp");
/// # }
/// ```
#[cfg(feature = "ucx")]
pub struct UcxFactory {
    name: String,
    options: BackendOptions,
}

#[cfg(feature = "ucx")]
impl UcxFactory {
    /// A factory named `ucx-<name>` whose transports use `options` (`k=v,...`; panics on a
    /// malformed list, which is a bug in the suite).
    ///
    /// ```
    /// # #[cfg(feature = "ucx")] {
    /// let f = blockwire_conformance::UcxFactory::new("shm", "tls=posix,cma,peer_errors=false");
    /// # }
    /// ```
    pub fn new(name: &str, options: &str) -> Self {
        UcxFactory {
            name: format!("ucx-{name}"),
            options: BackendOptions::parse_list(options).expect("a k=v,... option list"),
        }
    }

    /// The backend options of this setting, as `k=v,...` (for a peer process).
    ///
    /// ```
    /// # #[cfg(feature = "ucx")] {
    /// let f = blockwire_conformance::UcxFactory::new("tcp", "tls=tcp");
    /// assert_eq!(f.option_list(), "tls=tcp");
    /// # }
    /// ```
    pub fn option_list(&self) -> String {
        self.options.to_list()
    }
}

#[cfg(feature = "ucx")]
impl BackendFactory for UcxFactory {
    type Backend = blockwire_ucx::UcxBackend;

    fn name(&self) -> String {
        self.name.clone()
    }

    fn options(&self) -> BackendOptions {
        self.options.clone()
    }

    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend> {
        // SAFETY: forwarded from the caller.
        unsafe { blockwire_ucx::UcxBackend::open(span, options) }
    }
}

/// The ucx backend over regions UCX allocates itself (`ucp_mem_map` ALLOCATE), named
/// `ucx-<name>-alloc`: on shared memory, the path of true one-sided puts. Without fault
/// injection.
///
/// ```
/// # #[cfg(feature = "ucx")] {
/// use blockwire_conformance::{Fixture, Spec, UcxAllocated};
/// let fx = UcxAllocated::new("tcp", "tls=tcp");
/// let o = fx.open(&Spec::new(4, 4096))?;
/// assert!(o.faults.is_none());
/// # }
/// # Ok::<(), blockwire::Error>(())
/// ```
#[cfg(feature = "ucx")]
pub struct UcxAllocated(UcxFactory);

#[cfg(feature = "ucx")]
impl UcxAllocated {
    /// A fixture named `ucx-<name>-alloc` with these backend options (`k=v,...`).
    ///
    /// ```
    /// # #[cfg(feature = "ucx")] {
    /// use blockwire_conformance::Fixture;
    /// let fx = blockwire_conformance::UcxAllocated::new("shm", "tls=posix,cma,peer_errors=false");
    /// assert_eq!(fx.name(), "ucx-shm-alloc");
    /// # }
    /// ```
    pub fn new(name: &str, options: &str) -> Self {
        UcxAllocated(UcxFactory::new(name, options))
    }
}

#[cfg(feature = "ucx")]
impl Fixture for UcxAllocated {
    type Transport = BlockTransport<blockwire_ucx::UcxBackend>;

    fn name(&self) -> String {
        format!("{}-alloc", self.0.name())
    }

    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>> {
        let (backend, span) = blockwire_ucx::UcxBackend::open_allocated(
            spec.num_blocks,
            spec.block_len,
            self.0.options(),
        )?;
        // SAFETY: the memory belongs to the backend, which the transport drops before the
        // region; the region never frees it.
        let region = unsafe {
            Region::from_raw_parts(span.base().as_ptr(), spec.num_blocks, spec.block_len)?
        };
        let transport =
            BlockTransport::open_with(region, spec.options(BackendOptions::new()), |_, _| {
                Ok(backend)
            })?;
        Ok(Opened {
            transport,
            faults: None,
        })
    }
}

/// The libfabric backend with one setting (backend options as `k=v,...`), named
/// `libfabric-<name>`.
///
/// ```
/// # #[cfg(feature = "libfabric")] {
/// use blockwire_conformance::{BackendFactory, LibfabricFactory};
/// let f = LibfabricFactory::new("shm", "provider=shm");
/// assert_eq!(f.name(), "libfabric-shm");
/// # }
/// ```
#[cfg(feature = "libfabric")]
pub struct LibfabricFactory {
    name: String,
    options: BackendOptions,
}

#[cfg(feature = "libfabric")]
impl LibfabricFactory {
    /// A factory named `libfabric-<name>` whose transports use `options` (`k=v,...`; panics
    /// on a malformed list, which is a bug in the suite).
    ///
    /// ```
    /// # #[cfg(feature = "libfabric")] {
    /// let f = blockwire_conformance::LibfabricFactory::new("tcp", "provider=tcp,domain=lo");
    /// # }
    /// ```
    pub fn new(name: &str, options: &str) -> Self {
        LibfabricFactory {
            name: format!("libfabric-{name}"),
            options: BackendOptions::parse_list(options).expect("a k=v,... option list"),
        }
    }
}

#[cfg(feature = "libfabric")]
impl BackendFactory for LibfabricFactory {
    type Backend = blockwire_libfabric::OfiBackend;

    fn name(&self) -> String {
        self.name.clone()
    }

    fn options(&self) -> BackendOptions {
        self.options.clone()
    }

    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend> {
        // SAFETY: forwarded from the caller.
        unsafe { blockwire_libfabric::OfiBackend::open(span, options) }
    }
}

/// The NIXL backend (UCX plugin, DRAM), named `nixl`.
///
/// ```
/// # #[cfg(feature = "nixl")] {
/// use blockwire_conformance::{BackendFactory, NixlFactory};
/// assert_eq!(NixlFactory::default().name(), "nixl");
/// # }
/// ```
#[cfg(feature = "nixl")]
#[derive(Default)]
pub struct NixlFactory {
    _private: PhantomData<()>,
}

#[cfg(feature = "nixl")]
impl BackendFactory for NixlFactory {
    type Backend = blockwire_nixl::NixlBackend;

    fn name(&self) -> String {
        "nixl".into()
    }

    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend> {
        // SAFETY: forwarded from the caller.
        unsafe { blockwire_nixl::NixlBackend::open(span, options) }
    }
}
