//! # blockwire
//!
//! One-sided block transfers between peers: a local registered memory region, a remote peer's
//! registered region, and WRITE (and READ) of block lists between them, through pluggable data
//! paths. Built for moving KV-cache blocks between inference hosts and processes.
//!
//! - [`Transport`]: the user contract (see its table of rules).
//! - [`BlockTransport`]: the one implementation of that contract over any
//!   [`Backend`].
//! - [`AnyTransport`] and [`open`]: a transport chosen by backend name at run time.
//! - [`Region`]: the local block memory, owned or borrowed from a KV cache.
//! - [`Clock`]: the time the stall watchdog reads ([`ManualClock`] for tests).
//!
//! ```
//! use blockwire::{open, CancelMode, Region, Transport, TransportOptions};
//!
//! // Two transports in one process; across processes the descriptor travels over the
//! // caller's control plane as bytes.
//! let prefill = open("shm", Region::new(16, 64 * 1024)?, TransportOptions::default())?;
//! let decode = open("shm", Region::new(16, 64 * 1024)?, TransportOptions::default())?;
//! let bytes = decode.descriptor()?.to_bytes();
//!
//! let peer = "decode-0".into();
//! prefill.add_remote_peer(&peer, &blockwire::PeerDescriptor::from_bytes(&bytes)?)?;
//! prefill.region().fill_block(2, 0xAB)?;
//! let id = prefill.write_blocks(&peer, &[2], &[9])?;
//! loop {
//!     let r = prefill.poll(Some(&peer))?;
//!     if r.done.contains(&id) { break; }
//!     assert!(r.failed.is_empty());
//! }
//! assert_eq!(decode.region().block(9)?, vec![0xAB; 64 * 1024]);
//! assert!(prefill.cancel(&[id], CancelMode::Wait)?.is_empty()); // already reported: ignored
//! prefill.close()?;
//! # Ok::<(), blockwire::Error>(())
//! ```

#[cfg(any_backend)]
mod any;
mod block_transport;
mod clock;
pub mod fingerprint;
mod options;
mod region;
mod registration;
pub mod telemetry;
mod transport;

#[cfg(any_backend)]
pub use any::{AnyTransport, backends, open, open_allocated};
pub use block_transport::BlockTransport;
pub use blockwire_core::kit::InboxStats;
pub use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendOptions, BackendStats, BlockIndex, CancelMode,
    Capabilities, DescriptorError, Error, FailureReason, MAX_NAME_LEN, MAX_NOTIFICATION_LEN,
    Notification, Op, OpenBackend, OsError, PeerDescriptor, PeerFault, PeerId, PollResult,
    RegionSpan, RegisteredRegion, Result, SharedMemory, TransferId, TransferKind, TransferRecord,
    XferState, report_chain,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use options::{
    DEFAULT_CLOSE_TIMEOUT, DEFAULT_MAX_CONSECUTIVE_FAILURES, DEFAULT_STALL_TIMEOUT,
    TransportOptions,
};
pub use region::{REGION_ALIGN, Region};
pub use registration::Registration;
pub use telemetry::{LatencySummary, PeerTelemetry, TelemetrySnapshot};
pub use transport::Transport;

/// The nixl backend's crate (feature `nixl`): [`nixl::descriptor_from_nixl`] makes a peer's
/// descriptor from a plain NIXL agent's metadata and geometry (vLLM's `NixlTransport` tuple),
/// [`nixl::agent_metadata`] takes this side's raw NIXL metadata out of its descriptor.
#[cfg(feature = "nixl")]
pub use blockwire_nixl as nixl;

/// The ucx backend's crate (feature `ucx`): [`ucx::tcp_tuning`] says which UCX settings the
/// backend applies beyond `tls` and `net_devices`, for a program that drives UCX itself alongside.
#[cfg(feature = "ucx")]
pub use blockwire_ucx as ucx;

/// The libfabric backend's crate (feature `libfabric`): [`libfabric::provider_named`] says
/// which provider an option value (or the default) picks, and
/// [`libfabric::reap_stale_shm_files`] removes what a killed process's `shm` endpoints left.
#[cfg(feature = "libfabric")]
pub use blockwire_libfabric as libfabric;
