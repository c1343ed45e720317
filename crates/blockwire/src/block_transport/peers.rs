//! The peer table: generations, registrations in flight, published connections.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use blockwire_core::{
    Backend, BackendError, BackendErrorKind, FailureReason, PeerFault, PeerId, XferState,
};
use parking_lot::Mutex;

/// A connected, published (or once published) peer. The backend peer is disconnected when the
/// last holder drops it: the peer table while published, and every transfer posted to it
/// until that transfer is released. So a removed peer's resources outlive its running
/// transfers, and no more.
pub(crate) struct PeerConn<B: Backend> {
    pub(crate) id: PeerId,
    pub(crate) num_blocks: u32,
    /// Set once the connection is unpublished (removed, replaced, closed): its transfers then
    /// report `PeerRemoved` when they stop.
    retired: AtomicBool,
    /// Set once the stall watchdog cut the connection: its failed transfers report a remote
    /// disconnect.
    stalled: AtomicBool,
    /// The verdict once this registration was judged unusable; kept until it is unpublished.
    fault: Mutex<Option<PeerFault>>,
    /// Transfer failures in a row, with no success between.
    strikes: AtomicU32,
    /// `TransportOptions::max_consecutive_failures`.
    max_failures: u32,
    peer: Option<B::Peer>,
    backend: Arc<B>,
}

impl<B: Backend> PeerConn<B> {
    pub(crate) fn new(
        id: PeerId,
        num_blocks: u32,
        max_failures: u32,
        peer: B::Peer,
        backend: Arc<B>,
    ) -> Self {
        PeerConn {
            id,
            num_blocks,
            retired: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            fault: Mutex::new(None),
            strikes: AtomicU32::new(0),
            max_failures,
            peer: Some(peer),
            backend,
        }
    }

    /// The verdict, if the peer was judged unusable.
    pub(crate) fn current_fault(&self) -> Option<PeerFault> {
        self.fault.lock().clone()
    }

    /// Judges the peer unusable; the first verdict stays.
    pub(crate) fn fault(&self, fault: PeerFault) {
        let mut slot = self.fault.lock();
        if slot.is_none() {
            tracing::warn!(peer = %self.id, %fault, "peer judged unusable");
            *slot = Some(fault);
        }
    }

    /// Counts a transfer's first terminal state toward the peer's health: a success clears
    /// the strikes; a remote disconnect or a failed state check faults the peer at once;
    /// another failure is a strike, and `max_failures` strikes in a row fault it. A transfer
    /// stopped on request (aborted, or its peer removed) says nothing about the peer.
    pub(crate) fn observed(&self, state: &XferState) {
        match state {
            XferState::Running => {}
            XferState::Done => self.strikes.store(0, Ordering::SeqCst),
            XferState::Failed(reason) => match reason {
                FailureReason::RemoteDisconnect(m) => {
                    self.fault(PeerFault::RemoteDisconnect(m.clone()))
                }
                FailureReason::StateCheck(m) => self.fault(PeerFault::StateCheck(m.clone())),
                FailureReason::Aborted | FailureReason::PeerRemoved => {}
                other => self.strike(other.clone()),
            },
        }
    }

    /// Counts a post the backend refused (see [`PeerConn::observed`]).
    pub(crate) fn refused(&self, error: &BackendError) {
        match error.kind() {
            BackendErrorKind::RemoteDisconnect => {
                self.fault(PeerFault::RemoteDisconnect(error.message().to_owned()))
            }
            _ => self.strike(FailureReason::Backend(format!(
                "submission refused: {}",
                error.message()
            ))),
        }
    }

    fn strike(&self, last: FailureReason) {
        let count = self.strikes.fetch_add(1, Ordering::SeqCst) + 1;
        if self.max_failures > 0 && count >= self.max_failures {
            self.fault(PeerFault::ConsecutiveFailures { count, last });
        }
    }

    /// The backend peer; `None` only during drop.
    pub(crate) fn peer(&self) -> Option<&B::Peer> {
        self.peer.as_ref()
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// Marks the connection stalled; true for the first caller only.
    pub(crate) fn stall(&self) -> bool {
        !self.stalled.swap(true, Ordering::SeqCst)
    }

    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::SeqCst)
    }
}

