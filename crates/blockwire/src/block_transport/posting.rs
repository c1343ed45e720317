//! Deferred posting, for a backend whose post may move data in the calling thread
//! ([`Capabilities::posts_in_caller`](blockwire_core::Capabilities::posts_in_caller)): a
//! submit validates, takes an id, tracks the transfer as queued and returns; the transport's
//! posting thread posts it.
//!
//! One posting thread per transport serves every peer, first in first out. That keeps the
//! posts to one peer in submit order with no bookkeeping, and costs one thread. Its price: a
//! post that blocks for long (a library waiting on a slow peer's socket) delays the posts
//! queued behind it, to other peers too. Those stay tracked, cancellable and removable, and
//! no caller waits; a thread per peer would isolate peers at the cost of a thread each.
//!
//! A queued transfer is tracked from its submit like a posted one, through a [`Handle`] whose
//! [`Pending`] slot the posting thread and the tracking share:
//!
//! - cancel, remove and close turn a `Queued` slot into `Dropped`: the posting thread then
//!   skips it, so no byte of it moves and it is released at once;
//! - while the posting thread posts it (`Posting`), it is running: release says busy, and an
//!   abort is remembered and applied as soon as the post returns;
//! - a post that fails becomes a failed transfer (`Failed`) whose reason says that posting
//!   failed, with the backend's text; the posting thread counts it toward the peer's health
//!   at once, as a refused post in the caller's thread is.
//!
//! Locks: the posting thread takes only a slot's lock, never a tracking or peer-table lock,
//! and never holds it while posting; the tracking takes a slot's lock under a peer's lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use blockwire_core::kit::Doorbell;
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BlockIndex, FailureReason, Op, TransferId, XferState,
};
use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use super::peers::PeerConn;

/// A tracked transfer's backend handle: posted, or queued for the posting thread.
pub(crate) enum Handle<B: Backend> {
    Posted(B::Xfer),
    Deferred(Arc<Mutex<Pending<B::Xfer>>>),
}

/// Where a deferred transfer stands.
pub(crate) enum Pending<X> {
    /// Waiting for the posting thread.
    Queued,
    /// The posting thread is posting it; `abort` once stopping it was asked for meanwhile.
    Posting { abort: bool },
    /// Posted: the backend's handle.
    Posted(X),
    /// The post failed (already counted toward the peer's health).
    Failed(FailureReason),
    /// Never posted: cancelled, removed or closed while queued.
    Dropped(FailureReason),
}

impl<X> Pending<X> {
    fn state(&self) -> XferState {
        match self {
            Pending::Queued | Pending::Posting { .. } | Pending::Posted(_) => XferState::Running,
            Pending::Failed(reason) | Pending::Dropped(reason) => XferState::Failed(reason.clone()),
        }
    }
}

impl<B: Backend> Handle<B> {
    /// Observes the transfer without blocking ([`Backend::state`]), or for `certain`
    /// ([`Backend::state_blocking`], for the stall watchdog); a deferred one the posting
    /// thread posted becomes a plain posted handle here.
    pub(crate) fn state(&mut self, backend: &B, certain: bool) -> XferState {
        if let Handle::Deferred(slot) = self {
            let mut pending = slot.lock();
            if !matches!(*pending, Pending::Posted(_)) {
                return pending.state();
            }
            // Taken out, the slot stays terminal: the posting thread never posts it again.
            let taken = std::mem::replace(&mut *pending, Pending::Dropped(FailureReason::Aborted));
            drop(pending);
            if let Pending::Posted(xfer) = taken {
                *self = Handle::Posted(xfer);
            }
        }
        match self {
            Handle::Posted(xfer) if certain => backend.state_blocking(xfer),
            Handle::Posted(xfer) => backend.state(xfer),
            // Replaced just above.
            Handle::Deferred(slot) => slot.lock().state(),
        }
    }

