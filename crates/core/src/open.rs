//! [`OpenBackend`]: how a backend is opened over a region.

use crate::{Backend, BackendOptions, RegionSpan, Result};

/// A backend that opens over the span of a caller's region: what
/// `blockwire::BlockTransport::open` and the conformance suite's generic settings need to make
/// one, with no closure and no per-backend code.
///
/// The one safety argument (the region outlives the backend) is made once, by the transport that
/// owns the region; an implementation only documents what its library does with the memory.
///
/// ```
/// use blockwire_core::{Backend, BackendError, BackendOptions, BackendStats, BlockIndex,
///     Capabilities, Op, OpenBackend, PeerDescriptor, RegionSpan, Result, XferState};
///
/// /// A backend whose transfers complete at once and move nothing (illustration only).
/// struct Null;
/// impl Backend for Null {
///     type Peer = ();
///     type Xfer = ();
///     fn kind(&self) -> &'static str { Self::KIND }
///     fn capabilities(&self) -> Capabilities { Capabilities::default() }
///     fn address(&self) -> Vec<u8> { Vec::new() }
///     fn connect(&self, _: &PeerDescriptor) -> Result<(), BackendError> { Ok(()) }
///     fn disconnect(&self, _: ()) {}
///     fn post(&self, _: &(), _: Op, _: &[BlockIndex], _: &[BlockIndex])
///         -> Result<(), BackendError> { Ok(()) }
///     fn state(&self, _: &mut ()) -> XferState { XferState::Done }
///     fn release(&self, _: ()) -> Result<(), ()> { Ok(()) }
///     fn stats(&self) -> BackendStats { BackendStats::default() }
/// }
/// impl OpenBackend for Null {
///     const KIND: &'static str = "null";
///     unsafe fn open(_: RegionSpan, _: BackendOptions) -> Result<Self> { Ok(Null) }
/// }
///
/// let mut mem = vec![0u8; 64];
/// let base = std::ptr::NonNull::new(mem.as_mut_ptr()).expect("a vector is never null");
/// // SAFETY: `mem` outlives the backend.
/// let span = RegionSpan::new(base, 1, 64).expect("a valid shape");
/// let null = unsafe { Null::open(span, BackendOptions::new())? };
/// assert_eq!(null.kind(), "null");
/// # Ok::<(), blockwire_core::Error>(())
/// ```
pub trait OpenBackend: Backend + Sized {
    /// The backend's kind, as written in descriptors and accepted by `blockwire::open`
    /// (`"shm"`, `"ucx"`, ...); [`Backend::kind`] returns it.
    const KIND: &'static str;

    /// Opens the backend over `span` with `options` (the backend part of the transport's
    /// options; unknown keys are an error).
    ///
    /// # Safety
    ///
    /// The memory `span` describes must stay allocated, and must not be moved, until this
    /// backend and every peer and transfer it made have been dropped: the library reads and
    /// writes it, and remote peers write into it, until then.
    unsafe fn open(span: RegionSpan, options: BackendOptions) -> Result<Self>;
}
