//! The part of a [`CloseFence`](super::CloseFence) that peers in its own process hold: its
//! [`Admission`] in memory, found by the fence's reference, so a post there makes no system
//! call for it.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{Admission, FenceRef};

/// This process's fences, by reference (weak: a fence leaves with its target).
static FENCES: Mutex<Vec<(FenceRef, Weak<Admission>)>> = Mutex::new(Vec::new());

/// A new admission, registered under `reference` for this process's peers.
pub(super) fn register(reference: FenceRef) -> Arc<Admission> {
    let fence = Arc::new(Admission::new());
    let mut fences = FENCES.lock();
    fences.retain(|(_, f)| f.strong_count() > 0);
    fences.push((reference, Arc::downgrade(&fence)));
    fence
}

/// The admission of this process's fence that `reference` names, while its target lives.
pub(super) fn find(reference: &FenceRef) -> Option<Arc<Admission>> {
    FENCES
        .lock()
        .iter()
        .find(|(r, _)| r == reference)
        .and_then(|(_, f)| f.upgrade())
}
