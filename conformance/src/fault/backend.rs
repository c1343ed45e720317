//! [`FaultyBackend`]: forwards to the real backend, injecting what its [`FaultPlan`] says.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use blockwire_core::kit::Live;
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendStats, BlockIndex, Capabilities, FailureReason,
    Op, PeerDescriptor, XferState,
};

use super::FaultPlan;

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
    /// `Backend::stop_connecting` was called: a held connect gives up (unless the plan holds
    /// registrations uninterruptibly).
    connecting_stopped: AtomicBool,
    /// `Backend::cancel_connect` calls: a held connect that started before one gives up
    /// (unless the plan holds registrations uninterruptibly).
    connects_cancelled: AtomicU64,
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
        FaultyBackend {
            inner,
            plan,
            connecting_stopped: AtomicBool::new(false),
            connects_cancelled: AtomicU64::new(0),
        }
    }

    /// A transfer's state with the injected faults; `certain`: the inner backend's
    /// `state_blocking`.
    fn observe(&self, xfer: &mut FaultyXfer<B::Xfer>, certain: bool) -> XferState {
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
        if certain {
            self.inner.state_blocking(inner)
        } else {
            self.inner.state(inner)
        }
    }

    fn held<X>(&self, x: &FaultyXfer<X>) -> bool {
        x.held && self.plan.0.transfers_held.load(Ordering::SeqCst)
    }

    fn disconnected(&self) -> bool {
        self.plan.0.disconnected.load(Ordering::SeqCst)
    }

    /// Wakes a held connect to look at why it might give up, under the lock it waits with (so
    /// it cannot miss the wake-up).
    fn wake_held_connects(&self) {
        let _held = self.plan.0.registrations_held.lock();
        self.plan.0.registrations_cv.notify_all();
    }

    /// What `post` and `notify` say while every peer counts as disconnected.
    fn refuse_if_disconnected(&self) -> Result<(), BackendError> {
        if self.disconnected() {
            return Err(BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!("{INJECTED}: peer disconnected"),
            ));
        }
        Ok(())
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
            let plan = &self.plan.0;
            let mut held = plan.registrations_held.lock();
            let cancels = self.connects_cancelled.load(Ordering::SeqCst);
            while *held {
                if !plan.uninterruptible.load(Ordering::SeqCst) {
                    let why = if self.connecting_stopped.load(Ordering::SeqCst) {
                        Some("stopped by close")
                    } else if self.connects_cancelled.load(Ordering::SeqCst) != cancels {
                        Some("cancelled (its registration was superseded)")
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        return Err(BackendError::new(
                            BackendErrorKind::Other,
                            format!("{INJECTED}: a held connect, {why}"),
                        ));
                    }
                }
                plan.registrations_cv.wait(&mut held);
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
        self.refuse_if_disconnected()?;
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
        self.refuse_if_disconnected()?;
        if self.plan.0.lose_notifications.load(Ordering::SeqCst) {
            let mut lost = self.wrap(None);
            lost.lost = true;
            return Ok(lost);
        }
        let inner = self.inner.notify(&peer.inner, frame)?;
        Ok(self.wrap(Some(inner)))
    }

    fn state(&self, xfer: &mut Self::Xfer) -> XferState {
        if self.plan.0.state_busy.load(Ordering::SeqCst) {
            return XferState::Running;
        }
        self.observe(xfer, false)
    }

    fn state_blocking(&self, xfer: &mut Self::Xfer) -> XferState {
        self.plan.0.certain_looks.fetch_add(1, Ordering::SeqCst);
        self.observe(xfer, true)
    }

    fn fail_peer(&self, peer: &Self::Peer) -> bool {
        self.plan.0.peers_failed.fetch_add(1, Ordering::SeqCst);
        if self.plan.0.refuse_cuts.load(Ordering::SeqCst) {
            return false;
        }
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

    fn stop_connecting(&self) {
        self.connecting_stopped.store(true, Ordering::SeqCst);
        self.wake_held_connects();
        self.inner.stop_connecting();
    }

    fn cancel_connect(&self) {
        self.connects_cancelled.fetch_add(1, Ordering::SeqCst);
        self.wake_held_connects();
        self.inner.cancel_connect();
    }

    fn assist(&self, budget: std::time::Duration) -> bool {
        self.inner.assist(budget)
    }

    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }
}
