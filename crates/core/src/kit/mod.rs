//! The backend kit: the mechanisms several backends share, written once. A backend only
//! connects, posts, observes and releases; these are the parts it builds that from.
//!
//! - [`TransferCell`]: one transfer's outcome (running, done, or failed with its first
//!   failure), set by whatever completes it and read by `Backend::state`;
//! - [`Doorbell`]: rung when a transfer ends, for a caller that waits for completions;
//! - [`CuttableLink`]: a connection that posts hold and a cut takes, failing the transfers
//!   posted through it;
//! - [`PostedTransfers`]: the transfers posted to one peer, for a cut;
//! - [`LiveCounts`]: live peers and transfers, for `Backend::stats`;
//! - [`ProgressThread`]: a thread that drives a library's progress while nobody polls;
//! - [`ProcessWatch`]: whether a peer's process is still the one that registered (pidfd);
//! - [`AddressWriter`] and [`AddressReader`]: a backend's address bytes, written and read
//!   back with every length checked, and sealed against alteration;
//! - [`Inbox`]: the notifications that reached a transport, queued by sender until drained;
//! - [`spawn`]: how each of blockwire's own threads is started (a batch thread, which never
//!   preempts the caller's threads when woken);
//! - [`contiguous_runs`] and [`checked_runs`]: a transfer's blocks that are adjacent on both
//!   sides, as runs a backend moves with one operation each;
//! - [`advise_huge_pages`]: the transparent-huge-page hint for large mappings;
//! - [`sealed_memfd`]: a file in memory whose size cannot change, which peers map safely;
//! - [`fence`]: a target's close against same-host peers that copy into or out of its memory
//!   inside their own posts.

mod address;
mod cell;
mod doorbell;
pub mod fence;
mod handoff;
mod inbox;
mod link;
mod live;
mod memfd;
mod pages;
mod posted;
pub mod process;
mod progress;
mod runs;
mod thread;

pub use crate::name::random_u64;
pub use address::{AddressReader, AddressWriter, SEAL_LEN};
pub use cell::TransferCell;
pub use doorbell::Doorbell;
pub use handoff::HandOff;
pub use inbox::{Delivery, Inbox, InboxStats};
pub use link::{CuttableLink, LinkHold};
pub use live::{Live, LiveCounts};
pub use memfd::{SEALS, is_sealed, map_shared, sealed_memfd};
pub use pages::{HUGE_PAGE_HINT_BYTES, advise_huge_pages};
pub use posted::PostedTransfers;
pub use process::ProcessWatch;
pub use progress::{DEFAULT_IDLE_SLEEP, ProgressThread};
pub use runs::{
    ByteRun, ByteRuns, ContiguousRuns, DEFAULT_MAX_RUN_BYTES, Run, checked_runs, contiguous_runs,
};
pub use thread::{THREAD_POLICY_ENV, spawn};
