//! The operations the provider refused for now, and the thread that posts them.
//!
//! A provider says `FI_EAGAIN` when its transmit queue is full, or (`ofi_rxm`) while the
//! connection to the peer is not up, which for a peer that went away lasts until something
//! cuts it. A caller's post never waits for that: the operations the provider refused stay in
//! [`Retries`], in order, and the retry thread posts them as completions free the queue. A
//! transfer whose operations stay refused for half the transport's stall timeout (of the
//! default one when it has none) fails as a remote disconnect (its operations already posted
//! still complete first); one whose link is cut fails with it.
//!
//! The retry thread is apart from the progress thread, and watched by it: a post can stay
//! inside the provider forever (libfabric 1.17's `shm`, to a peer killed while it held its
//! region's lock; blockwire checks the peer is alive before each post, but a kill can land
//! between that check and the lock). A post running past [`STUCK_AFTER`] marks its link
//! wedged (that link's queued operations fail) and a new retry thread takes over the rest,
//! so completions and other peers go on. The stuck thread is left, with everything it uses:
//! the backend then never closes its endpoint (`Fabric::drop`).

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use blockwire_core::kit::ProgressThread;
use blockwire_core::{BackendError, FailureReason};
use libfabric_sys::*;
use parking_lot::Mutex;

use crate::completion::{Outstanding, Transfer};
use crate::errors::EAGAIN;
use crate::link::Link;
use crate::post::{RmaOp, as_reason, post_one, refused};

/// A provider post that has not returned after this long is stuck (see the module docs).
const STUCK_AFTER: Duration = Duration::from_secs(1);

/// How long stopping the retry thread waits for a post it is in to return.
const STOP_BOUND: Duration = Duration::from_secs(1);

/// The backend's endpoint, its outstanding operations and the local descriptor: what the
/// retry thread posts through for links without an endpoint of their own.
pub(crate) struct MainPost(
    pub(crate) *mut fid_ep,
    pub(crate) Arc<Outstanding>,
    pub(crate) *mut c_void,
);
// SAFETY: objects of an FI_THREAD_SAFE domain; only their addresses are shared.
unsafe impl Send for MainPost {}
// SAFETY: as for `Send`.
unsafe impl Sync for MainPost {}

/// A transfer's operations the provider has not taken yet.
struct Queued {
    /// Weak: the queue must not keep a link (and through its endpoint the fabric) alive; a
    /// transfer still queued keeps its peer alive.
    link: Weak<Link>,
    transfer: Arc<Transfer>,
    ops: VecDeque<RmaOp>,
    /// When the provider last took one of `ops` (when they were queued, before it took any):
    /// a transfer gives up only after the peer accepted nothing for `give_up_after`, not
    /// after a long list took that long to post.
    since: Instant,
}

impl Queued {
    fn key(&self) -> usize {
        self.link.as_ptr() as usize
    }
}

/// The operations refused for now, in posting order per link, and their thread.
pub(crate) struct Retries {
    queue: Mutex<VecDeque<Queued>>,
    /// Queued transfers (read without the lock).
    len: AtomicUsize,
    /// When the retry thread's current provider post began (nanoseconds since `epoch`,
    /// 0: none), and its link.
    in_post_since: AtomicU64,
    in_post_link: AtomicUsize,
    epoch: Instant,
    /// How long a transfer's operations may stay refused before it fails: half the transport's
    /// stall timeout (of the default one when it has none), so the backend says why before the
    /// watchdog cuts. A peer that accepts no operation for this long (`tcp;ofi_rxm` refuses
    /// those to a peer whose connection is gone) is treated as disconnected.
    give_up_after: Duration,
    /// Links a post got stuck on: their queued operations fail.
    wedged: Mutex<Vec<usize>>,
    /// Bumped when a stuck thread is replaced: a thread of an older one stops.
    generation: AtomicU64,
    /// Threads left stuck in a post.
    stuck: AtomicUsize,
    thread: Mutex<Option<ProgressThread>>,
    main: OnceLock<MainPost>,
    idle_sleep: Duration,
}

