//! The part of a [`CloseFence`](super::CloseFence) that peers in its own process hold: a count
//! and a flag in memory, so a post there makes no system call for it.
//!
//! Around every post a peer counts itself in (`active`) and then checks `closed`; the close
//! sets `closed` and then waits until `active` is zero. With sequentially consistent
//! operations on both sides, either the post sees `closed` (and is not made) or the close sees
//! the post counted in (and waits for it): no post that checked before the close is still
//! running when the close returns.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::FenceRef;

pub(super) struct LocalFence {
    closed: AtomicBool,
    /// Posts holding it now.
    active: AtomicUsize,
}

/// This process's fences, by reference (weak: a fence leaves with its target).
static FENCES: Mutex<Vec<(FenceRef, Weak<LocalFence>)>> = Mutex::new(Vec::new());

impl LocalFence {
    /// A new fence, registered under `reference` for this process's peers.
    pub(super) fn register(reference: FenceRef) -> Arc<Self> {
        let fence = Arc::new(LocalFence {
            closed: AtomicBool::new(false),
            active: AtomicUsize::new(0),
        });
        let mut fences = FENCES.lock();
        fences.retain(|(_, f)| f.strong_count() > 0);
        fences.push((reference, Arc::downgrade(&fence)));
        fence
    }

    /// The fence of this process that `reference` names, while its target lives.
    pub(super) fn find(reference: &FenceRef) -> Option<Arc<Self>> {
        FENCES
            .lock()
            .iter()
            .find(|(r, _)| r == reference)
            .and_then(|(_, f)| f.upgrade())
    }

    /// Counts a post in; `false` (not counted) once closed.
    pub(super) fn enter(&self) -> bool {
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.leave();
            return false;
        }
        true
    }

    /// Counts a post out.
    pub(super) fn leave(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Marks it closed (no post enters from now on).
    pub(super) fn mark_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether no post is in.
    pub(super) fn is_idle(&self) -> bool {
        self.active.load(Ordering::SeqCst) == 0
    }
}
