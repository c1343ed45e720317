//! The agent's lock ([`AgentLock`]): every NIXL call is made under it, and a call made for
//! the caller's `poll` never waits for it, but for the stall watchdog's look before it cuts a
//! peer (`Backend::state_blocking`). What such a call could not release without waiting
//! (a finished transfer's request, a peer let go) is parked here, and whoever takes the lock
//! next releases it before anything else: a post, a connect, a status check that found the
//! lock free, the notification thread (every few milliseconds), at the latest revoke.

use std::sync::atomic::{AtomicBool, Ordering};

use nixl_sys::XferRequest;
use parking_lot::{Mutex, MutexGuard};

use crate::agent::Inner;
use crate::peer::Departing;

/// The agent (`None` once revoked) behind one lock, and what waits for that lock's next holder.
pub(crate) struct AgentLock {
    agent: Mutex<Option<Inner>>,
    parked: Mutex<Parked>,
    /// Set after something is parked, so that most lock takers skip `parked`'s mutex.
    any_parked: AtomicBool,
}

/// Released by the lock's next holder.
#[derive(Default)]
struct Parked {
    /// Requests of finished transfers: they move no bytes, and no longer count as live.
    requests: Vec<XferRequest>,
    /// Peers let go: their lists and, with an agent's last peer, its metadata. They no longer
    /// count as connected.
    peers: Vec<Departing>,
}

impl AgentLock {
    pub(crate) fn new(inner: Inner) -> Self {
        AgentLock {
            agent: Mutex::new(Some(inner)),
            parked: Mutex::new(Parked::default()),
            any_parked: AtomicBool::new(false),
        }
    }

    /// Waits for the lock, then releases what was parked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Inner>> {
        let mut agent = self.agent.lock();
        self.release_parked(&mut agent);
        agent
    }

    /// The lock if no other thread holds it (then what was parked is released); never waits.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, Option<Inner>>> {
        let mut agent = self.agent.try_lock()?;
        self.release_parked(&mut agent);
        Some(agent)
    }

    /// Releases a finished transfer's request now if the lock is free, else parks it for the
    /// lock's next holder; never waits.
    pub(crate) fn release_request(&self, request: XferRequest) {
        self.release_or_park(Parked {
            requests: vec![request],
            peers: Vec::new(),
        });
    }

    /// Releases a peer let go now if the lock is free, else parks it for the lock's next
    /// holder; never waits.
    pub(crate) fn release_peer(&self, peer: Departing) {
        self.release_or_park(Parked {
            requests: Vec::new(),
            peers: vec![peer],
        });
    }

    fn release_or_park(&self, items: Parked) {
        match self.try_lock() {
            Some(mut agent) => release(&mut agent, items),
            None => {
                tracing::trace!("nixl: the agent's lock is busy; parked for its next holder");
                let mut parked = self.parked.lock();
                parked.requests.extend(items.requests);
                parked.peers.extend(items.peers);
                drop(parked);
                self.any_parked.store(true, Ordering::Release);
            }
        }
    }

    /// How many requests and peers are parked.
    #[cfg(test)]
    pub(crate) fn parked(&self) -> (usize, usize) {
        let parked = self.parked.lock();
        (parked.requests.len(), parked.peers.len())
    }

    /// Releases what was parked; `agent` is the lock's content, held.
    fn release_parked(&self, agent: &mut Option<Inner>) {
        // Cleared before the take: something parked in between is taken now, or sets the
        // flag again for the next holder.
        if !self.any_parked.swap(false, Ordering::Acquire) {
            return;
        }
        let parked = std::mem::take(&mut *self.parked.lock());
        release(agent, parked);
    }
}

/// Releases `items` under the agent's lock (`agent`, held).
fn release(agent: &mut Option<Inner>, items: Parked) {
    let Parked { requests, peers } = items;
    match agent {
        Some(inner) => {
            drop(requests);
            for peer in peers {
                inner.disconnect(peer);
            }
        }
        // The agent is gone (revoke releases what was parked before it goes, and the
        // transport releases every transfer before revoke): released now they would reach
        // freed memory, so they are leaked.
        None => {
            std::mem::forget(requests);
            peers.into_iter().for_each(Departing::forget);
        }
    }
}

impl Drop for AgentLock {
    fn drop(&mut self) {
        // Something parked after the last holder: released with the agent if it is still
        // there, leaked if it is gone.
        self.any_parked.store(true, Ordering::Relaxed);
        let mut agent = self.agent.lock();
        self.release_parked(&mut agent);
    }
}
