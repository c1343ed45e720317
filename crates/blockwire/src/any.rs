//! [`AnyTransport`] and opening a transport by backend name.
//!
//! The backends compiled in are listed once, in the `backends!` table below: each row names
//! the cargo feature, the [`AnyTransport`] variant and the backend type, and the enum, the list
//! of names and the name-to-constructor table are generated from it. The module exists when at
//! least one backend feature is on (`cfg(any_backend)`, set by `build.rs`).

use crate::BlockTransport;
use crate::{Region, TransportOptions};
use blockwire_core::OpenBackend;
use blockwire_core::{Error, Result};

/// Opens a transport of one backend; a row of the name-to-constructor table.
type Constructor = fn(Region, TransportOptions) -> Result<AnyTransport>;

macro_rules! backends {
    ($($(#[doc = $doc:literal])* $feature:literal => $variant:ident($backend:ty),)*) => {
        /// A transport over any backend compiled into this build, chosen at run time by name
        /// (see [`open`]). One variant per backend cargo feature; every [`crate::Transport`]
        /// method is dispatched statically (`enum_dispatch`), with no virtual call.
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
            $(
                $(#[doc = $doc])*
                #[cfg(feature = $feature)]
                $variant(BlockTransport<$backend>),
            )*
        }

        /// Names of the backends compiled in, each with its constructor.
        const CONSTRUCTORS: &[(&str, Constructor)] = &[
            $(
                #[cfg(feature = $feature)]
                (<$backend as OpenBackend>::KIND, |region, options| {
                    BlockTransport::<$backend>::open(region, options).map(AnyTransport::$variant)
                }),
            )*
        ];

        /// Names of the backends compiled in.
        const NAMES: &[&str] = &[
            $(
                #[cfg(feature = $feature)]
                <$backend as OpenBackend>::KIND,
            )*
        ];
    };
}

backends! {
    /// The shared-memory loopback (feature `shm`).
    "shm" => Shm(blockwire_shm::ShmBackend),
    /// Raw UCX RMA (feature `ucx`).
    "ucx" => Ucx(blockwire_ucx::UcxBackend),
    /// libfabric RDM endpoints (feature `libfabric`).
    "libfabric" => Libfabric(blockwire_libfabric::OfiBackend),
    /// A NIXL agent (feature `nixl`).
    "nixl" => Nixl(blockwire_nixl::NixlBackend),
}

/// Names of the backends compiled into this build.
///
/// ```
/// assert!(blockwire::backends().contains(&"shm"));
/// ```
pub fn backends() -> &'static [&'static str] {
    NAMES
}

/// Opens a transport over `region` with the backend named `backend` (see [`backends()`]).
///
/// ```
/// use blockwire::{open, Error, Region, TransportOptions};
/// let t = open("shm", Region::new(8, 65536)?, TransportOptions::default())?;
/// let err = open("carrier-pigeon", Region::new(8, 65536)?, TransportOptions::default()).unwrap_err();
/// assert!(matches!(err, Error::UnknownBackend { .. }));
/// # Ok::<(), blockwire::Error>(())
/// ```
pub fn open(backend: &str, region: Region, options: TransportOptions) -> Result<AnyTransport> {
    match CONSTRUCTORS.iter().find(|(name, _)| *name == backend) {
        Some((_, construct)) => construct(region, options),
        None => {
            drop(region);
            Err(Error::UnknownBackend {
                name: backend.to_owned(),
                available: backends().join(", "),
            })
        }
    }
}

/// Opens a transport whose region the backend allocates itself, where that helps the data path:
/// UCX allocates with `ucp_mem_map(ALLOCATE)`, which on shared memory lets peers write with
/// true one-sided puts instead of active messages; shm allocates a [`Region::new_shared`],
/// which its peers in other processes map and copy straight into; other backends get a
/// [`Region::new`].
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
    #[cfg(feature = "ucx")]
    if backend == <blockwire_ucx::UcxBackend as OpenBackend>::KIND {
        let (ucx, span) = blockwire_ucx::UcxBackend::open_allocated(
            num_blocks,
            block_len,
            options.backend.clone(),
        )?;
        // SAFETY: the memory belongs to the backend, which the transport drops before the
        // region and which outlives every transfer (close waits, or a reaper holds it on a
        // forced close); the region never frees it.
        let region =
            unsafe { Region::from_raw_parts(span.base().as_ptr(), num_blocks, block_len)? };
        return BlockTransport::open_with(region, options, |_, transport_options| {
            // The backend was opened before the transport made its inbox and doorbell.
            ucx.adopt_transport(&transport_options);
            Ok(ucx)
        })
        .map(AnyTransport::Ucx);
    }
    #[cfg(feature = "shm")]
    if backend == <blockwire_shm::ShmBackend as OpenBackend>::KIND {
        return open(backend, Region::new_shared(num_blocks, block_len)?, options);
    }
    open(backend, Region::new(num_blocks, block_len)?, options)
}
