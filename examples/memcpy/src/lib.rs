//! A complete, small blockwire backend: transfers are a `memcpy` between two regions of one
//! process. It is the template the README's "Adding a backend" walks through, and it passes
//! the whole conformance suite (`cargo test -p blockwire-example-memcpy --test suite`).
//!
//! A backend only connects, posts, observes and releases; every rule of the contract
//! (validation, generations, per-peer polling, cancel modes, close) is `BlockTransport`'s.
//! Here a post checks its blocks and queues the copy for the backend's copy thread (a post
//! never waits for the bytes); the thread ends each transfer's [`TransferCell`] from the kit,
//! which `state` reads and `release` consults (busy until the copy ended). A notification is
//! one more job for the same thread: it hands the frame to the peer's inbox (the transport
//! sends it only once the transfer it goes with is done).
//!
//! ```
//! use blockwire::{BlockTransport, Region, Transport, TransportOptions};
//! use blockwire_example_memcpy::MemcpyBackend;
//! let open = || BlockTransport::<MemcpyBackend>::open(Region::new(4, 64)?, TransportOptions::default());
//! let (a, b) = (open()?, open()?);
//! a.add_remote_peer(&"b".into(), &b.descriptor()?)?;
//! a.region().fill_block(1, 7)?;
//! let id = a.write_blocks(&"b".into(), &[1], &[3])?;
//! while !a.poll(None)?.done.contains(&id) {}
//! assert_eq!(b.region().block(3)?, vec![7; 64]);
//! # Ok::<(), blockwire::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;

use blockwire_core::kit::{Delivery, Doorbell, Inbox, Live, LiveCounts, TransferCell};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendOptions, BackendStats, BlockIndex, BlockPair,
    Capabilities, Error, FailureReason, Op, OpenBackend, PeerDescriptor, RegionSpan,
    RegisteredRegion, Result, XferState,
};
use parking_lot::{Mutex, RwLock};

/// The regions of this process that are open, by token: what a descriptor's address names.
static REGIONS: Mutex<Option<HashMap<u64, Arc<Shared>>>> = Mutex::new(None);
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A region peers copy into and out of; `revoked` is set, under the write lock, by close.
struct Shared {
    span: RegionSpan,
    revoked: RwLock<bool>,
    /// Where peers' notifications go: the transport's inbox.
    inbox: Inbox,
}

/// The memcpy backend over one region.
pub struct MemcpyBackend {
    token: u64,
    shared: Arc<Shared>,
    counts: LiveCounts,
    /// The copy thread's queue (closed, then the thread joined, on drop).
    jobs: Option<Sender<Job>>,
    copier: Option<JoinHandle<()>>,
    /// Rung by each transfer's cell when it ends (the transport's `poll_wait` sleeps on it).
    doorbell: Doorbell,
}

/// A posted transfer: its outcome, which the copy thread sets.
pub struct MemcpyXfer {
    cell: Arc<TransferCell>,
    _live: Live,
}

/// One transfer for the copy thread.
struct Job {
    cell: Arc<TransferCell>,
    op: Op,
    here: Arc<Shared>,
    there: Arc<Shared>,
    pairs: Vec<BlockPair>,
    /// A notification's frame, for a notification job (no pairs then).
    frame: Option<Arc<[u8]>>,
}

impl Job {
    fn copy(&self) -> std::result::Result<(), FailureReason> {
        // Held while copying: the peer's close (revoke) waits for it, and then we see it.
        let revoked = self.there.revoked.read();
        if *revoked {
            return Err(FailureReason::RemoteDisconnect("the peer closed".into()));
        }
        if let Some(frame) = &self.frame {
            return match self.there.inbox.deliver_frame(frame) {
                Delivery::Queued => Ok(()),
                other => Err(FailureReason::Backend(format!(
                    "the peer's inbox did not take it: {other:?}"
                ))),
            };
        }
        let len = self.here.span.block_len();
        for pair in &self.pairs {
            let here = self.here.span.base().as_ptr().wrapping_add(pair.local);
            let there = self.there.span.base().as_ptr();
            let there = there.wrapping_add(pair.remote as usize);
            let (from, to) = match self.op {
                Op::Write => (here, there),
                Op::Read => (there, here),
            };
            // SAFETY: `block_pairs` checked both offsets against the two regions' shapes at
            // post, so both blocks lie inside regions that are open: ours while this backend
            // lives (its drop joins this thread first), the peer's while it is not revoked,
            // which the read lock held here guarantees. `copy` allows overlap (a transport may
            // be its own peer).
            unsafe { std::ptr::copy(from, to, len) };
        }
        Ok(())
    }
}

/// The copy thread: each queued transfer in turn.
fn copier(jobs: Receiver<Job>) {
    for job in jobs {
        if job.cell.start() {
            match job.copy() {
                Ok(()) => job.cell.finish(),
                Err(why) => job.cell.fail(why),
            }
        }
    }
}

/// A connected peer: its region, and a count while connected.
pub struct MemcpyPeer {
    shared: Arc<Shared>,
    blocks: u32,
    _live: Live,
}

impl OpenBackend for MemcpyBackend {
    const KIND: &'static str = "memcpy";

