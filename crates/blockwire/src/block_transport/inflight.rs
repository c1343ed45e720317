//! Tracking of submitted transfers (posted, or queued for the posting thread), per peer, so
//! one peer's poll never touches another's.
//!
//! The single rule that keeps memory safe: a transfer leaves tracking only when the backend
//! has released it, and a backend releases only what can no longer move a byte. Ids that
//! `cancel(Immediate)` stops tracking keep their handle in a per-peer `detached` list until
//! the backend releases it; close waits for those too.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockwire_core::{Backend, CancelMode, PeerFault, PeerId, PollResult, TransferId};
use parking_lot::{Mutex, RwLock};

use super::peers::PeerConn;
use super::tracked::{Released, Tracked};
use crate::clock::Clock;
use crate::telemetry::{Probe, Telemetry};

struct PeerTransfers<B: Backend> {
    tracked: BTreeMap<TransferId, Tracked<B>>,
    detached: Vec<Tracked<B>>,
    /// When a transfer of this peer last completed, or the first one was posted while none
    /// was tracked, on the transport's [`Clock`]: the stall watchdog's reference.
    last_progress: Instant,
}

impl<B: Backend> PeerTransfers<B> {
    fn new(now: Instant) -> Self {
        PeerTransfers {
            tracked: BTreeMap::new(),
            detached: Vec::new(),
            last_progress: now,
        }
    }

    fn is_empty(&self) -> bool {
        self.tracked.is_empty() && self.detached.is_empty()
    }

    fn insert(&mut self, id: TransferId, tracked: Tracked<B>, now: Instant) {
        if self.tracked.is_empty() {
            self.last_progress = now;
        }
        self.tracked.insert(id, tracked);
    }

    /// How long since the last progress, on `clock`.
    fn stalled_for(&self, clock: &dyn Clock) -> Duration {
        clock.now().saturating_duration_since(self.last_progress)
    }

    /// The stall watchdog: when transfers are running and none has completed for `limit` (on
    /// `clock`), asks the backend to cut each of their connections (once per connection).
    fn check_stall(
        &mut self,
        backend: &B,
        peer: &PeerId,
        limit: Option<Duration>,
        clock: &dyn Clock,
    ) {
        let Some(limit) = limit else {
            return;
        };
        if self.tracked.is_empty() {
            return;
        }
        // The clock runs only while a transfer is in the backend's hands: time spent queued
        // for the posting thread (behind another peer's slow post) is not this peer's stall.
        if self.tracked.values().all(|t| t.xfer.is_queued()) {
            self.last_progress = clock.now();
            return;
        }
        if self.stalled_for(clock) < limit {
            return;
        }
        // What the backend finished counts, polled or not: a caller may be cancel-waiting on
        // another peer only. Observed for certain while a cut is still to be decided: a
        // backend whose `state` gives up on a busy lock (nixl, behind its posting thread)
        // would make finished transfers look stalled. Once every connection here was cut (or
        // could not be), later polls look without waiting again.
        let deciding = self
            .tracked
            .values()
            .any(|t| t.outcome.is_none() && !t.conn.is_retired() && !t.conn.is_stalled());
        let mut running = false;
        for t in self.tracked.values_mut() {
            let seen = t.outcome.is_some();
            let finished = if deciding {
                t.observe_certain(backend)
            } else {
                t.observe(backend)
            };
            if finished {
                if !seen {
                    self.last_progress = clock.now();
                }
            } else {
                running = true;
            }
        }
        if !running || self.stalled_for(clock) < limit {
            return;
        }
        for t in self.tracked.values() {
            if t.outcome.is_some() || t.conn.is_retired() || !t.conn.stall() {
                continue;
            }
            t.conn.fault(PeerFault::Stalled(limit));
            let cut = t.conn.peer().is_some_and(|p| backend.fail_peer(p));
            if cut {
                tracing::warn!(%peer, ?limit, "no transfer completed: connection cut");
            } else {
                tracing::warn!(
                    %peer,
                    ?limit,
                    backend = backend.kind(),
                    "no transfer completed, and the backend cannot cut the connection: its \
                     transfers end when the library ends them"
                );
            }
        }
    }

    fn reap_detached(&mut self, backend: &B, released: &mut Vec<Released<B>>) {
        for t in std::mem::take(&mut self.detached) {
            match t.try_release(backend) {
                Ok(r) => released.push(r),
                Err(t) => self.detached.push(t),
            }
        }
    }
}