impl<B: Backend> Drop for PeerConn<B> {
    fn drop(&mut self) {
        if let Some(peer) = self.peer.take() {
            tracing::debug!(peer = %self.id, "backend peer disconnected");
            self.backend.disconnect(peer);
        }
    }
}

struct Slot<B: Backend> {
    /// Bumped by every add (at call time) and every remove.
    generation: u64,
    /// Registrations claimed and not yet finished by the worker.
    pending: u32,
    published: Option<Arc<PeerConn<B>>>,
}

/// What a finished registration did.
pub(crate) enum Publish<B: Backend> {
    /// Published; the connection it replaced, if any, must be retired.
    Published(Option<Arc<PeerConn<B>>>),
    /// The generation moved on: the result is discarded.
    Superseded,
    /// Still the latest claim, but the connect failed: nothing to publish.
    ConnectFailed,
}

pub(crate) struct PeerTable<B: Backend> {
    slots: HashMap<PeerId, Slot<B>>,
}

impl<B: Backend> PeerTable<B> {
    pub(crate) fn new() -> Self {
        PeerTable {
            slots: HashMap::new(),
        }
    }

    /// Claims the next generation of `id` for a registration.
    pub(crate) fn claim(&mut self, id: &PeerId) -> u64 {
        let slot = self.slots.entry(id.clone()).or_insert_with(|| Slot {
            generation: 0,
            pending: 0,
            published: None,
        });
        slot.generation += 1;
        slot.pending += 1;
        slot.generation
    }

    /// Whether `generation` is still the latest claim of `id`.
    pub(crate) fn is_current(&self, id: &PeerId, generation: u64) -> bool {
        self.slots
            .get(id)
            .is_some_and(|s| s.generation == generation)
    }

    /// Ends a registration claimed by [`PeerTable::claim`]: publishes `conn` if `generation`
    /// is still current, otherwise discards it.
    pub(crate) fn finish(
        &mut self,
        id: &PeerId,
        generation: u64,
        conn: Option<Arc<PeerConn<B>>>,
    ) -> Publish<B> {
        let Some(slot) = self.slots.get_mut(id) else {
            return Publish::Superseded;
        };
        slot.pending = slot.pending.saturating_sub(1);
        let outcome = match conn {
            _ if slot.generation != generation => Publish::Superseded,
            Some(conn) => Publish::Published(slot.published.replace(conn)),
            None => Publish::ConnectFailed,
        };
        self.forget_if_idle(id);
        outcome
    }

    /// Bumps the generation and unpublishes. `None` when the peer is neither published nor
    /// being registered; otherwise the connection that was published, if any.
    pub(crate) fn remove(&mut self, id: &PeerId) -> Option<Option<Arc<PeerConn<B>>>> {
        let slot = self.slots.get_mut(id)?;
        if slot.published.is_none() && slot.pending == 0 {
            return None;
        }
        slot.generation += 1;
        let conn = slot.published.take();
        self.forget_if_idle(id);
        Some(conn)
    }

    pub(crate) fn get(&self, id: &PeerId) -> Option<Arc<PeerConn<B>>> {
        self.slots.get(id).and_then(|s| s.published.clone())
    }

    /// Published peer ids, sorted.
    pub(crate) fn published_ids(&self) -> Vec<PeerId> {
        let mut ids: Vec<PeerId> = self
            .slots
            .iter()
            .filter(|(_, s)| s.published.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Unpublishes every peer and invalidates every registration in flight (close).
    pub(crate) fn drain(&mut self) -> Vec<Arc<PeerConn<B>>> {
        let mut out = Vec::new();
        for slot in self.slots.values_mut() {
            slot.generation += 1;
            out.extend(slot.published.take());
        }
        self.slots.retain(|_, s| s.pending > 0);
        out
    }

    fn forget_if_idle(&mut self, id: &PeerId) {
        if self
            .slots
            .get(id)
            .is_some_and(|s| s.pending == 0 && s.published.is_none())
        {
            self.slots.remove(id);
        }
    }
}
