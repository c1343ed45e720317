//! [`TransferCell`]: one transfer's outcome, shared by the code that completes it and the
//! handle `Backend::state` reads.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use super::Doorbell;
use crate::{FailureReason, XferState};

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const FAILED: u8 = 3;

/// One transfer's outcome: queued (nothing started yet), running, done, or failed with the
/// first failure noted. It ends once ([`TransferCell::finish`], [`TransferCell::fail`]):
/// whatever ends it later (a late completion, a second cut) changes nothing, so a backend may
/// end it from a library callback, a cut and a watchdog at once.
///
/// ```
/// use blockwire_core::{FailureReason, XferState, kit::TransferCell};
/// let cell = TransferCell::running();
/// assert_eq!(cell.state(), XferState::Running);
/// // An operation failed; the transfer's other operations still run, so it is not over.
/// cell.note_failure(FailureReason::Backend("put refused".into()));
/// assert!(!cell.is_ended());
/// cell.finish(); // the last operation completed
/// assert_eq!(cell.state(), XferState::Failed(FailureReason::Backend("put refused".into())));
/// cell.fail(FailureReason::Aborted); // too late: the first outcome stays
/// assert_eq!(cell.state(), XferState::Failed(FailureReason::Backend("put refused".into())));
/// ```
#[derive(Debug)]
pub struct TransferCell {
    state: AtomicU8,
    failure: Mutex<Option<FailureReason>>,
    /// Rung when the transfer ends (see [`TransferCell::with_doorbell`]).
    doorbell: Option<Doorbell>,
}

impl TransferCell {
    /// A transfer whose operations are posted: running.
    ///
    /// ```
    /// assert!(!blockwire_core::kit::TransferCell::running().is_ended());
    /// ```
    pub fn running() -> Self {
        Self::with_state(RUNNING)
    }

    /// A transfer waiting for a worker ([`TransferCell::start`]): it reads as running, and
    /// [`TransferCell::stop_if_queued`] can end it before a byte moves.
    ///
    /// ```
    /// let cell = blockwire_core::kit::TransferCell::queued();
    /// assert!(cell.start());
    /// assert!(!cell.stop_if_queued(blockwire_core::FailureReason::Aborted)); // started
    /// ```
    pub fn queued() -> Self {
        Self::with_state(QUEUED)
    }

    fn with_state(state: u8) -> Self {
        TransferCell {
            state: AtomicU8::new(state),
            failure: Mutex::new(None),
            doorbell: None,
        }
    }

    /// The same cell, ringing `doorbell` when the transfer ends (once, whatever ends it): a
    /// backend whose transfers all end through such cells can say
    /// [`crate::Capabilities::doorbell`].
    ///
    /// ```
    /// use blockwire_core::kit::{Doorbell, TransferCell};
    /// let bell = Doorbell::new();
    /// let cell = TransferCell::running().with_doorbell(bell.clone());
    /// cell.finish();
    /// cell.finish(); // over already: no second ring
    /// assert_eq!(bell.rung(), 1);
    /// ```
    pub fn with_doorbell(mut self, doorbell: Doorbell) -> Self {
        self.doorbell = Some(doorbell);
        self
    }

    /// Rings the doorbell, if any: the transfer just ended.
    fn ended(&self) {
        if let Some(bell) = &self.doorbell {
            bell.ring();
        }
    }