impl Retries {
    /// Retries that give up on a transfer refused for `give_up_after`.
    pub(crate) fn new(idle_sleep: Duration, give_up_after: Duration) -> Arc<Self> {
        Arc::new(Retries {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            in_post_since: AtomicU64::new(0),
            in_post_link: AtomicUsize::new(0),
            epoch: Instant::now(),
            wedged: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            stuck: AtomicUsize::new(0),
            thread: Mutex::new(None),
            main: OnceLock::new(),
            idle_sleep,
            give_up_after,
        })
    }

    /// Starts the retry thread, posting through `main` for links without an endpoint.
    pub(crate) fn start(self: &Arc<Self>, main: MainPost) -> Result<(), BackendError> {
        let _ = self.main.set(main);
        self.spawn()
    }

    fn spawn(self: &Arc<Self>) -> Result<(), BackendError> {
        let me = self.clone();
        let generation = self.generation.load(Ordering::Acquire);
        let queued = self.clone();
        // Asleep until kicked while nothing is queued (`push` is followed by a kick): a
        // retry thread that woke every `idle_sleep` to find nothing took a tenth of a core
        // per backend from the data path.
        let thread = ProgressThread::spawn_on_demand(
            "ofi-retry",
            self.idle_sleep,
            move || me.run(generation),
            move || !queued.is_empty(),
        )
        .map_err(|e| BackendError::other(format!("spawning the retry thread: {e}")))?;
        *self.thread.lock() = Some(thread);
        Ok(())
    }

    /// Wakes the retry thread (operations were queued).
    pub(crate) fn kick(&self) {
        if let Some(t) = &*self.thread.lock() {
            t.kick();
        }
    }

    /// Stops the retry thread. Returns whether a retry thread is stuck in a post (this one,
    /// or one replaced earlier): what it uses must then never be closed.
    pub(crate) fn stop(&self) -> bool {
        if let Some(mut t) = self.thread.lock().take() {
            if !t.stop_within(STOP_BOUND) {
                self.stuck.fetch_add(1, Ordering::AcqRel);
            }
        }
        // The current thread's `Arc` of this is gone with it (or stays with a stuck one).
        self.stuck.load(Ordering::Acquire) > 0
    }

