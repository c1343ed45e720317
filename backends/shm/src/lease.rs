//! The lease: one page of memory shared between a region's backend and the peer processes
//! that copy into or out of the region, so the region's close can revoke them.
//!
//! `process_vm_writev` reaches any memory of a peer process with the right to it, whatever
//! the peer has registered; nothing in the kernel stops a writer once the peer frees its
//! region. The lease does: the region's backend creates a sealed memfd page at open and names
//! its file descriptor in the identity record a connecting peer reads; the peer duplicates
//! that descriptor (`pidfd_getfd`) and maps the page. The page holds a close fence's
//! [`Admission`] (`blockwire_core::kit::fence`): around every chunk it copies, a peer counts
//! itself in and checks the closed flag; the region's close sets the flag and then waits
//! until no chunk is counted in. Either the writer sees the flag (and copies nothing), or the
//! closer sees the writer counted in (and waits for its chunk): no chunk starts after close
//! returns.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use blockwire_core::kit::fence::Admission;
use blockwire_core::kit::{ProcessWatch, is_sealed, sealed_memfd};
use blockwire_core::{BackendError, BackendErrorKind};

use crate::mapping::map_shared;

const LEASE_MAGIC: u64 = u64::from_le_bytes(*b"BWLEASE1");
const PAGE: usize = 4096;

/// The shared words, at the start of the page.
#[repr(C)]
struct Words {
    magic: AtomicU64,
    /// Copies in progress, over every peer process, and whether the region's backend revoked
    /// access.
    admission: Admission,
}

/// A mapping of a lease page: the region's own (with its file descriptor) or a peer's.
pub(crate) struct Lease {
    words: NonNull<Words>,
    /// The memfd, kept open by the region's backend so that peers can duplicate it.
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is only accessed through atomics, from any thread; it is unmapped once,
// on drop.
unsafe impl Send for Lease {}
// SAFETY: as for `Send`.
unsafe impl Sync for Lease {}

/// A copy counted in; counts itself out when dropped.
pub(crate) struct Entered<'a>(&'a Words);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.admission.leave();
    }
}

/// Maps `fd`'s page shared.
fn map(fd: &OwnedFd) -> Result<NonNull<Words>, BackendError> {
    // SAFETY: the lease memfd is one page, sealed against shrinking (checked by `attach`, set
    // by `create`), so no access to the page can fault.
    unsafe { map_shared(fd, PAGE, 0, "the shm lease page") }.map(NonNull::cast)
}

impl Lease {
    /// A new lease page for this process's region (not revoked, no copy active).
    pub(crate) fn create() -> Result<Self, BackendError> {
        let fd = sealed_memfd(c"blockwire-shm-lease", PAGE)
            .map_err(|e| BackendError::from_io("a memfd for the shm lease", &e))?;
        let words = map(&fd)?;
        // SAFETY: the page is mapped, zeroed by the kernel, and aligned; atomics of it are
        // valid (all-zero is a valid value of each).
        unsafe { words.as_ref() }
            .magic
            .store(LEASE_MAGIC, Ordering::SeqCst);
        Ok(Lease {
            words,
            fd: Some(fd),
        })
    }

    /// The file descriptor a peer duplicates (the region's own lease only).
    pub(crate) fn fd(&self) -> i32 {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// Maps the lease of the region of `proc` whose file descriptor is `fd` there. Refused
    /// unless it is a sealed page holding the lease magic.
    pub(crate) fn attach(proc: &ProcessWatch, fd: i32) -> Result<Self, BackendError> {
        let bad = |why: &str| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("process {}: {why}", proc.pid()),
            )
        };
        let dup = proc.duplicate_fd(fd)?;
        if !is_sealed(&dup) {
            return Err(bad(
                "the descriptor named as its lease is not a sealed memfd",
            ));
        }
        let words = map(&dup)?;
        let lease = Lease { words, fd: None };
        if lease.words().magic.load(Ordering::SeqCst) != LEASE_MAGIC {
            return Err(bad("its lease page does not hold the lease magic"));
        }
        Ok(lease)
    }

    fn words(&self) -> &Words {
        // SAFETY: mapped for the lease's lifetime, aligned, and only accessed through atomics.
        unsafe { self.words.as_ref() }
    }

    /// Counts one copy in, unless access was revoked.
    pub(crate) fn enter(&self) -> Option<Entered<'_>> {
        let w = self.words();
        w.admission.enter().then(|| Entered(w))
    }

    /// Revokes access, then waits (up to `bound`) for the copies counted in to finish.
    /// Returns whether they did; a copy that does not finish belongs to a peer process that
    /// stopped (or died) in the middle of one.
    pub(crate) fn revoke(&self, bound: Duration) -> bool {
        self.words().admission.close(bound)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // SAFETY: the page was mapped by `map` and is unmapped once; no `Entered` outlives the
        // lease (it borrows it).
        unsafe { libc::munmap(self.words.as_ptr().cast(), PAGE) };
    }
}
