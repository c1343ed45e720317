//! The registration worker: `add_remote_peer_async` claims a generation and queues a [`Job`];
//! one thread connects each (the slow part, under no lock) and publishes the peer only if
//! that generation is still the one claimed.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockwire_core::{Backend, Error, PeerDescriptor, PeerId};
use crossbeam_channel::Receiver;

use super::peers::{PeerConn, Publish};
use super::{BlockTransport, Shared, validate};
use crate::Registration;
use crate::registration::Resolver;

/// One registration for the worker.
pub(super) struct Job {
    pub(super) peer: PeerId,
    pub(super) generation: u64,
    desc: PeerDescriptor,
    pub(super) resolver: Resolver,
}

impl<B: Backend> BlockTransport<B> {
    /// `add_remote_peer_async`: checks the descriptor, claims the peer's next generation and
    /// queues the connect for the worker.
    pub(super) fn queue_registration(&self, peer: &PeerId, desc: &PeerDescriptor) -> Registration {
        let s = &*self.shared;
        let _gate = match s.open() {
            Ok(g) => g,
            Err(e) => return Registration::ready(Err(e)),
        };
        if let Err(e) = validate::check_descriptor(
            peer,
            desc,
            s.backend.kind(),
            s.region.block_len(),
            &s.fingerprint,
        ) {
            tracing::debug!(%peer, error = %e, "peer descriptor rejected");
            return Registration::ready(Err(e));
        }
        let jobs = self.jobs.lock();
        let Some(jobs) = jobs.as_ref() else {
            return Registration::ready(Err(Error::Closed));
        };
        let generation = s.peers.lock().claim(peer);
        s.supersede_connect(peer);
        let (handle, resolver) = Registration::pending();
        let job = Job {
            peer: peer.clone(),
            generation,
            desc: desc.clone(),
            resolver,
        };
        if let Err(unsent) = jobs.send(job) {
            // The worker is gone; undo the claim. Dropping the resolver resolves `Closed`.
            s.peers.lock().finish(peer, generation, None);
            drop(unsent);
        }
        handle
    }
}

impl<B: Backend> Shared<B> {
    /// `peer`'s registration in flight, if any, was just superseded (removed, or claimed
    /// again): tells the backend its connect may give up. Under the lock the worker sets and
    /// clears, so the call never reaches a later connect.
    pub(super) fn supersede_connect(&self, peer: &PeerId) {
        let connecting = self.connecting.lock();
        if connecting.as_ref() == Some(peer) {
            tracing::debug!(%peer, "registration superseded while connecting: connect told to give up");
            self.backend.cancel_connect();
        }
    }

    /// The worker's half of a registration: connect (unless already stale), then publish
    /// only if the generation is still the one claimed.
    fn register(&self, job: Job) {
        let Job {
            peer,
            generation,
            desc,
            resolver,
        } = job;
        let current =
            !self.closed.load(Ordering::SeqCst) && self.peers.lock().is_current(&peer, generation);
        // The slow part runs under no lock.
        let connected = current.then(|| {
            *self.connecting.lock() = Some(peer.clone());
            // A backend that panics on a peer's input fails this registration, not the worker.
            let connected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.backend.connect(&desc)
            }));
            *self.connecting.lock() = None;
            connected
                .unwrap_or_else(|_| {
                    Err(blockwire_core::BackendError::other(
                        "the backend panicked while connecting",
                    ))
                })
                .map(|p| {
                    Arc::new(PeerConn::new(
                        peer.clone(),
                        desc.num_blocks,
                        self.max_failures,
                        p,
                        self.backend.clone(),
                    ))
                })
        });
        let conn = connected.as_ref().and_then(|c| c.as_ref().ok()).cloned();
        let publish = {
            let mut table = self.peers.lock();
            // Checked under the table lock: close sets `closed` before it drains the table.
            if self.closed.load(Ordering::SeqCst) {
                table.finish(&peer, generation, None);
                None
            } else {
                Some(table.finish(&peer, generation, conn.clone()))
            }
        };
        let result = match (publish, connected) {
            (None, _) => Err(Error::Closed),
            (Some(Publish::Published(replaced)), _) => {
                tracing::info!(%peer, generation, "peer published");
                if let Some(old) = replaced {
                    self.retire(old);
                }
                Ok(())
            }
            (Some(Publish::ConnectFailed), Some(Err(source))) => {
                tracing::warn!(%peer, error = %source, "connecting to peer failed");
                Err(Error::Connect {
                    peer: peer.clone(),
                    source,
                })
            }
            (Some(_), connected) => {
                if matches!(connected, Some(Ok(_))) {
                    tracing::info!(%peer, generation, "superseded registration discarded");
                }
                Err(Error::Superseded { peer: peer.clone() })
            }
        };
        // A discarded connection disconnects here, outside every lock.
        drop(conn);
        resolver.resolve(result);
    }
}

/// The worker thread: registers each queued job in turn, until close drops the queue's sender.
pub(super) fn run<B: Backend>(shared: Arc<Shared<B>>, jobs: Receiver<Job>) {
    for job in jobs {
        shared.register(job);
    }
}
