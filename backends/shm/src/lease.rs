//! The lease: a region's close fence (`blockwire_core::kit::fence::CloseFence`), shared with
//! the peer processes that copy into or out of the region, so the region's close can revoke
//! them.
//!
//! `process_vm_writev` reaches any memory of a peer process with the right to it, whatever
//! the peer has registered; nothing in the kernel stops a writer once the peer frees its
//! region. The lease does: the region's backend creates the fence's sealed memfd page at open
//! and names its descriptor in the identity record a connecting peer reads; the peer
//! duplicates that descriptor (`pidfd_getfd`) and maps the page, taking a slot of its own in
//! it. Around every chunk it copies, a peer counts itself in and checks the closed mark; the
//! region's close sets the mark and then waits until no live peer has a chunk counted in: no
//! chunk starts after close returns.

use std::sync::Arc;

use blockwire_core::kit::ProcessWatch;
use blockwire_core::kit::fence::{CloseFence, FenceHold, PeerFence};
use blockwire_core::{BackendError, BackendErrorKind};

/// The region's side of its lease.
pub(crate) struct Lease(CloseFence);

impl Lease {
    /// A new lease for this process's region (not revoked, no copy active).
    pub(crate) fn create() -> Result<Self, BackendError> {
        CloseFence::create().map(Lease)
    }

    /// The file descriptor a peer duplicates.
    pub(crate) fn fd(&self) -> i32 {
        self.0.raw_fd()
    }

    /// Revokes access, then waits (at most `kit::fence::CLOSE_WAIT`) for the copies counted in
    /// to finish. Returns whether they did; a copy that does not finish belongs to a peer
    /// process that stopped in the middle of one (logged by the fence).
    pub(crate) fn revoke(&self) -> bool {
        self.0.close().is_ok()
    }
}

/// A peer's side of a region's lease: its slot in the region's fence.
pub(crate) struct PeerLease(Arc<PeerFence>);

impl PeerLease {
    /// Maps the lease of the region of `proc` whose file descriptor is `fd` there. Refused
    /// unless it is a sealed memfd page holding a close fence's magic, with a slot free.
    pub(crate) fn attach(proc: &ProcessWatch, fd: i32) -> Result<Self, BackendError> {
        let dup = proc.duplicate_fd(fd)?;
        PeerFence::from_duplicate(&dup, proc.pid().unsigned_abs())
            .map(PeerLease)
            .map_err(|why| {
                BackendError::new(
                    BackendErrorKind::MalformedAddress,
                    format!(
                        "process {}: the descriptor named as its lease: {why}",
                        proc.pid()
                    ),
                )
            })
    }

    /// Counts one copy in, unless access was revoked; counted out when dropped.
    pub(crate) fn enter(&self) -> Option<FenceHold> {
        self.0.hold().ok()
    }
}
