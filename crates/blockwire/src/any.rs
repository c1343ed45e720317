//! [`AnyTransport`] and opening a transport by backend name.

#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
use crate::BlockTransport;
use crate::{Region, TransportOptions};
use blockwire_core::{Error, Result};

/// A transport over any backend compiled into this build, chosen at run time by name (see
/// [`open`]). One variant per backend cargo feature; every [`crate::Transport`] method is
/// dispatched statically (`enum_dispatch`), with no virtual call.
///
///
/// ```
/// use blockwire::{open, AnyTransport, Region, Transport, TransportOptions};
/// let t: AnyTransport = open("shm", Region::new(2, 4096)?, TransportOptions::default())?;
/// assert!(matches!(t, AnyTransport::Shm(_)));
/// # Ok::<(), blockwire::Error>(())
/// ```
#[enum_dispatch::enum_dispatch(Transport)]
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyTransport {
    /// The shared-memory loopback (feature `shm`).
    #[cfg(feature = "shm")]
    Shm(BlockTransport<blockwire_shm::ShmBackend>),
    /// Raw UCX RMA (feature `ucx`).
    #[cfg(feature = "ucx")]
    Ucx(BlockTransport<blockwire_ucx::UcxBackend>),
    /// libfabric RDM endpoints (feature `libfabric`).
    #[cfg(feature = "libfabric")]
    Libfabric(BlockTransport<blockwire_libfabric::OfiBackend>),
    /// A NIXL agent (feature `nixl`).
    #[cfg(feature = "nixl")]
    Nixl(BlockTransport<blockwire_nixl::NixlBackend>),
}

/// Names of the backends compiled into this build.
///
/// ```
/// assert!(blockwire::backends().contains(&"shm"));
/// ```
pub fn backends() -> &'static [&'static str] {
    &[
        #[cfg(feature = "shm")]
        "shm",
        #[cfg(feature = "ucx")]
        "ucx",
        #[cfg(feature = "libfabric")]
        "libfabric",
        #[cfg(feature = "nixl")]
        "nixl",
    ]
}

/// Opens a transport over `region` with the backend named `backend` (see [`backends`]).
///
/// ```
/// use blockwire::{open, Error, Region, TransportOptions};
/// let t = open("shm", Region::new(8, 65536)?, TransportOptions::default())?;
/// let err = open("carrier-pigeon", Region::new(8, 65536)?, TransportOptions::default()).unwrap_err();
/// assert!(matches!(err, Error::UnknownBackend { .. }));
/// # Ok::<(), blockwire::Error>(())
/// ```
pub fn open(backend: &str, region: Region, options: TransportOptions) -> Result<AnyTransport> {
    match backend {
        #[cfg(feature = "shm")]
        "shm" => BlockTransport::open_with(region, options, |span, opts| {
            // SAFETY: `open_with` passes the span of the region the transport owns, and drops
            // the backend before that region.
            unsafe { blockwire_shm::ShmBackend::open(span, opts) }
        })
        .map(AnyTransport::Shm),
        #[cfg(feature = "ucx")]
        "ucx" => BlockTransport::open_with(region, options, |span, opts| {
            // SAFETY: as for shm: the span of the region the transport owns, which outlives
            // the backend and every peer and transfer it made.
            unsafe { blockwire_ucx::UcxBackend::open(span, opts) }
        })
        .map(AnyTransport::Ucx),
        #[cfg(feature = "libfabric")]
        "libfabric" => BlockTransport::open_with(region, options, |span, opts| {
            // SAFETY: as for shm.
            unsafe { blockwire_libfabric::OfiBackend::open(span, opts) }
        })
        .map(AnyTransport::Libfabric),
        #[cfg(feature = "nixl")]
        "nixl" => BlockTransport::open_with(region, options, |span, opts| {
            // SAFETY: as for shm.
            unsafe { blockwire_nixl::NixlBackend::open(span, opts) }
        })
        .map(AnyTransport::Nixl),
        other => {
            drop(region);
            Err(Error::UnknownBackend {
                name: other.to_owned(),
                available: backends().join(", "),
            })
        }
    }
}

/// Opens a transport whose region the backend allocates itself, where that helps the data path:
/// UCX allocates with `ucp_mem_map(ALLOCATE)`, which on shared memory lets peers write with
/// true one-sided puts instead of active messages; other backends get a [`Region::new`].
///
/// ```
/// use blockwire::{open_allocated, Transport, TransportOptions};
/// let t = open_allocated("shm", 8, 4096, TransportOptions::default())?;
/// assert_eq!(t.num_blocks(), 8);
/// # Ok::<(), blockwire::Error>(())
/// ```
pub fn open_allocated(
    backend: &str,
    num_blocks: u32,
    block_len: usize,
    options: TransportOptions,
) -> Result<AnyTransport> {
    match backend {
        #[cfg(feature = "ucx")]
        "ucx" => {
            let (ucx, span) = blockwire_ucx::UcxBackend::open_allocated(
                num_blocks,
                block_len,
                options.backend.clone(),
            )?;
            // SAFETY: the memory belongs to the backend, which the transport drops before the
            // region and which outlives every transfer (close waits, or a reaper holds it on a forced close);
            // the region never frees it.
            let region =
                unsafe { Region::from_raw_parts(span.base().as_ptr(), num_blocks, block_len)? };
            BlockTransport::open_with(region, options, |_, _| Ok(ucx)).map(AnyTransport::Ucx)
        }
        _ => open(backend, Region::new(num_blocks, block_len)?, options),
    }
}