    /// Called by the progress thread: replaces a retry thread stuck in a post (see the module
    /// docs).
    pub(crate) fn watch(self: &Arc<Self>) {
        let since = self.in_post_since.load(Ordering::Acquire);
        if since == 0 {
            return;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        if now.saturating_sub(since) < STUCK_AFTER.as_nanos() as u64 {
            return;
        }
        let link = self.in_post_link.load(Ordering::Acquire);
        self.wedged.lock().push(link);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.in_post_since.store(0, Ordering::Release);
        self.stuck.fetch_add(1, Ordering::AcqRel);
        tracing::error!(
            "libfabric retry thread stuck in a post for over {STUCK_AFTER:?} (a peer died \
             holding its region's lock): left running, a new one takes over, and this \
             backend's endpoint stays open for the process's lifetime"
        );
        if let Some(old) = self.thread.lock().take() {
            old.detach();
        }
        if let Err(e) = self.spawn() {
            tracing::error!(error = %e, "libfabric: replacing the stuck retry thread");
        }
    }

    /// Queues `ops` of `transfer` to `link`, behind what is queued already.
    pub(crate) fn push(&self, link: &Arc<Link>, transfer: &Arc<Transfer>, ops: Vec<RmaOp>) {
        link.queued.fetch_add(1, Ordering::AcqRel);
        self.len.fetch_add(1, Ordering::AcqRel);
        self.queue.lock().push_back(Queued {
            link: Arc::downgrade(link),
            transfer: transfer.clone(),
            ops: ops.into(),
            since: Instant::now(),
        });
    }

    /// Whether anything is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Posts what the provider takes now, one queued transfer at a time, taken out of the
    /// queue while it is posted (callers queue meanwhile): per link in order, a link's later
    /// operations wait behind one refused. Returns how many operations it posted or gave up
    /// on. A thread whose generation is over returns.
    fn run(&self, generation: u64) -> usize {
        if self.is_empty() {
            return 0;
        }
        let Some(main) = self.main.get() else {
            return 0;
        };
        let current = || self.generation.load(Ordering::Acquire) == generation;
        let mut blocked: Vec<usize> = Vec::new();
        let mut handled = 0;
        let mut at = 0;
        while current() {
            let taken = {
                let mut queue = self.queue.lock();
                while queue.get(at).is_some_and(|q| blocked.contains(&q.key())) {
                    at += 1;
                }
                queue.remove(at)
            };
            let Some(mut q) = taken else { break };
            let key = q.key();
            let outcome = if self.wedged.lock().contains(&key) {
                Some(FailureReason::RemoteDisconnect(
                    "a post to this peer never returned from the provider".into(),
                ))
            } else {
                match q.link.upgrade() {
                    None => Some(FailureReason::RemoteDisconnect(
                        "the peer was disconnected before its operations were posted".into(),
                    )),
                    Some(link) => {
                        self.in_post_link.store(key, Ordering::Release);
                        let began = (self.epoch.elapsed().as_nanos() as u64).max(1);
                        self.in_post_since.store(began, Ordering::Release);
                        // SAFETY: the link's endpoint, or the backend's, is live while the
                        // link holds it (the backend's: `Fabric` stops this thread before it
                        // closes it, or never closes it); `q.ops` were built by `post` for
                        // this transfer (see `post_one`).
                        let outcome = unsafe {
                            post_queued(&link, &mut q, main, &mut handled, self.give_up_after)
                        };
                        if current() {
                            self.in_post_since.store(0, Ordering::Release);
                        }
                        outcome
                    }
                }
            };
            let finished = match outcome {
                Some(why) => {
                    handled += q.ops.len();
                    q.ops.clear();
                    q.transfer.cell.note_failure(why);
                    true
                }
                None => q.ops.is_empty(),
            };
            if finished {
                if let Some(link) = q.link.upgrade() {
                    link.queued.fetch_sub(1, Ordering::AcqRel);
                }
                self.len.fetch_sub(1, Ordering::AcqRel);
                // Last: once every operation is accounted for, the transfer may be released.
                q.transfer.all_posted();
                continue;
            }
            blocked.push(key);
            let mut queue = self.queue.lock();
            if current() {
                // Back where it was: before its link's later transfers.
                at = at.min(queue.len());
                queue.insert(at, q);
                at += 1;
            } else {
                // Replaced while in the post: its link's later transfers are all behind.
                queue.push_front(q);
            }
        }
        handled
    }
}

/// Posts `q`'s operations until the provider refuses one. `Some(why)` when the transfer must
/// give up the rest.
///
/// # Safety
///
/// As for [`post_one`].
unsafe fn post_queued(
    link: &Arc<Link>,
    q: &mut Queued,
    main: &MainPost,
    handled: &mut usize,
    give_up_after: Duration,
) -> Option<FailureReason> {
    let held = match link.hold_for_retry() {
        Ok(held) => held,
        Err(e) => return Some(as_reason(&e)),
    };
    let route = match link.route(&held, (main.0, &main.1)) {
        Ok(route) => route,
        Err(e) => return Some(as_reason(&e)),
    };
    // READs hold off a closing shm target in another process (`crate::guard`).
    let mut reads = link.read_guard();
    while let Some(op) = q.ops.front() {
        if let Err(why) = reads.admit(op) {
            drop((reads, held));
            link.cut_closed(&why);
            return Some(FailureReason::RemoteDisconnect(why));
        }
        // SAFETY: per this function's contract.
        let ret = unsafe { post_one(&route, main.2, op, &q.transfer) };
        reads.posted(op);
        if ret == EAGAIN {
            if q.since.elapsed() > give_up_after {
                return Some(FailureReason::RemoteDisconnect(format!(
                    "posting {}: the provider refused it for {give_up_after:?} (FI_EAGAIN, half the \
                     stall timeout): the peer accepts no operations",
                    op.op
                )));
            }
            return None;
        }
        let op = q.ops.pop_front()?;
        *handled += 1;
        q.since = Instant::now();
        if ret != 0 {
            return Some(refused(op.op, ret));
        }
    }
    None
}
