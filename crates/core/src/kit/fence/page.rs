//! A close fence's page: one sealed memfd page that a target and every peer holding its fence
//! map, in the target's process or in others. No system call on either side per post.
//!
//! Each peer claims a slot of its own in the page ([`FencePage::claim`]): its process id and
//! a count of its posts in flight. Around every post it counts itself in and then checks the
//! page's closed flag ([`PageSlot::enter`]); the target's close sets the flag and then waits
//! until every slot's count is zero ([`FencePage::close`]). With sequentially consistent
//! operations on both sides, either the post sees the flag (and is not made) or the close
//! sees the post counted in (and waits for it): no post that checked before the close is
//! still running when the close returns. A slot whose process is gone counts for nothing (a
//! peer killed inside a post does not hold every later close of the target for the whole
//! bound), and its slot is taken over by the next peer that finds no free one.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::{TOKEN_LEN, wait_until};
use crate::kit::{is_sealed, map_shared, sealed_memfd};

const PAGE: usize = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"BWFPAGE1");
/// Slots in the page: peers holding the fence at once.
pub(super) const SLOTS: usize = (PAGE - 32) / 8;

/// One peer's slot.
#[repr(C)]
struct Slot {
    /// The peer's process, 0 while the slot is free.
    pid: AtomicU32,
    /// Its posts in flight.
    active: AtomicU32,
}

/// The page.
#[repr(C)]
struct Words {
    magic: AtomicU64,
    token: [AtomicU64; 2],
    /// Non-zero once the target closed.
    closed: AtomicU32,
    _reserved: AtomicU32,
    slots: [Slot; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Words>() == PAGE);

/// A mapping of a fence page: the target's or a peer's.
pub(super) struct FencePage {
    words: NonNull<Words>,
}

// SAFETY: the mapping is only accessed through atomics, from any thread; it is unmapped once,
// on drop, when no reference to it is left.
unsafe impl Send for FencePage {}
// SAFETY: as for `Send`.
unsafe impl Sync for FencePage {}

impl Drop for FencePage {
    fn drop(&mut self) {
        // SAFETY: the page mapped by `map`, unmapped once; nothing borrows it past `self`.
        unsafe { libc::munmap(self.words.as_ptr().cast(), PAGE) };
    }
}

/// Whether process `pid` may still exist: only "no such process" says it is gone.
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    unsafe {
        libc::kill(pid, 0) == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
}

impl FencePage {
    /// Maps `fd`'s first page shared.
    ///
    /// # Safety
    ///
    /// `fd` must be sealed against shrinking and at least a page long, so that no access to
    /// the mapping can fault.
    unsafe fn map(fd: &impl AsRawFd) -> io::Result<Self> {
        // SAFETY: the caller's contract is `map_shared`'s, for one page from the start.
        let words = unsafe { map_shared(fd, PAGE, 0) }?.cast();
        Ok(FencePage { words })
    }

    fn words(&self) -> &Words {
        // SAFETY: mapped for `self`'s lifetime, page-aligned, and only accessed through
        // atomics (any bit pattern is a valid value of each).
        unsafe { self.words.as_ref() }
    }

    /// A new page, open, holding `token`; and its memfd, which peers reopen or duplicate.
    pub(super) fn create(token: [u8; TOKEN_LEN]) -> io::Result<(OwnedFd, Self)> {
        let fd = sealed_memfd(c"blockwire-close-fence", PAGE)?;
        // SAFETY: a sealed memfd of exactly one page.
        let page = unsafe { Self::map(&fd) }?;
        let w = page.words();
        for (word, bytes) in w.token.iter().zip(token.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            word.store(u64::from_le_bytes(b), Ordering::SeqCst);
        }
        w.magic.store(MAGIC, Ordering::SeqCst);
        Ok((fd, page))
    }

