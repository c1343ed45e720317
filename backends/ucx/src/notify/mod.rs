//! Notifications: an active message to the peer's worker, acknowledged by the peer's handler.
//!
//! The sender posts `ucp_am_send_nbx` (id [`NOTIFY_AM_ID`], eager, with a reply endpoint) on
//! the peer's endpoint, carrying a sequence number and the frame. The target's handler runs
//! inside its `ucp_worker_progress` (its progress thread, a state check, or
//! `poll_notifications`), hands the frame to the inbox, and answers with an acknowledgement
//! (id [`ACK_AM_ID`]) on the reply endpoint saying what the inbox did with it. The notify
//! transfer is done when that acknowledgement says "queued"; it fails when it says the inbox
//! was full or closed, when the send fails, or when the peer's endpoint fails before the
//! acknowledgement came.
//!
//! Why not a flush: UCX flushes an endpoint with `UCT_FLUSH_FLAG_LOCAL`, and over TCP an
//! active message counts as flushed once it is in the local socket buffer, so a flush says
//! nothing about the target (a notify to a target that just closed would be reported done).
//!
//! Wire format (integers little-endian): notify `seq: u64, frame`; ack `seq: u64, outcome: u8`.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use blockwire_core::kit::{Delivery, Inbox, TransferCell};
use blockwire_core::{BackendError, FailureReason};
use parking_lot::{Mutex, RwLock};
use ucx_sys::*;

use crate::errors::{self, check};
use crate::peer::PeerHealth;
use crate::{UcxBackend, UcxPeer, UcxXfer};

mod handlers;
mod hello;
use handlers::{AmHandler, on_ack, on_notification};
pub(crate) use hello::check_identity;
use hello::{HELLO_AM_ID, on_hello};

/// The active-message id of a notification.
const NOTIFY_AM_ID: u32 = 11;
/// The active-message id of its acknowledgement.
const ACK_AM_ID: u32 = 12;
/// Bytes of the sequence number in front of both messages.
const SEQ_LEN: usize = 8;

/// What the target did with a notification, as its acknowledgement says; for a connect's
/// identity check (`hello`), `Queued` means "this is the worker named".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Outcome {
    Queued = 0,
    Full = 1,
    Closed = 2,
    Malformed = 3,
    /// The identity check named another worker: the descriptor is stale.
    Stale = 4,
}

impl Outcome {
    fn of(delivery: Delivery) -> Self {
        match delivery {
            Delivery::Queued => Outcome::Queued,
            Delivery::Full => Outcome::Full,
            Delivery::Closed => Outcome::Closed,
            _ => Outcome::Malformed,
        }
    }

    /// How the sender's transfer ends for this outcome byte (from the peer: any value); `what`
    /// names the message acknowledged (a notification, a connect's identity check).
    fn end(byte: u8, cell: &TransferCell, what: &str) {
        let why = match byte {
            0 => return cell.finish(),
            1 => FailureReason::Backend(format!(
                "the target's notification inbox was full: it dropped the {what}"
            )),
            2 => FailureReason::RemoteDisconnect(format!(
                "the target is closed: it discarded the {what}"
            )),
            3 => FailureReason::Backend(format!("the target could not decode the {what}")),
            4 => FailureReason::RemoteDisconnect(
                "the worker at the descriptor's address is not the one the descriptor names: \
                 the descriptor is stale (its transport closed and another worker took its \
                 address)"
                    .into(),
            ),
            other => FailureReason::Backend(format!(
                "the target acknowledged the {what} with an unknown outcome {other}"
            )),
        };
        cell.fail(why);
    }
}

/// The worker's notification state: the inbox arriving ones go to, and the notifications
/// this side sent that wait for their acknowledgement. The worker's handlers point to it, so
/// it lives as long as the worker can call back ([`crate::worker::Ucx`] holds it, and leaks
/// it with a worker it abandons).
pub(crate) struct Notifier {
    /// Replaced once by a backend opened before its transport ([`Notifier::set_inbox`]).
    inbox: RwLock<Inbox>,
    /// False once the worker is being torn down: arrivals are acknowledged as closed and not
    /// delivered.
    open: AtomicBool,
    next_seq: AtomicU64,
    /// Each with what it is, for its failure's words.
    pending: Mutex<HashMap<u64, (Arc<TransferCell>, &'static str)>>,
    /// This worker's identity, which its descriptors carry and a connect's check names.
    identity: u64,
}

impl Notifier {
    pub(crate) fn new(inbox: Inbox) -> Arc<Self> {
        Arc::new(Notifier {
            inbox: RwLock::new(inbox),
            open: AtomicBool::new(true),
            next_seq: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
            identity: blockwire_core::kit::random_u64(),
        })
    }

    /// This worker's identity (random, fixed at open).
    pub(crate) fn identity(&self) -> u64 {
        self.identity
    }

    /// The answer to a connect's identity check naming `identity`.
    fn judge(&self, identity: u64) -> Outcome {
        if !self.open.load(Ordering::Acquire) {
            Outcome::Closed
        } else if identity == self.identity {
            Outcome::Queued
        } else {
            Outcome::Stale
        }
    }

