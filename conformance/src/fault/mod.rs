//! Fault injection: [`FaultPlan`], the switches (here), and [`FaultyBackend`], the wrapper
//! that obeys them (`backend`), injecting the faults the contract must survive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use blockwire_core::kit::LiveCounts;
#[cfg(doc)]
use blockwire_core::{Capabilities, FailureReason};
use parking_lot::{Condvar, Mutex};

mod backend;

pub use backend::{FaultyBackend, FaultyPeer, FaultyXfer, INJECTED};

/// The switches of one [`FaultyBackend`]. Cheap to clone; every clone controls the same
/// backend.
///
/// ```
/// use blockwire_conformance::FaultPlan;
/// let plan = FaultPlan::new();
/// plan.fail_nth_post(2);
/// plan.hold_transfers();
/// plan.release_transfers();
/// assert_eq!(plan.connected_peers(), 0);
/// ```
#[derive(Clone, Default)]
pub struct FaultPlan(Arc<Plan>);

#[derive(Default)]
struct Plan {
    registrations_held: Mutex<bool>,
    /// Held connects ignore the transport's close and cancels (see
    /// [`FaultPlan::hold_registrations_uninterruptibly`]).
    uninterruptible: AtomicBool,
    registrations_cv: Condvar,
    connects_started: AtomicUsize,
    transfers_held: AtomicBool,
    /// `fail_peer` calls (the stall watchdog).
    peers_failed: AtomicUsize,
    posts: AtomicU64,
    fail_post_at: AtomicU64,
    /// Reported as [`Capabilities::posts_in_caller`] (whatever the inner backend says).
    defer_posts: AtomicBool,
    posts_held: Mutex<bool>,
    posts_cv: Condvar,
    /// See [`FaultPlan::end_inside_post`].
    end_inside_post: Mutex<Option<Duration>>,
    fail_state: AtomicBool,
    state_busy: AtomicBool,
    /// `state_blocking` calls.
    certain_looks: AtomicUsize,
    refuse_cuts: AtomicBool,
    refuse_notifications: AtomicBool,
    lose_notifications: AtomicBool,
    release_busy: AtomicBool,
    disconnected: AtomicBool,
    counts: LiveCounts,
}

impl FaultPlan {
    /// A plan with every fault off.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// assert_eq!(plan.live_transfers(), 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, `connect` blocks until [`FaultPlan::release_registrations`] (or until the
    /// transport closes or its registration is superseded: it then fails, as a connect
    /// waiting for a peer is told to): a registration stays in flight as long as a test
    /// needs.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// plan.hold_registrations();
    /// plan.release_registrations();
    /// ```
    pub fn hold_registrations(&self) {
        *self.0.registrations_held.lock() = true;
    }

    /// Like [`FaultPlan::hold_registrations`], and a held connect gives up neither when the
    /// transport closes (`Backend::stop_connecting`) nor when its registration is superseded
    /// (`Backend::cancel_connect`): a backend whose connect cannot be cut short, which close
    /// waits for only until its close timeout.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// plan.hold_registrations_uninterruptibly();
    /// plan.release_registrations();
    /// ```
    pub fn hold_registrations_uninterruptibly(&self) {
        self.0.uninterruptible.store(true, Ordering::SeqCst);
        self.hold_registrations();
    }

    /// Lets held and later connects through.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().release_registrations();
    /// ```
    pub fn release_registrations(&self) {
        *self.0.registrations_held.lock() = false;
        self.0.registrations_cv.notify_all();
    }

    /// Waits until `n` connects have started in total (so a registration is surely inside the
    /// backend); false on timeout.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// assert!(plan.wait_connects_started(0, std::time::Duration::ZERO));
    /// ```
    pub fn wait_connects_started(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.0.connects_started.load(Ordering::SeqCst) < n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Transfers posted from now on report running, refuse release and ignore abort until
    /// [`FaultPlan::release_transfers`] (whatever the inner backend did with them): a
    /// transfer a library cannot stop.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().hold_transfers();
    /// ```
    pub fn hold_transfers(&self) {
        self.0.transfers_held.store(true, Ordering::SeqCst);
    }

    /// Lets held transfers report their real state.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().release_transfers();
    /// ```
    pub fn release_transfers(&self) {
        self.0.transfers_held.store(false, Ordering::SeqCst);
    }

    /// Makes the wrapper report [`Capabilities::posts_in_caller`], so the transport posts
    /// through its posting thread whatever the inner backend does. Set it before the transport
    /// opens (the transport reads the capability once); [`crate::Spec::with_deferred_posting`]
    /// does.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().defer_posts(true);
    /// ```
    pub fn defer_posts(&self, on: bool) {
        self.0.defer_posts.store(on, Ordering::SeqCst);
    }

    /// From now on, `post` and `notify` block until [`FaultPlan::release_posts`]: a library
    /// whose post waits for data, here for as long as a test needs. Only for a transport that
    /// posts through its posting thread ([`FaultPlan::defer_posts`]); otherwise the caller
    /// would wait.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// plan.hold_posts();
    /// plan.release_posts();
    /// ```
    pub fn hold_posts(&self) {
        *self.0.posts_held.lock() = true;
    }

    /// From now on (`Some(delay)`), `post` returns only once the transfer it posted has
    /// ended, `delay` after that: a library whose post moves the data before it returns. The
    /// end, and the inner backend's ring of the transport's doorbell, then come while the
    /// transport still counts the transfer as being posted. While on, the wrapper reports
    /// [`Capabilities::doorbell`] as the inner backend does (this fault ends nothing behind
    /// the inner backend's back), so a `poll_wait` sleeps until a ring. `None` turns it off.
    /// Only for a transport that posts through its posting thread
    /// ([`FaultPlan::defer_posts`]).
    ///
    /// ```
    /// use blockwire::Transport;
    /// use blockwire_conformance::{Faulty, Fixture, Setting, Spec};
    /// use blockwire_shm::ShmBackend;
    /// let o = Faulty(Setting::<ShmBackend>::default()).open(&Spec::new(2, 4096))?;
    /// let plan = o.faults.expect("a faulty fixture");
    /// // The wrapper's other faults change states unrung: waiters nap.
    /// assert!(!o.transport.capabilities().doorbell);
    /// plan.end_inside_post(Some(std::time::Duration::from_millis(50)));
    /// // shm rings; with only this fault on, its rings stand.
    /// assert!(o.transport.capabilities().doorbell);
    /// plan.end_inside_post(None);
    /// assert!(!o.transport.capabilities().doorbell);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn end_inside_post(&self, delay: Option<Duration>) {
        *self.0.end_inside_post.lock() = delay;
    }