    /// Asks the transfer to stop: a queued one is never posted (`Dropped`), one being posted
    /// is aborted as soon as its post returns.
    pub(crate) fn abort(&mut self, backend: &B) {
        match self {
            Handle::Posted(xfer) => backend.abort(xfer),
            Handle::Deferred(slot) => {
                let mut pending = slot.lock();
                match &mut *pending {
                    Pending::Queued => *pending = Pending::Dropped(FailureReason::Aborted),
                    Pending::Posting { abort } => *abort = true,
                    Pending::Posted(xfer) => backend.abort(xfer),
                    Pending::Failed(_) | Pending::Dropped(_) => {}
                }
            }
        }
    }

    /// Releases the transfer's resources: `Err` (busy) while it may still move a byte, which
    /// a queued or posting one may.
    pub(crate) fn release(self, backend: &B) -> Result<(), Self> {
        match self {
            Handle::Posted(xfer) => backend.release(xfer).map_err(Handle::Posted),
            Handle::Deferred(slot) => {
                let mut pending = slot.lock();
                match &*pending {
                    // Never posted, or its post failed: nothing to release.
                    Pending::Failed(_) | Pending::Dropped(_) => return Ok(()),
                    Pending::Queued | Pending::Posting { .. } => {
                        drop(pending);
                        return Err(Handle::Deferred(slot));
                    }
                    Pending::Posted(_) => {}
                }
                // The slot stays terminal: the posting thread never posts it again.
                match std::mem::replace(&mut *pending, Pending::Dropped(FailureReason::Aborted)) {
                    Pending::Posted(xfer) => {
                        drop(pending);
                        backend.release(xfer).map_err(Handle::Posted)
                    }
                    other => {
                        *pending = other;
                        Ok(())
                    }
                }
            }
        }
    }

    /// Whether it still waits for the posting thread (not yet handed to the backend).
    pub(crate) fn is_queued(&self) -> bool {
        match self {
            Handle::Posted(_) => false,
            Handle::Deferred(slot) => matches!(&*slot.lock(), Pending::Queued),
        }
    }

    /// Whether its failure was already counted toward the peer's health (a failed post, which
    /// the posting thread counted).
    pub(crate) fn counted(&self) -> bool {
        match self {
            Handle::Posted(_) => false,
            Handle::Deferred(slot) => matches!(&*slot.lock(), Pending::Failed(_)),
        }
    }
}

/// What a deferred transfer posts.
pub(crate) enum Work {
    /// A block transfer (the index lists were validated at submit).
    Transfer {
        op: Op,
        local: Vec<BlockIndex>,
        remote: Vec<BlockIndex>,
    },
    /// A standalone notification (its frame).
    Notification(Arc<[u8]>),
}

/// One transfer for the posting thread.
pub(crate) struct Job<B: Backend> {
    id: TransferId,
    /// Weak: a job waiting in the queue must not keep its peer connected once nothing tracks
    /// the transfer any more (cancelled, removed, closed): the tracking holds the strong
    /// reference while the transfer is tracked.
    conn: Weak<PeerConn<B>>,
    work: Work,
    slot: Arc<Mutex<Pending<B::Xfer>>>,
}

/// What the posting thread receives.
pub(crate) enum Msg<B: Backend> {
    Post(Job<B>),
    /// Close: exit (every transfer still queued was dropped before this was sent).
    Stop,
}

/// A queued transfer: the handle to track and the job to send to the posting thread.
pub(crate) fn queue<B: Backend>(
    id: TransferId,
    conn: Arc<PeerConn<B>>,
    work: Work,
) -> (Handle<B>, Job<B>) {
    let slot = Arc::new(Mutex::new(Pending::Queued));
    let job = Job {
        id,
        conn: Arc::downgrade(&conn),
        work,
        slot: slot.clone(),
    };
    (Handle::Deferred(slot), job)
}

impl<B: Backend> Job<B> {
    /// Fails the job without posting it (the posting thread is gone).
    pub(crate) fn abandon(self, why: &str) {
        let mut pending = self.slot.lock();
        if matches!(*pending, Pending::Queued) {
            *pending = Pending::Failed(FailureReason::Backend(format!("posting it failed: {why}")));
        }
    }

