//! One tracked transfer ([`Tracked`]): its handle, its peer connection, the notification it
//! carries and where that stands, and what it reports once the backend releases it
//! ([`Released`]).

use std::sync::Arc;
use std::time::Duration;

use blockwire_core::{Backend, FailureReason, XferState};

use super::peers::PeerConn;
use super::posting::Handle;
use crate::telemetry::Probe;

/// Where a transfer that carries a notification stands.
enum Stage {
    /// The data moves; the notification (its frame) goes once the data is in place.
    Data(Arc<[u8]>),
    /// The notification is on its way (the tracked handle is now the notification's).
    Notify,
    /// A plain transfer, or a notified one whose notification is no longer to be sent.
    Plain,
}

/// One submitted transfer: posted, or queued for the posting thread.
pub(crate) struct Tracked<B: Backend> {
    pub(super) xfer: Handle<B>,
    pub(super) conn: Arc<PeerConn<B>>,
    /// The first terminal state the backend reported; kept so a transfer whose release is
    /// refused reports what it first said once it is finally released.
    pub(super) outcome: Option<XferState>,
    /// Its peer was removed (or replaced) while it still ran: it reports `PeerRemoved`,
    /// whatever the backend says later. One that had completed before reports its outcome.
    pub(super) removed: bool,
    stage: Stage,
    /// Cancelled (or closed) before it completed: a notification it carries is not sent.
    cancelled: bool,
    /// Data handles of notified transfers whose release the backend refused when the
    /// notification was posted; released with the transfer.
    spent: Vec<Handle<B>>,
    /// With telemetry on: what it notes of the transfer.
    pub(super) probe: Option<Box<Probe>>,
}

impl<B: Backend> Tracked<B> {
    pub(crate) fn new(xfer: Handle<B>, conn: Arc<PeerConn<B>>) -> Self {
        Tracked {
            xfer,
            conn,
            outcome: None,
            removed: false,
            stage: Stage::Plain,
            cancelled: false,
            spent: Vec::new(),
            probe: None,
        }
    }

    /// With telemetry's probe.
    pub(crate) fn with_probe(mut self, probe: Option<Probe>) -> Self {
        self.probe = probe.map(Box::new);
        self
    }

    /// A transfer whose notification (`frame`) is sent once its data is in place.
    pub(crate) fn notified(xfer: Handle<B>, conn: Arc<PeerConn<B>>, frame: Arc<[u8]>) -> Self {
        Tracked {
            stage: Stage::Data(frame),
            ..Self::new(xfer, conn)
        }
    }

    /// A standalone notification (posted, or queued).
    pub(crate) fn notification(xfer: Handle<B>, conn: Arc<PeerConn<B>>) -> Self {
        Tracked {
            stage: Stage::Notify,
            ..Self::new(xfer, conn)
        }
    }

    /// Cancel, remove or close reached it: if its data is still moving, its notification will
    /// not be sent, and it cannot end done.
    pub(crate) fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// Observes the transfer once and remembers the first terminal state, which also counts
    /// toward its peer's health (unless the peer was removed meanwhile). A notified transfer
    /// whose data is in place posts its notification here and runs on as that.
    pub(super) fn observe(&mut self, backend: &B) -> bool {
        self.observe_as(backend, false)
    }

    /// [`observe`](Self::observe), for certain ([`Backend::state_blocking`]): what the stall
    /// watchdog reads before it cuts a peer.
    pub(super) fn observe_certain(&mut self, backend: &B) -> bool {
        self.observe_as(backend, true)
    }

