//! Vocabulary types and the [`Backend`] plugin contract of blockwire.
//!
//! blockwire moves fixed-size blocks from a local registered memory region straight into a
//! remote peer's registered region (WRITE), or back (READ), one-sided. This crate holds what
//! every part of the framework shares:
//!
//! - identifiers: [`PeerId`], [`TransferId`], [`BlockIndex`];
//! - the operations and results: [`Op`], [`CancelMode`], [`PollResult`], [`XferState`],
//!   [`FailureReason`], [`PeerFault`];
//! - [`PeerDescriptor`]: what a peer needs to connect, with a versioned byte encoding whose
//!   decoder treats its input as untrusted;
//! - [`Notification`]: a short message that travels with a transfer (or alone) to its target;
//! - [`Error`] and [`BackendError`];
//! - the [`Backend`] trait a data path implements, with its [`Capabilities`] and
//!   [`BackendStats`], and [`OpenBackend`], how one opens over a region;
//! - [`kit`]: the mechanisms several backends share (transfer cells, cuttable links, live
//!   counts, progress threads, process watches).
//!
//! The semantics (generations, per-peer polling, cancel modes, validation, close) live once, in
//! the `blockwire` crate; a backend only connects, posts, observes and releases.
//!
//! ```
//! use blockwire_core::{Op, PeerId, TransferId};
//! let peer = PeerId::from("decode-0");
//! assert_eq!(peer.as_str(), "decode-0");
//! assert_eq!(TransferId(7).get(), 7);
//! assert_eq!(Op::Write.to_string(), "WRITE");
//! ```

mod backend;
mod descriptor;
mod error;
mod ids;
pub mod kit;
mod name;
mod notification;
mod open;
mod options;
mod record;
mod registered;
mod span;
mod xfer;

pub use backend::{Backend, BackendStats, Capabilities};
pub use descriptor::{DescriptorError, FORMAT_VERSION, PeerDescriptor};
pub use error::{BackendError, BackendErrorKind, Error, OsError, Result, report_chain};
pub use ids::{BlockIndex, PeerId, TransferId};
pub use name::unique_name;
pub use notification::{
    MAX_NAME_LEN, MAX_NOTIFICATION_LEN, Notification, decode_frame, encode_frame, name_problem,
};
pub use open::OpenBackend;
pub use options::{BackendOptions, DEFAULT_STALL_TIMEOUT};
pub use record::{TransferKind, TransferRecord};
pub use registered::RegisteredRegion;
pub use span::{BlockPair, RegionSpan, SharedMemory};
pub use xfer::{CancelMode, FailureReason, Op, PeerFault, PollResult, XferState};
