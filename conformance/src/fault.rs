//! [`FaultyBackend`]: wraps any backend and injects the faults the contract must survive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use blockwire_core::kit::{Live, LiveCounts};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendStats, BlockIndex, Capabilities, FailureReason,
    Op, PeerDescriptor, XferState,
};
use parking_lot::{Condvar, Mutex};

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

    /// From now on, `connect` blocks until [`FaultPlan::release_registrations`]: a
    /// registration stays in flight as long as a test needs.
    ///
    /// ```
    /// let plan = blockwire_conformance::FaultPlan::new();
    /// plan.hold_registrations();
    /// plan.release_registrations();
    /// ```
    pub fn hold_registrations(&self) {
        *self.0.registrations_held.lock() = true;
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

    /// Waits until `n` posts reached the wrapper in total; false on timeout.
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

/// How every fault the wrapper injects begins its message: the wrapper reports its faults with
/// the kinds a real backend would use (`Other`, `RemoteDisconnect`, ...), and says in the
/// message that it made them.
pub const INJECTED: &str = "injected by FaultyBackend";

/// A backend wrapper that injects faults on command ([`FaultPlan`]) and otherwise forwards to
/// the real backend, so the faults land on real transfers moving real bytes. A fake for fault
/// injection in the suite, never a backend of its own.
///
/// ```
/// use blockwire::{BlockTransport, Region, Transport, TransportOptions};
/// use blockwire_conformance::{FaultPlan, FaultyBackend};
/// use blockwire_core::OpenBackend;
/// let plan = FaultPlan::new();
/// let p = plan.clone();
/// let t = BlockTransport::open_with(Region::new(2, 64)?, TransportOptions::default(), |s, o| {
///     // SAFETY: `s` is the region the transport owns; it outlives the backend.
///     let inner = unsafe { blockwire_shm::ShmBackend::open(s, o)? };
///     Ok(FaultyBackend::new(inner, p))
/// })?;
/// assert_eq!(t.backend_kind(), "shm");
/// # Ok::<(), blockwire::Error>(())
/// ```
pub struct FaultyBackend<B: Backend> {
    inner: B,
    plan: FaultPlan,
}

/// A peer of a [`FaultyBackend`].
///
/// ```
/// use blockwire_conformance::{FaultyBackend, FaultyPeer};
/// use blockwire_core::Backend;
/// use blockwire_shm::{ShmBackend, ShmPeer};
/// fn peer_type<B: Backend<Peer = FaultyPeer<ShmPeer>>>() {}
/// peer_type::<FaultyBackend<ShmBackend>>(); // wraps the inner backend's peer
/// ```
pub struct FaultyPeer<P> {
    inner: P,
    _live: Live,
}

/// A transfer of a [`FaultyBackend`].
///
/// ```
/// use blockwire_conformance::{FaultyBackend, FaultyXfer};
/// use blockwire_core::Backend;
/// use blockwire_shm::{ShmBackend, ShmXfer};
/// fn xfer_type<B: Backend<Xfer = FaultyXfer<ShmXfer>>>() {}
/// xfer_type::<FaultyBackend<ShmBackend>>(); // wraps the inner backend's transfer
/// ```
pub struct FaultyXfer<X> {
    inner: Option<X>,
    /// Posted while transfers were held.
    held: bool,
    /// A notification this wrapper lost: it fails, and `inner` is `None`.
    lost: bool,
    _live: Live,
}

impl<B: Backend> FaultyBackend<B> {
    fn wrap(&self, inner: Option<B::Xfer>) -> FaultyXfer<B::Xfer> {
        FaultyXfer {
            inner,
            held: self.plan.0.transfers_held.load(Ordering::SeqCst),
            lost: false,
            _live: self.plan.0.counts.transfer(),
        }
    }

    /// Wraps `inner`, controlled by `plan`.
    ///
    /// ```
    /// # use blockwire_conformance::{FaultPlan, FaultyBackend};
    /// # fn wrap<B: blockwire_core::Backend>(b: B) -> FaultyBackend<B> {
    /// FaultyBackend::new(b, FaultPlan::new())
    /// # }
    /// ```
    pub fn new(inner: B, plan: FaultPlan) -> Self {
        FaultyBackend { inner, plan }
    }

    fn held<X>(&self, x: &FaultyXfer<X>) -> bool {
        x.held && self.plan.0.transfers_held.load(Ordering::SeqCst)
    }

    fn disconnected(&self) -> bool {
        self.plan.0.disconnected.load(Ordering::SeqCst)
    }

    /// Blocks while posts are held.
    fn wait_posts_released(&self) {
        let mut held = self.plan.0.posts_held.lock();
        while *held {
            self.plan.0.posts_cv.wait(&mut held);
        }
    }
}

impl<B: Backend> Backend for FaultyBackend<B> {
    type Peer = FaultyPeer<B::Peer>;
    type Xfer = FaultyXfer<B::Xfer>;

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        c.posts_in_caller |= self.plan.0.defer_posts.load(Ordering::SeqCst);
        // Its faults (a held transfer released, a failing state check, a disconnect, a lost
        // notification) change what `state` says without the inner backend ringing: a
        // `poll_wait` over it drains again after naps instead (and the suite's `+faults`
        // settings run that path). Ending transfers inside their post changes nothing behind
        // the inner backend's back: its rings stand.
        c.doorbell &= self.plan.0.end_inside_post.lock().is_some();
        c
    }

    fn address(&self) -> Vec<u8> {
        self.inner.address()
    }

    fn connect(&self, remote: &PeerDescriptor) -> Result<Self::Peer, BackendError> {
        self.plan.0.connects_started.fetch_add(1, Ordering::SeqCst);
        {
            let mut held = self.plan.0.registrations_held.lock();
            while *held {
                self.plan.0.registrations_cv.wait(&mut held);
            }
        }
        let inner = self.inner.connect(remote)?;
        Ok(FaultyPeer {
            inner,
            _live: self.plan.0.counts.peer(),
        })
    }

    fn disconnect(&self, peer: Self::Peer) {
        self.inner.disconnect(peer.inner);
    }

    fn post(
        &self,
        peer: &Self::Peer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<Self::Xfer, BackendError> {
        let n = self.plan.0.posts.fetch_add(1, Ordering::SeqCst) + 1;
        self.wait_posts_released();
        if self.plan.0.fail_post_at.load(Ordering::SeqCst) == n {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("{INJECTED}: post #{n} fails"),
            ));
        }
        if self.disconnected() {
            return Err(BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!("{INJECTED}: peer disconnected"),
            ));
        }
        let inner = self.inner.post(&peer.inner, op, local, remote)?;
        let mut xfer = self.wrap(Some(inner));
        let end_inside = *self.plan.0.end_inside_post.lock();
        if let (Some(delay), Some(inner)) = (end_inside, xfer.inner.as_mut()) {
            // Bounded: a transfer that never ends is the case's to report.
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.inner.state(inner), XferState::Running) && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_micros(100));
            }
            std::thread::sleep(delay);
        }
        Ok(xfer)
    }

    fn notify(&self, peer: &Self::Peer, frame: &[u8]) -> Result<Self::Xfer, BackendError> {
        self.wait_posts_released();
        if self.plan.0.refuse_notifications.load(Ordering::SeqCst) {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("{INJECTED}: notification refused"),
            ));
        }
        if self.disconnected() {
            return Err(BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!("{INJECTED}: peer disconnected"),
            ));
        }
        if self.plan.0.lose_notifications.load(Ordering::SeqCst) {
            let mut lost = self.wrap(None);
            lost.lost = true;
            return Ok(lost);
        }
        let inner = self.inner.notify(&peer.inner, frame)?;
        Ok(self.wrap(Some(inner)))
    }

    fn state(&self, xfer: &mut Self::Xfer) -> XferState {
        let held = self.held(xfer);
        let Some(inner) = xfer.inner.as_mut() else {
            return XferState::Failed(FailureReason::Backend(format!(
                "{INJECTED}: notification lost"
            )));
        };
        if self.disconnected() {
            self.inner.abort(inner);
            return XferState::Failed(FailureReason::RemoteDisconnect(format!(
                "{INJECTED}: peer disconnected"
            )));
        }
        if held {
            return XferState::Running;
        }
        if self.plan.0.fail_state.load(Ordering::SeqCst) {
            return XferState::Failed(FailureReason::StateCheck(format!(
                "{INJECTED}: state check failed"
            )));
        }
        self.inner.state(inner)
    }

    fn fail_peer(&self, peer: &Self::Peer) -> bool {
        self.plan.0.peers_failed.fetch_add(1, Ordering::SeqCst);
        if !self.plan.0.transfers_held.load(Ordering::SeqCst) {
            // Nothing injected holds the peer's transfers: the stall is real, and so is the
            // cut.
            return self.inner.fail_peer(&peer.inner);
        }
        // A stall this wrapper injects: it cuts by acting as a remote disconnect (of every
        // peer, as `FaultPlan::disconnect` does), so held transfers end. The inner connection
        // is healthy here, and is not cut: UCX 1.13 does not always finish a forced close of
        // a healthy endpoint (LeakSanitizer saw its error-callback state and a worker flush
        // left behind). Real cuts are tested against real dead peers (`dead_peer`) and real
        // closed ones (`target`).
        self.plan.disconnect(true);
        true
    }

    fn abort(&self, xfer: &mut Self::Xfer) {
        if !self.held(xfer) {
            if let Some(inner) = xfer.inner.as_mut() {
                self.inner.abort(inner);
            }
        }
    }

    fn release(&self, xfer: Self::Xfer) -> Result<(), Self::Xfer> {
        if self.plan.0.release_busy.load(Ordering::SeqCst)
            || (self.held(&xfer) && !self.disconnected())
        {
            return Err(xfer);
        }
        let FaultyXfer {
            inner,
            held,
            lost,
            _live,
        } = xfer;
        let Some(inner) = inner else {
            return Ok(());
        };
        self.inner.release(inner).map_err(|inner| FaultyXfer {
            inner: Some(inner),
            held,
            lost,
            _live,
        })
    }

    fn poll_notifications(&self) {
        self.inner.poll_notifications();
    }

    fn revoke(&self) {
        self.inner.revoke();
    }

    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }
}