    fn failure(&self) -> std::sync::MutexGuard<'_, Option<FailureReason>> {
        // An `Option` holds no invariant a panic could break.
        self.failure.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A worker takes the queued transfer: false if it was stopped first (it must not start).
    ///
    /// ```
    /// use blockwire_core::{FailureReason, kit::TransferCell};
    /// let cell = TransferCell::queued();
    /// assert!(cell.stop_if_queued(FailureReason::Aborted));
    /// assert!(!cell.start());
    /// ```
    pub fn start(&self) -> bool {
        self.state
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Ends the transfer as failed with `why` if no worker took it yet; true if it did.
    ///
    /// ```
    /// use blockwire_core::{FailureReason, XferState, kit::TransferCell};
    /// let cell = TransferCell::queued();
    /// assert!(cell.stop_if_queued(FailureReason::Aborted));
    /// assert_eq!(cell.state(), XferState::Failed(FailureReason::Aborted));
    /// ```
    pub fn stop_if_queued(&self, why: FailureReason) -> bool {
        let mut failure = self.failure();
        let stopped = self
            .state
            .compare_exchange(QUEUED, FAILED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if stopped {
            *failure = Some(why);
        }
        drop(failure);
        if stopped {
            self.ended();
        }
        stopped
    }

    /// Notes a failure without ending the transfer (its other operations may still move
    /// bytes); the first one noted is the one reported.
    ///
    /// ```
    /// use blockwire_core::{FailureReason, kit::TransferCell};
    /// let cell = TransferCell::running();
    /// cell.note_failure(FailureReason::Aborted);
    /// assert!(!cell.is_ended());
    /// ```
    pub fn note_failure(&self, why: FailureReason) {
        self.failure().get_or_insert(why);
    }

    /// Ends the transfer: done, or failed if a failure was noted. Only the first end counts.
    ///
    /// ```
    /// use blockwire_core::{XferState, kit::TransferCell};
    /// let cell = TransferCell::running();
    /// cell.finish();
    /// assert_eq!(cell.state(), XferState::Done);
    /// ```
    pub fn finish(&self) {
        // Under the failure lock: a failure noted concurrently is seen or comes too late.
        let failure = self.failure();
        let end = if failure.is_some() { FAILED } else { DONE };
        let ended = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s == QUEUED || s == RUNNING).then_some(end)
            })
            .is_ok();
        drop(failure);
        if ended {
            self.ended();
        }
    }

    /// Notes `why` and ends the transfer (failed, unless it had ended already).
    ///
    /// ```
    /// use blockwire_core::{FailureReason, XferState, kit::TransferCell};
    /// let cell = TransferCell::running();
    /// cell.fail(FailureReason::RemoteDisconnect("cut".into()));
    /// assert!(matches!(cell.state(), XferState::Failed(FailureReason::RemoteDisconnect(_))));
    /// ```
    pub fn fail(&self, why: FailureReason) {
        self.note_failure(why);
        self.finish();
    }

    /// Whether the transfer has ended: nothing of it moves any more, as far as this cell is
    /// told.
    ///
    /// ```
    /// let cell = blockwire_core::kit::TransferCell::running();
    /// cell.finish();
    /// assert!(cell.is_ended());
    /// ```
    pub fn is_ended(&self) -> bool {
        self.state.load(Ordering::Acquire) >= DONE
    }

    /// The transfer's state, for `Backend::state`.
    ///
    /// ```
    /// use blockwire_core::{XferState, kit::TransferCell};
    /// assert_eq!(TransferCell::queued().state(), XferState::Running);
    /// ```
    pub fn state(&self) -> XferState {
        match self.state.load(Ordering::Acquire) {
            QUEUED | RUNNING => XferState::Running,
            DONE => XferState::Done,
            _ => XferState::Failed(
                self.failure()
                    .clone()
                    .unwrap_or_else(|| FailureReason::Backend("failed, reason unknown".into())),
            ),
        }
    }
}

impl AsRef<TransferCell> for TransferCell {
    fn as_ref(&self) -> &TransferCell {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_ends_leave_one_outcome() {
        for _ in 0..200 {
            let cell = std::sync::Arc::new(TransferCell::running());
            let c = cell.clone();
            let t = std::thread::spawn(move || c.fail(FailureReason::Aborted));
            cell.finish();
            t.join().expect("no panic");
            let first = cell.state();
            assert!(first == XferState::Done || first == XferState::Failed(FailureReason::Aborted));
            cell.fail(FailureReason::Backend("later".into()));
            assert_eq!(cell.state(), first);
        }
    }
}