type Shared<B> = Arc<Mutex<PeerTransfers<B>>>;

/// Every tracked transfer, by peer id (a removed peer's transfers stay under its id until they
/// stop).
pub(crate) struct Inflight<B: Backend> {
    by_peer: RwLock<HashMap<PeerId, Shared<B>>>,
    /// See `TransportOptions::stall_timeout`.
    stall_timeout: Option<Duration>,
    /// See `TransportOptions::clock`.
    clock: Arc<dyn Clock>,
    /// See `TransportOptions::telemetry`.
    telemetry: Option<Arc<Telemetry>>,
}

/// What a poll found, plus the released connections to drop outside the locks.
pub(crate) struct Drained<B: Backend> {
    pub(crate) result: PollResult,
    pub(crate) released: Vec<Released<B>>,
    /// A transfer had ended but the backend could not release it yet.
    pub(crate) unreleased: bool,
}

impl<B: Backend> Inflight<B> {
    pub(crate) fn new(
        stall_timeout: Option<Duration>,
        clock: Arc<dyn Clock>,
        telemetry: Option<Arc<Telemetry>>,
    ) -> Self {
        Inflight {
            by_peer: RwLock::new(HashMap::new()),
            stall_timeout,
            clock,
            telemetry,
        }
    }

    pub(crate) fn insert(&self, peer: &PeerId, id: TransferId, tracked: Tracked<B>) {
        {
            let map = self.by_peer.read();
            if let Some(entry) = map.get(peer) {
                entry.lock().insert(id, tracked, self.clock.now());
                return;
            }
        }
        let mut map = self.by_peer.write();
        map.entry(peer.clone())
            .or_insert_with(|| Arc::new(Mutex::new(PeerTransfers::new(self.clock.now()))))
            .lock()
            .insert(id, tracked, self.clock.now());
    }

    /// Drains the finished transfers of `peer`, or of every peer.
    pub(crate) fn poll(&self, backend: &B, peer: Option<&PeerId>) -> Drained<B> {
        let entries: Vec<(PeerId, Shared<B>)> = {
            let map = self.by_peer.read();
            match peer {
                Some(p) => map
                    .get(p)
                    .map(|e| (p.clone(), e.clone()))
                    .into_iter()
                    .collect(),
                None => map.iter().map(|(p, e)| (p.clone(), e.clone())).collect(),
            }
        };
        let mut out = Drained {
            result: PollResult::default(),
            released: Vec::new(),
            unreleased: false,
        };
        let mut emptied = Vec::new();
        for (peer, entry) in entries {
            let mut guard = entry.lock();
            guard.reap_detached(backend, &mut out.released);
            let finished: Vec<TransferId> = guard
                .tracked
                .iter_mut()
                .filter_map(|(id, t)| t.observe(backend).then_some(*id))
                .collect();
            if !finished.is_empty() {
                guard.last_progress = self.clock.now();
            }
            for id in finished {
                let Some(t) = guard.tracked.remove(&id) else {
                    continue;
                };
                match t.try_release(backend) {
                    Ok(mut released) => {
                        let report = released.report(self.stall_timeout);
                        if let (Some(tel), Some(probe)) = (&self.telemetry, released.probe.take()) {
                            out.result.records.push(tel.reported(
                                id,
                                &peer,
                                *probe,
                                report.clone(),
                            ));
                        }
                        match report {
                            Ok(()) => out.result.done.push(id),
                            Err(reason) => {
                                tracing::warn!(transfer = %id, %peer, %reason, "transfer failed");
                                out.result.failed.push((id, reason));
                            }
                        }
                        out.released.push(released);
                    }
                    Err(t) => {
                        tracing::debug!(transfer = %id, %peer, "stopped transfer not yet releasable");
                        guard.tracked.insert(id, t);
                        out.unreleased = true;
                    }
                }
            }
            guard.check_stall(backend, &peer, self.stall_timeout, &*self.clock);
            if guard.is_empty() {
                emptied.push(peer);
            }
        }
        self.forget_empty(emptied);
        out
    }

