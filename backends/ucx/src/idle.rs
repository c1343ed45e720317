//! Endpoints of disconnected peers, kept open for the next connection to the same worker.
//!
//! UCX 1.13 never destroys an endpoint closed gracefully while the peer's side of the
//! connection lives: `ucp_ep_disconnected` keeps an endpoint with a connection from the remote
//! until the worker is destroyed ("to enable remote endpoints keep sending"), and the peer's
//! UCX keeps the endpoint it made for it. Every add and remove of a live peer then left a
//! socket on each side (2 file descriptors a cycle over TCP) until the process ran out of them.
//! A forced close destroys this side's endpoint, but the peer's UCX then resets its own, and
//! with it the peer's registration of this transport where both registered each other (UCX
//! pairs the two directions on one connection). So a disconnected peer's healthy endpoint is
//! kept here instead, and the next connection to the same worker address takes it: repeated
//! adds and removes of the same worker reuse one connection, and what is kept is bounded by
//! the peers' workers registered at once. An endpoint whose peer failed meanwhile (its error
//! callback ran) is not taken again: it is handed back for a forced close. At most
//! [`MAX_IDLE`] are kept (endpoints to many distinct workers, or to addresses that never
//! answer): the oldest beyond that is handed back to be closed as before. The worker's
//! teardown destroys what is left here with every other endpoint.

use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use ucx_sys::*;

use crate::peer::PeerHealth;

/// An open endpoint no peer uses, with its error-callback state.
pub(crate) struct IdleEndpoint {
    /// The worker address it connects to (the descriptor's, verbatim).
    pub(crate) worker_address: Box<[u8]>,
    pub(crate) ep: ucp_ep_h,
    /// The `Arc` leaked for the endpoint's error callback (see `UcxPeer::health`).
    pub(crate) health: *const PeerHealth,
}

// SAFETY: the endpoint belongs to a UCS_THREAD_MODE_MULTI worker, which serializes every call
// on it; `health` points to an `Arc` allocation whose ownership moves with this value.
unsafe impl Send for IdleEndpoint {}

impl IdleEndpoint {
    /// Whether its error callback has not run.
    pub(crate) fn healthy(&self) -> bool {
        // SAFETY: `health` lives as long as the endpoint (this value owns it).
        unsafe { &*self.health }.status.load(Ordering::Acquire) == UCS_OK
    }
}

/// How many idle endpoints a worker keeps.
pub(crate) const MAX_IDLE: usize = 64;

/// The idle endpoints of one worker.
#[derive(Default)]
pub(crate) struct IdleEndpoints(Mutex<Vec<IdleEndpoint>>);

impl IdleEndpoints {
    /// Keeps `idle` for the next connection to its worker address; returns the oldest kept
    /// when there are more than [`MAX_IDLE`], which the caller closes.
    pub(crate) fn put(&self, idle: IdleEndpoint) -> Option<IdleEndpoint> {
        // SAFETY: as in `healthy`.
        unsafe { &*idle.health }.set_idle(true);
        let mut all = self.0.lock();
        all.push(idle);
        (all.len() > MAX_IDLE).then(|| all.remove(0))
    }

    /// A healthy idle endpoint to `worker_address`, if one is kept, and every idle endpoint
    /// whose peer failed (to any address), which the caller closes.
    pub(crate) fn take(&self, worker_address: &[u8]) -> (Option<IdleEndpoint>, Vec<IdleEndpoint>) {
        let mut all = self.0.lock();
        let (healthy, failed): (Vec<_>, Vec<_>) = all.drain(..).partition(IdleEndpoint::healthy);
        *all = healthy;
        let found = all
            .iter()
            .position(|e| *e.worker_address == *worker_address)
            .map(|i| all.remove(i));
        if let Some(e) = &found {
            // SAFETY: as in `healthy`.
            unsafe { &*e.health }.set_idle(false);
        }
        (found, failed)
    }

    /// Every idle endpoint (the worker is being torn down).
    pub(crate) fn drain(&self) -> Vec<IdleEndpoint> {
        std::mem::take(&mut *self.0.lock())
    }
}