    /// Maps the page of another open (or a duplicate) of a fence's memfd. Refused unless it
    /// is a sealed memfd of a page or more, holding the magic.
    pub(super) fn attach(fd: &impl AsRawFd) -> Result<Self, String> {
        if !is_sealed(fd) {
            return Err("not a sealed memfd".into());
        }
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes one `stat` into `st`, which is live and writable.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(format!("fstat: {}", io::Error::last_os_error()));
        }
        if usize::try_from(st.st_size).map_or(true, |size| size < PAGE) {
            return Err(format!("{} bytes, less than a page", st.st_size));
        }
        // SAFETY: sealed against shrinking (checked) and at least a page long (checked).
        let page = unsafe { Self::map(fd) }.map_err(|e| format!("mmap: {e}"))?;
        if page.words().magic.load(Ordering::SeqCst) != MAGIC {
            return Err("no close fence's magic".into());
        }
        Ok(page)
    }

    /// The token it holds.
    pub(super) fn token(&self) -> [u8; TOKEN_LEN] {
        let mut token = [0u8; TOKEN_LEN];
        for (bytes, word) in token.chunks_exact_mut(8).zip(&self.words().token) {
            bytes.copy_from_slice(&word.load(Ordering::SeqCst).to_le_bytes());
        }
        token
    }

    /// A slot of its own for a peer of this process: a free one, else one whose process is
    /// gone; `None` when every slot belongs to a live peer.
    pub(super) fn claim(self: &Arc<Self>) -> Option<PageSlot> {
        let me = std::process::id();
        let slots = &self.words().slots;
        let free = slots.iter().position(|s| {
            s.pid
                .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        let index = free.or_else(|| {
            slots.iter().position(|s| {
                let pid = s.pid.load(Ordering::SeqCst);
                pid != me
                    && !alive(pid)
                    && s.pid
                        .compare_exchange(pid, me, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
            })
        })?;
        // A slot taken over still holds the count its dead process left: it starts again.
        slots[index].active.store(0, Ordering::SeqCst);
        Some(PageSlot {
            page: self.clone(),
            index,
        })
    }

    /// Whether the target closed.
    pub(super) fn is_closed(&self) -> bool {
        self.words().closed.load(Ordering::SeqCst) != 0
    }

    /// Marks it closed: no post is admitted from now on.
    pub(super) fn mark_closed(&self) {
        self.words().closed.store(1, Ordering::SeqCst);
    }

    /// Whether no live peer has a post in flight.
    fn is_idle(&self) -> bool {
        self.words().slots.iter().all(|s| {
            s.active.load(Ordering::SeqCst) == 0 || {
                let pid = s.pid.load(Ordering::SeqCst);
                pid == 0 || !alive(pid)
            }
        })
    }

    /// Marks it closed, then waits (at most `bound`) until no live peer has a post in
    /// flight: `true` when none has, `false` when one still had after `bound` (its process
    /// stopped inside it). Idempotent.
    pub(super) fn close(&self, bound: Duration) -> bool {
        self.mark_closed();
        wait_until(bound, || Ok(self.is_idle())).unwrap_or(false)
    }
}

/// A peer's slot in a fence page; freed when dropped.
pub(super) struct PageSlot {
    page: Arc<FencePage>,
    index: usize,
}

impl PageSlot {
    fn slot(&self) -> &Slot {
        &self.page.words().slots[self.index]
    }

    /// Counts a post in: `false` (not counted) once the target closed, and the post must not
    /// be made. Every `true` needs one [`leave`](Self::leave) when the post returns.
    pub(super) fn enter(&self) -> bool {
        let slot = self.slot();
        slot.active.fetch_add(1, Ordering::SeqCst);
        if self.page.is_closed() {
            self.leave();
            return false;
        }
        true
    }

    /// Counts a post out.
    pub(super) fn leave(&self) {
        self.slot().active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Its place in the page.
    #[cfg(test)]
    pub(super) fn index(&self) -> usize {
        self.index
    }

    /// Pretends the slot's process is `pid` (tests of a peer that died inside a post).
    #[cfg(test)]
    pub(super) fn set_pid(&self, pid: u32) {
        self.slot().pid.store(pid, Ordering::SeqCst);
    }
}

impl Drop for PageSlot {
    fn drop(&mut self) {
        // Only a slot still ours: one taken over meanwhile (we looked dead) is the new owner's.
        let _ = self.slot().pid.compare_exchange(
            std::process::id(),
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}