    /// Cancels `ids`; returns the ids still tracked (always empty for `Immediate`) and the
    /// released connections.
    pub(crate) fn cancel(
        &self,
        backend: &B,
        ids: &[TransferId],
        mode: CancelMode,
    ) -> (Vec<TransferId>, Vec<Released<B>>) {
        let entries: Vec<(PeerId, Shared<B>)> = self
            .by_peer
            .read()
            .iter()
            .map(|(p, e)| (p.clone(), e.clone()))
            .collect();
        // A caller that only cancel-waits must see a stalled peer cut too.
        for (peer, entry) in &entries {
            entry
                .lock()
                .check_stall(backend, peer, self.stall_timeout, &*self.clock);
        }
        let mut still = Vec::new();
        let mut released = Vec::new();
        let mut emptied = Vec::new();
        for id in ids {
            for (peer, entry) in &entries {
                let mut guard = entry.lock();
                let Some(mut t) = guard.tracked.remove(id) else {
                    continue;
                };
                t.cancel();
                let stopped = t.observe(backend);
                if !stopped {
                    t.xfer.abort(backend);
                }
                match (mode, t.try_release(backend)) {
                    (_, Ok(mut r)) => {
                        self.note_cancelled(peer, r.probe.take());
                        released.push(r);
                    }
                    (CancelMode::Immediate, Err(mut t)) => {
                        self.note_cancelled(peer, t.probe.take());
                        guard.detached.push(t);
                    }
                    (CancelMode::Wait, Err(t)) => {
                        guard.tracked.insert(*id, t);
                        still.push(*id);
                    }
                }
                if guard.is_empty() {
                    emptied.push(peer.clone());
                }
                break;
            }
        }
        self.forget_empty(emptied);
        (still, released)
    }

    /// Asks every running transfer to `conn` to stop (the peer was unpublished); each will
    /// report `PeerRemoved`. Those that had already completed keep their outcome.
    pub(crate) fn abort_peer(&self, backend: &B, conn: &Arc<PeerConn<B>>) {
        let entry = self.by_peer.read().get(&conn.id).cloned();
        if let Some(entry) = entry {
            let mut guard = entry.lock();
            for t in guard.tracked.values_mut() {
                if Arc::ptr_eq(&t.conn, conn) && !t.observe(backend) {
                    t.removed = true;
                    t.xfer.abort(backend);
                }
            }
        }
    }

    /// See `TransportOptions::stall_timeout`.
    pub(crate) fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// Transfers posted and not yet reported (or taken by a cancel), of `peer` or of every
    /// peer.
    pub(crate) fn count(&self, peer: Option<&PeerId>) -> usize {
        let map = self.by_peer.read();
        match peer {
            Some(p) => map.get(p).map_or(0, |e| e.lock().tracked.len()),
            None => map.values().map(|e| e.lock().tracked.len()).sum(),
        }
    }

    /// Close: stops tracking everything, aborts what runs, and waits until `deadline` for the
    /// backend to release each transfer. Returns the released ones and those still running.
    pub(crate) fn drain_for_close(
        &self,
        backend: &B,
        deadline: Instant,
    ) -> (Vec<Released<B>>, Vec<Tracked<B>>) {
        let entries: Vec<Shared<B>> = self.by_peer.write().drain().map(|(_, e)| e).collect();
        let mut pending: Vec<Tracked<B>> = Vec::new();
        for entry in entries {
            let mut guard = entry.lock();
            pending.extend(std::mem::take(&mut guard.tracked).into_values());
            pending.append(&mut guard.detached);
        }
        for t in &mut pending {
            t.cancel();
            if !t.observe(backend) {
                t.xfer.abort(backend);
            }
        }
        let mut released = Vec::new();
        loop {
            pending = release_stopped(backend, pending, &mut released);
            if pending.is_empty() || Instant::now() >= deadline {
                return (released, pending);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn note_cancelled(&self, peer: &PeerId, probe: Option<Box<Probe>>) {
        if let (Some(tel), Some(probe)) = (&self.telemetry, probe) {
            tel.cancelled(peer, *probe);
        }
    }

    fn forget_empty(&self, peers: Vec<PeerId>) {
        if peers.is_empty() {
            return;
        }
        let mut map = self.by_peer.write();
        for peer in peers {
            if map.get(&peer).is_some_and(|e| e.lock().is_empty()) {
                map.remove(&peer);
            }
        }
    }
}

/// Releases every transfer of `pending` that has stopped (into `released`); returns the rest.
pub(crate) fn release_stopped<B: Backend>(
    backend: &B,
    pending: Vec<Tracked<B>>,
    released: &mut Vec<Released<B>>,
) -> Vec<Tracked<B>> {
    let mut still = Vec::new();
    for t in pending {
        match t.try_release(backend) {
            Ok(r) => released.push(r),
            Err(t) => still.push(t),
        }
    }
    still
}