    fn observe_as(&mut self, backend: &B, certain: bool) -> bool {
        if self.outcome.is_some() {
            return true;
        }
        let mut state = self.xfer.state(backend, certain);
        if !state.is_terminal() {
            return false;
        }
        // A failed post was counted toward the peer's health when it failed.
        let counted = self.xfer.counted();
        match (&self.stage, &state) {
            (Stage::Data(frame), XferState::Done) => {
                let frame = frame.clone();
                self.stage = Stage::Plain;
                // Data in place, but the caller gave it up first: the target is not told, so
                // the transfer did not complete.
                if self.removed || self.conn.is_retired() {
                    state = XferState::Failed(FailureReason::PeerRemoved);
                } else if self.cancelled {
                    state = XferState::Failed(FailureReason::Aborted);
                } else if let Some(next) = self.post_notification(backend, &frame) {
                    state = next;
                } else {
                    return false;
                }
            }
            // Dropped unposted because its peer was retired (the posting thread saw the
            // remove before `abort_peer` reached this transfer): it ran when its peer was
            // removed, and reports that (found by the model-based test).
            (_, XferState::Failed(FailureReason::PeerRemoved)) => {
                self.removed = true;
                self.outcome = Some(state);
                return true;
            }
            (Stage::Notify, XferState::Failed(reason)) => {
                if !counted && !self.removed && !self.conn.is_retired() {
                    self.conn.observed(&state);
                }
                self.outcome = Some(XferState::Failed(FailureReason::NotificationUndelivered(
                    reason.to_string(),
                )));
                return true;
            }
            _ => {}
        }
        if !counted && !self.removed && !self.conn.is_retired() {
            self.conn.observed(&state);
        }
        self.outcome = Some(state);
        true
    }

    /// Posts the notification of a transfer whose data is done; the tracked handle becomes
    /// the notification's. `None` once posted; the terminal state if it could not be.
    fn post_notification(&mut self, backend: &B, frame: &[u8]) -> Option<XferState> {
        let Some(peer) = self.conn.peer() else {
            return Some(XferState::Failed(FailureReason::PeerRemoved));
        };
        match backend.notify(peer, frame) {
            Ok(next) => {
                let data = std::mem::replace(&mut self.xfer, Handle::Posted(next));
                if let Err(data) = data.release(backend) {
                    self.spent.push(data);
                }
                self.stage = Stage::Notify;
                match &self.probe {
                    Some(p) => {
                        tracing::debug!(parent: p.span(), "data in place: notification posted")
                    }
                    None => {
                        tracing::trace!(peer = %self.conn.id, "data in place: notification posted")
                    }
                }
                None
            }
            Err(e) => Some(XferState::Failed(FailureReason::NotificationUndelivered(
                format!("posting it failed: {e}"),
            ))),
        }
    }

    /// Releases the transfer if it has stopped; gives it back otherwise.
    pub(super) fn try_release(mut self, backend: &B) -> Result<Released<B>, Self> {
        if !self.observe(backend) {
            return Err(self);
        }
        for data in std::mem::take(&mut self.spent) {
            if let Err(data) = data.release(backend) {
                self.spent.push(data);
            }
        }
        if !self.spent.is_empty() {
            return Err(self);
        }
        let Tracked {
            xfer,
            conn,
            outcome,
            removed,
            stage,
            cancelled,
            spent,
            probe,
        } = self;
        // A notification delivered while its peer was being removed: the target was told, so
        // the transfer is done whatever the remove said (found by the model-based test).
        let delivered = matches!(stage, Stage::Notify) && matches!(outcome, Some(XferState::Done));
        match xfer.release(backend) {
            Ok(()) => Ok(Released {
                conn,
                outcome,
                removed: removed && !delivered,
                probe,
            }),
            Err(xfer) => Err(Tracked {
                xfer,
                conn,
                outcome,
                removed,
                stage,
                cancelled,
                spent,
                probe,
            }),
        }
    }
}

/// A released transfer: its peer connection (dropped outside every lock, as dropping the last
/// reference disconnects) and what it reported.
pub(crate) struct Released<B: Backend> {
    pub(crate) conn: Arc<PeerConn<B>>,
    outcome: Option<XferState>,
    removed: bool,
    pub(super) probe: Option<Box<Probe>>,
}

impl<B: Backend> Released<B> {
    /// The id's report: a transfer still running when its peer was removed fails with
    /// `PeerRemoved` whatever the backend said; one that had completed reports its outcome.
    pub(super) fn report(&self, stall_timeout: Option<Duration>) -> Result<(), FailureReason> {
        if self.removed {
            return Err(FailureReason::PeerRemoved);
        }
        match &self.outcome {
            Some(XferState::Failed(_)) if self.conn.is_stalled() => {
                Err(FailureReason::RemoteDisconnect(format!(
                    "no transfer to this peer completed for {:?}: the connection was cut",
                    stall_timeout.unwrap_or_default()
                )))
            }
            Some(XferState::Failed(reason)) => Err(reason.clone()),
            _ => Ok(()),
        }
    }
}
