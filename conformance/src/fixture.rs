//! How the suite opens transports of a backend: [`Fixture`], and the two fixtures every
//! backend gets from its [`BackendFactory`]: [`Plain`] and [`Faulty`].

use std::marker::PhantomData;
use std::time::Duration;

use blockwire::{BlockTransport, Region, Transport, TransportOptions};
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

    fn options(&self, backend: BackendOptions) -> TransportOptions {
        TransportOptions::default()
            .with_config_fields(self.config_fields.clone())
            .with_close_timeout(self.close_timeout)
            .with_backend_options(backend)
    }
}

/// A transport a case opened, with its fault switches when the fixture injects faults.
pub struct Opened<T> {
    /// The transport.
    pub transport: T,
    /// The fault switches of its backend (`None` for a plain fixture).
    pub faults: Option<FaultPlan>,
}

/// Opens transports of one backend configuration for the suite.
pub trait Fixture: Send + Sync + 'static {
    /// The transport type.
    type Transport: Transport + 'static;

    /// Name used as the first part of every case's test name (`shm`, `shm+faults`).
    fn name(&self) -> String;

    /// Opens a transport.
    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>>;
}

/// Makes a backend over a region: what a backend crate provides to be run by the suite.
pub trait BackendFactory: Send + Sync + 'static {
    /// The backend.
    type Backend: Backend;

    /// Name of this configuration (`shm`, `ucx-tcp`, ...).
    fn name(&self) -> String;

    /// Backend options of this configuration.
    fn options(&self) -> BackendOptions {
        BackendOptions::new()
    }

    /// Opens the backend over `span`.
    ///
    /// # Safety
    ///
    /// `span` must stay valid until the backend is dropped.
    unsafe fn make(&self, span: RegionSpan, options: BackendOptions) -> Result<Self::Backend>;
}

/// The backend as it is.
pub struct Plain<F>(pub F);

/// The backend wrapped in [`FaultyBackend`]; named `<name>+faults`.
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