    /// Arrivals go to `inbox` from now on.
    pub(crate) fn set_inbox(&self, inbox: Inbox) {
        *self.inbox.write() = inbox;
    }

    /// Nothing more is delivered (revoke).
    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// Installs the notification and acknowledgement handlers on `worker`.
    ///
    /// # Safety
    ///
    /// `worker` is live, and `self` outlives every call the worker may make to its handlers
    /// (until the worker is destroyed, or forever if it is left undestroyed).
    pub(crate) unsafe fn register(&self, worker: ucp_worker_h) -> Result<(), BackendError> {
        let handlers: [(u32, AmHandler); 3] = [
            (NOTIFY_AM_ID, on_notification),
            (ACK_AM_ID, on_ack),
            (HELLO_AM_ID, on_hello),
        ];
        for (id, cb) in handlers {
            let param = ucp_am_handler_param_t {
                field_mask: (UCP_AM_HANDLER_PARAM_FIELD_ID
                    | UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                    | UCP_AM_HANDLER_PARAM_FIELD_CB
                    | UCP_AM_HANDLER_PARAM_FIELD_ARG) as u64,
                id,
                flags: UCP_AM_FLAG_WHOLE_MSG,
                cb: Some(cb),
                arg: self as *const Notifier as *mut c_void,
            };
            // SAFETY: a live worker (the caller's contract); UCX copies `param`; `arg` lives
            // as long as the worker calls back (the caller's contract).
            check("ucp_worker_set_am_recv_handler", unsafe {
                ucp_worker_set_am_recv_handler(worker, &param)
            })?;
        }
        Ok(())
    }

    /// Records a notification waiting for its acknowledgement; returns its sequence number.
    pub(crate) fn expect(&self, cell: &Arc<TransferCell>, what: &'static str) -> u64 {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.pending.lock().insert(seq, (cell.clone(), what));
        seq
    }

    /// Forgets a notification (its transfer was released, or never sent).
    pub(crate) fn forget(&self, seq: u64) {
        self.pending.lock().remove(&seq);
    }

    /// Hands an arriving frame to the inbox, unless the worker is being torn down.
    fn receive(&self, frame: &[u8]) -> Outcome {
        if !self.open.load(Ordering::Acquire) {
            tracing::debug!("ucx: a notification arrived while closing; refused");
            return Outcome::Closed;
        }
        Outcome::of(self.inbox.read().deliver_frame(frame))
    }

    /// Ends the notification `seq` with the outcome its target acknowledged.
    fn acknowledged(&self, seq: u64, outcome: u8) {
        let Some((cell, what)) = self.pending.lock().remove(&seq) else {
            tracing::debug!(
                seq,
                "ucx: acknowledgement of no notification waiting for one"
            );
            return;
        };
        tracing::trace!(seq, outcome, "ucx: notification acknowledged");
        Outcome::end(outcome, &cell, what);
    }
}

/// Posts `bytes` as the data of an active message on `ep`; the buffer lives until UCX is
/// done with it. A send that fails later fails `cell` (when given). `Err` if UCX refused it
/// at once (nothing was sent).
///
/// # Safety
///
/// `ep` is a live endpoint of a live worker (or the reply endpoint UCX passed to a handler
/// that is still running).
unsafe fn post_am(
    ep: ucp_ep_h,
    id: u32,
    bytes: Vec<u8>,
    flags: u32,
    cell: Option<Arc<TransferCell>>,
) -> Result<(), ucs_status_t> {
    let what = if id == HELLO_AM_ID {
        "sending the connect's identity check"
    } else {
        "notification"
    };
    let sending = Box::new(Sending { bytes, cell, what });
    let (buffer, len) = (sending.bytes.as_ptr(), sending.bytes.len());
    let user_data = Box::into_raw(sending);
    let params = ucp_request_param_t {
        op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK
            | UCP_OP_ATTR_FIELD_USER_DATA
            | UCP_OP_ATTR_FIELD_FLAGS,
        flags,
        cb: ucp_request_param_t__bindgen_ty_1 {
            send: Some(am_sent),
        },
        user_data: user_data.cast(),
        ..Default::default()
    };
    // SAFETY: `ep` per this function's contract; the buffer stays allocated (owned by
    // `user_data`) until the callback runs, or is reclaimed below when it will not.
    let request =
        unsafe { ucp_am_send_nbx(ep, id, std::ptr::null(), 0, buffer.cast(), len, &params) };
    if UCS_PTR_IS_PTR(request) {
        return Ok(());
    }
    // Completed or refused at once: the callback will not run.
    // SAFETY: reclaims the box leaked above, once.
    drop(unsafe { Box::from_raw(user_data) });
    match UCS_PTR_STATUS(request) {
        UCS_OK => Ok(()),
        status => Err(status),
    }
}

/// An active message in flight: its bytes, and the transfer its failure fails.
struct Sending {
    bytes: Vec<u8>,
    cell: Option<Arc<TransferCell>>,
    /// What the message is, for its failure's reason.
    what: &'static str,
}

unsafe extern "C" fn am_sent(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void) {
    // SAFETY: `user_data` is the box leaked in `post_am` for this send; the callback runs
    // once, so it is reclaimed once.
    let sending = unsafe { Box::from_raw(user_data as *mut Sending) };
    if status != UCS_OK {
        tracing::debug!(error = %status_string(status), "ucx: an active message failed");
        if let Some(cell) = &sending.cell {
            cell.fail(errors::reason(sending.what, status));
        }
    }
    // SAFETY: this send's request, released in its callback.
    unsafe { ucp_request_free(request) };
}

/// A notify transfer's wait for its acknowledgement.
pub(crate) struct Awaited {
    seq: u64,
    /// The peer's endpoint health: an endpoint that fails before the acknowledgement came
    /// fails the transfer (the acknowledgement will not come).
    health: Arc<PeerHealth>,
}

impl Awaited {
    /// Fails `cell` if the peer's endpoint failed while it waits.
    pub(crate) fn check(&self, cell: &TransferCell) {
        if cell.is_ended() {
            return;
        }
        let status = self.health.status.load(Ordering::Acquire);
        if status != UCS_OK {
            cell.fail(errors::reason(
                "the peer's endpoint failed before it acknowledged the notification",
                status,
            ));
        }
    }

