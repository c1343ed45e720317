//! [`BlockTransport`]: the one implementation of the contract, over any [`Backend`].

mod closing;
mod inflight;
mod open;
mod peers;
mod posting;
mod submit;
mod tracked;
mod validate;
mod wait;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use blockwire_core::kit::{Doorbell, Inbox, InboxStats};
use blockwire_core::{
    Backend, BackendStats, BlockIndex, CancelMode, Capabilities, Error, Notification, Op,
    PeerDescriptor, PeerId, PollResult, Result, TransferId,
};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use crate::telemetry::{Telemetry, TelemetrySnapshot};
use crate::{Region, Registration, Transport};
use inflight::Inflight;
use peers::{PeerConn, PeerTable};
use worker::Job;

/// The transport over backend `B`: validation, generations, per-peer polling, cancel modes and
/// close, written once. A backend only connects, posts, observes and releases.
///
/// ```
/// use blockwire::{BlockTransport, Region, Transport, TransportOptions};
/// use blockwire_shm::ShmBackend;
/// let t: BlockTransport<ShmBackend> =
///     BlockTransport::open(Region::new(4, 4096)?, TransportOptions::default())?;
/// assert_eq!(t.backend_kind(), "shm");
/// # Ok::<(), blockwire::Error>(())
/// ```
pub struct BlockTransport<B: Backend> {
    shared: Arc<Shared<B>>,
    jobs: Mutex<Option<Sender<Job>>>,
    /// Close drains the queue through this, so queued registrations resolve `Closed` at once
    /// even while the worker is stuck in a slow connect.
    queued: Receiver<Job>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// With a backend that posts in the caller's thread ([`Capabilities::posts_in_caller`]):
    /// the posting thread's queue (see `posting`).
    posts: Option<Sender<posting::Msg<B>>>,
    /// The posting thread, until close lets it go.
    poster: Mutex<Option<JoinHandle<()>>>,
}

/// State shared with the registration worker.
struct Shared<B: Backend> {
    /// Held shared by every call, exclusively by close while it flips `closed`.
    gate: RwLock<()>,
    closed: AtomicBool,
    /// Transfers the posting thread is handing to the backend right now (inside its post):
    /// they are live though the backend does not count them yet.
    in_post: AtomicUsize,
    peers: Mutex<PeerTable<B>>,
    /// The peer whose registration the worker is connecting right now.
    connecting: Mutex<Option<PeerId>>,
    inflight: Inflight<B>,
    next_id: AtomicU64,
    fingerprint: String,
    /// This transport's name (in its descriptor, and on its notifications).
    name: String,
    /// Notifications that reached this transport, until drained.
    inbox: Inbox,
    /// Rung when a transfer ends (by the backend, where it says `Capabilities::doorbell`, and
    /// by the transport where it ends one itself), for `poll_wait`.
    doorbell: Doorbell,
    /// See `TransportOptions::telemetry`.
    telemetry: Option<Arc<Telemetry>>,
    close_timeout: Duration,
    /// `TransportOptions::max_consecutive_failures`.
    max_failures: u32,
    backend: Arc<B>,
    /// Declared after `backend`: fields drop in order, so the backend (and its threads) are
    /// gone before the memory is freed.
    region: Region,
}

impl<B: Backend> BlockTransport<B> {
    /// `poll`'s drain, and whether a transfer it found ended could not be released yet (the
    /// backend said busy: it will be reported once released, with no ring to announce it).
    fn drain(&self, peer: Option<&PeerId>) -> Result<(PollResult, bool)> {
        let s = &*self.shared;
        let _gate = s.open()?;
        let mut drained = s.inflight.poll(&s.backend, peer);
        drop(drained.released);
        // Each peer's list is in id order; `poll(None)` joins several.
        drained.result.done.sort_unstable();
        drained.result.failed.sort_unstable_by_key(|(id, _)| *id);
        drained.result.records.sort_unstable_by_key(|r| r.id);
        // After the drain: a verdict it reached is reported at once.
        drained.result.peer_fault = peer
            .and_then(|p| s.peers.lock().get(p))
            .and_then(|conn| conn.current_fault());
        Ok((drained.result, drained.unreleased))
    }
}

impl<B: Backend> Shared<B> {
    /// Checks a notification's message and frames it with this transport's name.
    fn frame(&self, message: &[u8]) -> Result<Arc<[u8]>> {
        if !self.backend.capabilities().notifications {
            return Err(Error::Unsupported {
                backend: self.backend.kind(),
                what: "notifications".into(),
            });
        }
        if message.len() > blockwire_core::MAX_NOTIFICATION_LEN {
            return Err(Error::NotificationTooLong {
                len: message.len(),
                max: blockwire_core::MAX_NOTIFICATION_LEN,
            });
        }
        Ok(blockwire_core::encode_frame(&self.name, message).into())
    }

    /// The peer's connection, if it is published and not faulted.
    fn usable(&self, peer: &PeerId) -> Result<Arc<PeerConn<B>>> {
        let conn = self
            .peers
            .lock()
            .get(peer)
            .ok_or_else(|| Error::UnknownPeer(peer.clone()))?;
        if let Some(fault) = conn.current_fault() {
            return Err(Error::PeerFaulted {
                peer: peer.clone(),
                fault,
            });
        }
        Ok(conn)
    }

    /// Revokes every peer's access to the region (close, once no transfer is held).
    fn revoke(&self) {
        self.backend.revoke();
        tracing::debug!(
            backend = self.backend.kind(),
            complete = self.backend.capabilities().revoke,
            "remote access to the region revoked"
        );
    }