    /// Lets held and later posts through.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().release_posts();
    /// ```
    pub fn release_posts(&self) {
        *self.0.posts_held.lock() = false;
        self.0.posts_cv.notify_all();
    }

    /// Posts that reached the wrapper so far (held ones included; notifications are not
    /// counted).
    ///
    /// ```
    /// assert_eq!(blockwire_conformance::FaultPlan::new().posts(), 0);
    /// ```
    pub fn posts(&self) -> u64 {
        self.0.posts.load(Ordering::SeqCst)
    }

    /// Waits until `n` posts reached the wrapper in total (counted as each post begins, before
    /// the wrapped backend's post returns); false on timeout.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// assert!(plan.wait_posts(0, std::time::Duration::ZERO));
    /// ```
    pub fn wait_posts(&self, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.posts() < n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// The `n`th post from now (1 = the next) fails with an injected error; 0 disarms.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().fail_nth_post(1);
    /// ```
    pub fn fail_nth_post(&self, n: u64) {
        let at = if n == 0 {
            0
        } else {
            self.0.posts.load(Ordering::SeqCst) + n
        };
        self.0.fail_post_at.store(at, Ordering::SeqCst);
    }

    /// While on, the backend refuses to post notifications (a notified transfer's data lands,
    /// then it fails as `NotificationUndelivered`; a standalone notification is refused).
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// plan.refuse_notifications(true);
    /// ```
    pub fn refuse_notifications(&self, on: bool) {
        self.0.refuse_notifications.store(on, Ordering::SeqCst);
    }

    /// While on, notifications posted fail in flight, undelivered (they are not sent).
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// plan.lose_notifications(true);
    /// ```
    pub fn lose_notifications(&self, on: bool) {
        self.0.lose_notifications.store(on, Ordering::SeqCst);
    }

    /// While on, every state check fails ([`FailureReason::StateCheck`], which faults the
    /// peer).
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().fail_state_checks(false);
    /// ```
    pub fn fail_state_checks(&self, on: bool) {
        self.0.fail_state.store(on, Ordering::SeqCst);
    }

    /// While on, `state` reports every transfer running, as a backend does whose lock
    /// another thread holds across a long library call (nixl's posting thread); only
    /// `state_blocking`, which waits for that lock, sees what the library finished.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().state_busy(false);
    /// ```
    pub fn state_busy(&self, on: bool) {
        self.0.state_busy.store(on, Ordering::SeqCst);
    }

    /// How many times the transport asked for a transfer's state for certain
    /// (`state_blocking`: the stall watchdog, before a cut).
    ///
    /// ```
    /// assert_eq!(blockwire_conformance::FaultPlan::new().certain_looks(), 0);
    /// ```
    pub fn certain_looks(&self) -> usize {
        self.0.certain_looks.load(Ordering::SeqCst)
    }

    /// While on, the backend cannot cut a peer: `fail_peer` counts the call and returns
    /// `false`, and held transfers stay held (as a backend without a cut leaves them to the
    /// library).
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().refuse_cuts(false);
    /// ```
    pub fn refuse_cuts(&self, on: bool) {
        self.0.refuse_cuts.store(on, Ordering::SeqCst);
    }

    /// While on, every release reports busy.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().release_busy(false);
    /// ```
    pub fn release_busy(&self, on: bool) {
        self.0.release_busy.store(on, Ordering::SeqCst);
    }

    /// How many times the transport's stall watchdog asked this backend to cut a peer.
    ///
    /// ```
    /// assert_eq!(blockwire_conformance::FaultPlan::default().peers_failed(), 0);
    /// ```
    pub fn peers_failed(&self) -> usize {
        self.0.peers_failed.load(Ordering::SeqCst)
    }

    /// Simulates a remote disconnect of every peer: their transfers fail with
    /// [`FailureReason::RemoteDisconnect`] (the inner transfer is aborted) and posts fail;
    /// `false` heals.
    ///
    /// ```
    /// blockwire_conformance::FaultPlan::new().disconnect(false);
    /// ```
    pub fn disconnect(&self, on: bool) {
        self.0.disconnected.store(on, Ordering::SeqCst);
    }

    /// Peers connected through the wrapper and not yet disconnected (survives the transport).
    ///
    /// ```
    /// assert_eq!(blockwire_conformance::FaultPlan::new().connected_peers(), 0);
    /// ```
    pub fn connected_peers(&self) -> usize {
        self.0.counts.stats().connected_peers
    }

    /// Transfers posted through the wrapper and not yet released (survives the transport).
    ///
    /// ```
    /// assert_eq!(blockwire_conformance::FaultPlan::new().live_transfers(), 0);
    /// ```
    pub fn live_transfers(&self) -> usize {
        self.0.counts.stats().live_transfers
    }
}