    /// Stops waiting (the transfer is released).
    pub(crate) fn forget(&self, notifier: &Notifier) {
        notifier.forget(self.seq);
    }
}

/// Sends `frame` to `peer` as a notification (see the module docs).
pub(crate) fn send(
    backend: &UcxBackend,
    peer: &UcxPeer,
    frame: &[u8],
) -> Result<UcxXfer, BackendError> {
    let link = peer.hold()?;
    let ucx = &backend.ucx;
    ucx.usable()?;
    // Held through the send: the endpoint is the worker's.
    let worker = ucx.worker().ok_or_else(crate::revoked)?;
    let notifier = ucx.notifier();
    let shared = Arc::new(TransferCell::running().with_doorbell(backend.doorbell()));
    // Expected before it is sent: the acknowledgement may come before the send returns.
    let seq = notifier.expect(&shared, "notification");
    let mut bytes = Vec::with_capacity(SEQ_LEN + frame.len());
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(frame);
    // SAFETY: a live endpoint of a live worker: the link hold keeps `fail_peer` from closing
    // it, the worker guard keeps `revoke` from destroying it.
    let sent = unsafe {
        post_am(
            peer.ep,
            NOTIFY_AM_ID,
            bytes,
            UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
            Some(shared.clone()),
        )
    };
    if let Err(status) = sent {
        notifier.forget(seq);
        return Err(errors::error("sending the notification", status));
    }
    link.track(&shared);
    drop(worker);
    drop(link);
    ucx.kick();
    tracing::trace!(seq, len = frame.len(), "ucx: notification sent");
    Ok(UcxXfer {
        shared,
        ucx: ucx.clone(),
        ack: Some(Awaited {
            seq,
            health: peer.health_arc(),
        }),
        _live: backend.counts.transfer(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_end_the_transfer() {
        for (byte, done) in [
            (0u8, true),
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (200, false),
        ] {
            let cell = TransferCell::running();
            Outcome::end(byte, &cell, "notification");
            assert!(cell.is_ended());
            assert_eq!(
                cell.state() == blockwire_core::XferState::Done,
                done,
                "{byte}"
            );
        }
        let cell = TransferCell::running();
        Outcome::end(Outcome::of(Delivery::Closed) as u8, &cell, "notification");
        assert!(matches!(
            cell.state(),
            blockwire_core::XferState::Failed(FailureReason::RemoteDisconnect(_))
        ));
        // The words name what was acknowledged.
        let cell = TransferCell::running();
        Outcome::end(Outcome::Closed as u8, &cell, "connect's identity check");
        assert!(matches!(
            cell.state(),
            blockwire_core::XferState::Failed(FailureReason::RemoteDisconnect(why))
                if why.ends_with("discarded the connect's identity check")
        ));
    }

    #[test]
    fn acks_for_nothing_pending_are_ignored() {
        let n = Notifier::new(Inbox::new(4));
        let cell = Arc::new(TransferCell::running());
        let seq = n.expect(&cell, "notification");
        n.acknowledged(seq + 1, 0);
        assert!(!cell.is_ended());
        n.acknowledged(seq, 0);
        assert_eq!(cell.state(), blockwire_core::XferState::Done);
        n.acknowledged(seq, 1); // a second one changes nothing
        assert_eq!(cell.state(), blockwire_core::XferState::Done);
        assert_eq!(n.judge(n.identity()), Outcome::Queued);
        assert_eq!(n.judge(n.identity() ^ 1), Outcome::Stale);
        n.close();
        assert_eq!(n.receive(b"anything"), Outcome::Closed);
        assert_eq!(n.judge(n.identity()), Outcome::Closed);
    }
}