    /// The gate, shared, if the transport is open.
    fn open(&self) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        let guard = self.gate.read();
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        Ok(guard)
    }

    /// Retires an unpublished connection: its running transfers are asked to stop and report
    /// `PeerRemoved` once they do.
    fn retire(&self, conn: Arc<PeerConn<B>>) {
        conn.retire();
        self.inflight.abort_peer(&self.backend, &conn);
    }
}

impl<B: Backend> Transport for BlockTransport<B> {
    fn backend_kind(&self) -> &'static str {
        self.shared.backend.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.backend.capabilities()
    }

    fn region(&self) -> &Region {
        &self.shared.region
    }

    fn fingerprint(&self) -> &str {
        &self.shared.fingerprint
    }

    fn descriptor(&self) -> Result<PeerDescriptor> {
        let s = &*self.shared;
        let _gate = s.open()?;
        Ok(PeerDescriptor::new(
            s.backend.kind(),
            s.backend.address(),
            s.region.base_addr(),
            s.region.num_blocks(),
            s.region.block_len() as u64,
            s.fingerprint.clone(),
        )
        .with_name(s.name.clone()))
    }

    fn add_remote_peer(&self, peer: &PeerId, desc: &PeerDescriptor) -> Result<()> {
        self.add_remote_peer_async(peer, desc).wait()
    }

    fn add_remote_peer_async(&self, peer: &PeerId, desc: &PeerDescriptor) -> Registration {
        self.queue_registration(peer, desc)
    }

    fn remove_remote_peer(&self, peer: &PeerId) -> Result<()> {
        let s = &*self.shared;
        let _gate = s.open()?;
        let removed = s.peers.lock().remove(peer);
        match removed {
            None => Err(Error::UnknownPeer(peer.clone())),
            Some(conn) => {
                tracing::info!(%peer, "peer removed");
                s.supersede_connect(peer);
                if let Some(conn) = conn {
                    s.retire(conn);
                }
                // A waiter on this peer re-polls: its transfers now end `PeerRemoved`.
                s.doorbell.ring();
                Ok(())
            }
        }
    }

    fn write_blocks(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId> {
        self.submit(Op::Write, peer, local, remote, None)
    }

    fn read_blocks(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId> {
        self.submit(Op::Read, peer, local, remote, None)
    }

    fn write_blocks_notify(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: &[u8],
    ) -> Result<TransferId> {
        self.submit(Op::Write, peer, local, remote, Some(message))
    }

    fn read_blocks_notify(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: &[u8],
    ) -> Result<TransferId> {
        self.submit(Op::Read, peer, local, remote, Some(message))
    }

    fn notify(&self, peer: &PeerId, message: &[u8]) -> Result<TransferId> {
        self.submit_notification(peer, message)
    }

    fn notifications(&self, from: Option<&str>) -> Result<Vec<Notification>> {
        let s = &*self.shared;
        let _gate = s.open()?;
        s.backend.poll_notifications();
        Ok(s.inbox.drain(from))
    }

    fn notification_stats(&self) -> InboxStats {
        self.shared.inbox.stats()
    }

    fn name(&self) -> &str {
        &self.shared.name
    }

    fn telemetry(&self) -> Option<TelemetrySnapshot> {
        self.shared.telemetry.as_ref().map(|t| t.snapshot())
    }

    fn poll(&self, peer: Option<&PeerId>) -> Result<PollResult> {
        self.drain(peer).map(|(result, _)| result)
    }

    fn poll_wait(&self, peer: Option<&PeerId>, timeout: Duration) -> Result<PollResult> {
        let s = &*self.shared;
        wait::poll_wait(
            wait::Waiter {
                doorbell: &s.doorbell,
                rings: s.backend.capabilities().doorbell,
                stall_timeout: s.inflight.stall_timeout(),
            },
            timeout,
            || self.drain(peer),
            || s.inflight.count(peer),
            |budget| s.backend.assist(budget),
        )
    }

    fn in_flight(&self, peer: Option<&PeerId>) -> usize {
        self.shared.inflight.count(peer)
    }

    fn cancel(&self, ids: &[TransferId], mode: CancelMode) -> Result<Vec<TransferId>> {
        let s = &*self.shared;
        let _gate = s.open()?;
        // Each id once: a repeated id would be checked twice, and could be returned as still
        // running by the first check and released by the second, then never reported (found by
        // the model-based test).
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        let ids: Vec<TransferId> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
        let (still, released) = s.inflight.cancel(&s.backend, &ids, mode);
        drop(released);
        // Another thread's `poll_wait` may be waiting on what was just taken.
        s.doorbell.ring();
        Ok(still)
    }

    fn close(&self) -> Result<()> {
        self.close_now()
    }

    fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    fn backend_stats(&self) -> BackendStats {
        let s = &*self.shared;
        // Read before the backend's counts: a post that returns in between is then counted
        // twice (never not at all), as the posting thread lets go of it only once the backend
        // holds it.
        let in_post = s.in_post.load(Ordering::SeqCst);
        let mut stats = s.backend.stats();
        stats.live_transfers += in_post;
        stats
    }

    fn peers(&self) -> Vec<PeerId> {
        self.shared.peers.lock().published_ids()
    }
}

impl<B: Backend> Drop for BlockTransport<B> {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl<B: Backend> std::fmt::Debug for BlockTransport<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockTransport")
            .field("backend", &self.shared.backend.kind())
            .field("num_blocks", &self.shared.region.num_blocks())
            .field("block_len", &self.shared.region.block_len())
            .field("closed", &self.is_closed())
            .finish()
    }
}