    unsafe fn open(span: RegionSpan, options: BackendOptions) -> Result<Self> {
        let inbox = options.inbox();
        let doorbell = options.doorbell();
        options
            .finish(Self::KIND)
            .map_err(Error::opening(Self::KIND))?;
        let (jobs, queue) = std::sync::mpsc::channel();
        let copier = std::thread::Builder::new()
            .name("memcpy-copy".into())
            .spawn(move || copier(queue))
            .map_err(|e| Error::Os {
                what: "spawning the memcpy copy thread",
                source: e.into(),
            })?;
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            span,
            revoked: RwLock::new(false),
            inbox,
        });
        REGIONS
            .lock()
            .get_or_insert_default()
            .insert(token, shared.clone());
        Ok(MemcpyBackend {
            token,
            shared,
            counts: LiveCounts::default(),
            jobs: Some(jobs),
            copier: Some(copier),
            doorbell,
        })
    }
}

impl Backend for MemcpyBackend {
    type Peer = MemcpyPeer;
    type Xfer = MemcpyXfer;

    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        (c.read, c.remote_disconnect, c.revoke) = (true, true, true);
        c.notifications = true;
        // In one process: no peer dies alone.
        c.isolates_peers = true;
        // Every transfer ends in its cell, made `with_doorbell`.
        c.doorbell = true;
        c
    }

    /// The token, then the registration (so `connect` can refuse an altered descriptor).
    fn address(&self) -> Vec<u8> {
        let mut out = self.token.to_le_bytes().to_vec();
        RegisteredRegion::of(&self.shared.span).encode(&mut out);
        out
    }

    fn connect(&self, remote: &PeerDescriptor) -> Result<MemcpyPeer, BackendError> {
        if *self.shared.revoked.read() {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                "this transport is closed",
            ));
        }
        let refuse = |why: &str| BackendError::new(BackendErrorKind::MalformedAddress, why);
        let (token, registered) = remote
            .address
            .split_at_checked(8)
            .ok_or_else(|| refuse("address too short"))?;
        let token = u64::from_le_bytes(token.try_into().map_err(|_| refuse("bad token"))?);
        let (registered, rest) = RegisteredRegion::decode(registered)?;
        if !rest.is_empty() {
            return Err(refuse("trailing bytes after the registration"));
        }
        let shared = REGIONS
            .lock()
            .as_ref()
            .and_then(|r| r.get(&token).cloned())
            .ok_or_else(|| {
                BackendError::new(
                    BackendErrorKind::RemoteDisconnect,
                    "no open region of this process has that token",
                )
            })?;
        if registered != RegisteredRegion::of(&shared.span) {
            return Err(refuse("the registration is not the region's of that token"));
        }
        registered.check(remote)?;
        Ok(MemcpyPeer {
            blocks: shared.span.num_blocks(),
            shared,
            _live: self.counts.peer(),
        })
    }

    fn disconnect(&self, peer: MemcpyPeer) {
        drop(peer);
    }

    /// Checks the blocks and queues the copy: never waits for the bytes.
    fn post(
        &self,
        peer: &MemcpyPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<MemcpyXfer, BackendError> {
        let pairs = self.shared.span.block_pairs(local, remote, peer.blocks)?;
        self.queue(op, peer, pairs, None)
    }

    /// Queues the frame for the copy thread, which hands it to the peer's inbox.
    fn notify(&self, peer: &MemcpyPeer, frame: &[u8]) -> Result<MemcpyXfer, BackendError> {
        self.queue(Op::Write, peer, Vec::new(), Some(frame.into()))
    }

    fn state(&self, xfer: &mut MemcpyXfer) -> XferState {
        xfer.cell.state()
    }

    /// Busy until the copy thread ended the transfer.
    fn release(&self, xfer: MemcpyXfer) -> Result<(), MemcpyXfer> {
        if xfer.cell.is_ended() {
            Ok(())
        } else {
            Err(xfer)
        }
    }

    /// Unlists the region, then waits out any copy in progress: none starts afterwards.
    fn revoke(&self) {
        if let Some(regions) = REGIONS.lock().as_mut() {
            regions.remove(&self.token);
        }
        *self.shared.revoked.write() = true;
    }

    fn stats(&self) -> BackendStats {
        self.counts.stats()
    }
}

impl MemcpyBackend {
    /// Queues a job for the copy thread: never waits for it.
    fn queue(
        &self,
        op: Op,
        peer: &MemcpyPeer,
        pairs: Vec<BlockPair>,
        frame: Option<Arc<[u8]>>,
    ) -> Result<MemcpyXfer, BackendError> {
        if *peer.shared.revoked.read() {
            return Err(BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                "the peer closed",
            ));
        }
        let cell = Arc::new(TransferCell::queued().with_doorbell(self.doorbell.clone()));
        let job = Job {
            cell: cell.clone(),
            op,
            here: self.shared.clone(),
            there: peer.shared.clone(),
            pairs,
            frame,
        };
        let stopped = || BackendError::other("the copy thread stopped");
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())?;
        Ok(MemcpyXfer {
            cell,
            _live: self.counts.transfer(),
        })
    }
}

impl Drop for MemcpyBackend {
    /// Closes the copy thread's queue and joins it (every transfer was released, so none is
    /// left to copy), then revokes.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(copier) = self.copier.take() {
            let _ = copier.join();
        }
        self.revoke();
    }
}