    /// Posts the job unless it was dropped, the peer removed or the transport closed since it
    /// was queued. `in_post` counts it while it is inside the backend's post. Rings
    /// `doorbell` once the slot says how it went: the job may have ended here (unposted, or
    /// refused), and a transfer the backend finished inside its post rang before the slot
    /// said `Posted`, when a waiter's drain still saw it being posted.
    fn post(self, backend: &B, closed: &AtomicBool, in_post: &AtomicUsize, doorbell: &Doorbell) {
        self.post_or_drop(backend, closed, in_post);
        doorbell.ring();
    }

    /// [`Job::post`] but the ring.
    fn post_or_drop(self, backend: &B, closed: &AtomicBool, in_post: &AtomicUsize) {
        let conn = {
            let mut pending = self.slot.lock();
            if !matches!(*pending, Pending::Queued) {
                return;
            }
            if closed.load(Ordering::SeqCst) {
                *pending = Pending::Dropped(FailureReason::Aborted);
                return;
            }
            // Nothing tracks the transfer any more: it is never posted.
            let Some(conn) = self.conn.upgrade() else {
                *pending = Pending::Dropped(FailureReason::Aborted);
                return;
            };
            if conn.is_retired() {
                *pending = Pending::Dropped(FailureReason::PeerRemoved);
                return;
            }
            *pending = Pending::Posting { abort: false };
            // Counted before the slot says `Posting` to anyone: a transfer forgotten by
            // `cancel(Immediate)` meanwhile is then never live and uncounted.
            in_post.fetch_add(1, Ordering::SeqCst);
            conn
        };
        // Counted out once the slot says how the post ended, when the backend holds the
        // transfer (or nothing moves).
        let _counted = InPost(in_post);
        let Some(peer) = conn.peer() else {
            *self.slot.lock() = Pending::Dropped(FailureReason::PeerRemoved);
            return;
        };
        // A backend that panics fails this transfer, not the posting thread.
        let posted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &self.work {
            Work::Transfer { op, local, remote } => backend.post(peer, *op, local, remote),
            Work::Notification(frame) => backend.notify(peer, frame),
        }))
        .unwrap_or_else(|_| Err(BackendError::other("the backend panicked while posting")));
        match posted {
            Ok(mut xfer) => {
                let mut pending = self.slot.lock();
                if matches!(*pending, Pending::Posting { abort: true }) {
                    backend.abort(&mut xfer);
                }
                *pending = Pending::Posted(xfer);
                tracing::trace!(transfer = %self.id, peer = %conn.id, "queued transfer posted");
            }
            Err(error) => {
                tracing::warn!(
                    transfer = %self.id,
                    peer = %conn.id,
                    %error,
                    "posting a queued transfer failed: it fails"
                );
                conn.refused(&error);
                *self.slot.lock() = Pending::Failed(post_failure(&error));
            }
        }
    }
}

/// Counts a transfer out of [`Job::post`]'s `in_post` when dropped.
struct InPost<'a>(&'a AtomicUsize);

impl Drop for InPost<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The failure a failed post reports: a remote disconnect stays one (it faults the peer);
/// anything else is the backend's error.
fn post_failure(error: &BackendError) -> FailureReason {
    let text = format!("posting it failed: {}", error.message());
    match error.kind() {
        BackendErrorKind::RemoteDisconnect => FailureReason::RemoteDisconnect(text),
        _ => FailureReason::Backend(text),
    }
}

/// The posting thread's loop: posts each job in turn until [`Msg::Stop`] (or every sender is
/// gone), counting the one inside the backend's post in `in_post`, ringing `doorbell` after
/// each.
pub(crate) fn run<B: Backend>(
    backend: &B,
    jobs: &Receiver<Msg<B>>,
    closed: &AtomicBool,
    in_post: &AtomicUsize,
    doorbell: &Doorbell,
) {
    for msg in jobs.iter() {
        match msg {
            Msg::Post(job) => job.post(backend, closed, in_post, doorbell),
            Msg::Stop => break,
        }
    }
    // Jobs sent after the stop (none: close stops submits first) are dropped unposted.
    for msg in jobs.try_iter() {
        if let Msg::Post(job) = msg {
            job.abandon("the transport closed");
        }
    }
}
