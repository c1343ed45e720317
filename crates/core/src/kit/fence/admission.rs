//! The count and the flag a close fence admits posts by, where both sides can reach the same
//! memory: a peer in the target's own process (on the heap), or a peer process that maps a
//! page of the target's (the `shm` backend's lease).
//!
//! Around every post (or copy) a peer counts itself in ([`Admission::enter`]) and then checks
//! the flag; the close sets the flag and then waits until the count is zero
//! ([`Admission::close`]). With sequentially consistent operations on both sides, either the
//! post sees the flag (and is not made) or the close sees the post counted in (and waits for
//! it): no post that checked before the close is still running when the close returns. No
//! system call on either side but the close's naps.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::wait_until;

/// A close fence's count of posts in flight and its closed flag (see the module docs). Its
/// layout is fixed (`repr(C)`, two `u32`s, all zero when new), so it can live in a page that
/// several processes map.
///
/// ```
/// use blockwire_core::kit::fence::Admission;
/// use std::time::Duration;
/// let fence = Admission::new();
/// assert!(fence.enter(), "open: a post is admitted");
/// fence.leave(); // the post returned
/// assert!(fence.close(Duration::ZERO), "no post in flight: the close returns at once");
/// assert!(!fence.enter(), "closed: refused");
/// ```
#[repr(C)]
#[derive(Debug, Default)]
pub struct Admission {
    /// Non-zero once closed.
    closed: AtomicU32,
    /// Posts in flight.
    active: AtomicU32,
}

impl Admission {
    /// Open, no post in flight.
    pub const fn new() -> Self {
        Admission {
            closed: AtomicU32::new(0),
            active: AtomicU32::new(0),
        }
    }

    /// Counts a post in: `false` (not counted) once closed, and the post must not be made.
    /// Every `true` needs one [`leave`](Self::leave) when the post returns.
    pub fn enter(&self) -> bool {
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) != 0 {
            self.leave();
            return false;
        }
        true
    }

    /// Counts a post out.
    pub fn leave(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Marks it closed: no post is admitted from now on.
    pub fn mark_closed(&self) {
        self.closed.store(1, Ordering::SeqCst);
    }

    /// Whether no post is in flight.
    pub fn is_idle(&self) -> bool {
        self.active.load(Ordering::SeqCst) == 0
    }

    /// Marks it closed, then waits (at most `bound`) until no post is in flight: `true` when
    /// none is, `false` when one still was after `bound` (its poster stopped, or died, inside
    /// it). Idempotent.
    pub fn close(&self, bound: Duration) -> bool {
        self.mark_closed();
        wait_until(bound, || Ok(self.is_idle())).unwrap_or(false)
    }
}
