//! The connect's identity check: before a peer's first put, its worker proves it is the one
//! the descriptor names.
//!
//! Why: over TCP (and over shared memory on memory UCX did not allocate) UCX 1.13 emulates a
//! put with an active message that the target's worker serves by copying to the address the
//! message names, whatever registration it was packed for, and an endpoint connects to
//! whichever worker listens at the address. So a descriptor of a transport that closed, whose
//! TCP port another worker took (a new transport in this process or a restarted one), had its
//! WRITEs copied by that worker to the closed region's address, reported done.
//!
//! How: each worker has a random identity ([`super::Notifier::identity`]), which its descriptors
//! carry. Connect sends it in an active message (id [`HELLO_AM_ID`], `seq: u64, identity: u64`,
//! eager, with a reply endpoint); the target's handler ([`on_hello`]) compares it with its own
//! and answers with an acknowledgement (the notifications' [`super::ACK_AM_ID`]):
//! [`Outcome::Queued`] when it is the same, [`Outcome::Stale`] when not, [`Outcome::Closed`]
//! while it closes.
//! Connect returns the peer only after the answer "same"; otherwise it closes the endpoint and
//! fails, having put nothing.
//!
//! A target whose backend progresses only when its caller polls (`progress=caller`) would not
//! answer while its caller waits elsewhere (a single thread adding the peer and then polling
//! both would wait forever), so its descriptors say it does not answer
//! ([`crate::address::UcxAddress::answers`]) and connect skips the check for it: the stale
//! hazard remains for such targets (see `SECURITY.md`).

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use blockwire_core::kit::TransferCell;
use blockwire_core::{BackendError, BackendErrorKind, FailureReason, XferState};
use ucx_sys::*;

use super::handlers::{answer, received};
use super::{Outcome, SEQ_LEN, post_am};
use crate::worker::Ucx;
use crate::{UcxPeer, errors, revoked};

/// The active-message id of a connect's identity check.
pub(super) const HELLO_AM_ID: u32 = 13;
/// Bytes of a check: the sequence number and the identity.
const HELLO_LEN: usize = SEQ_LEN + 8;
/// How long connect waits for the target's answer: far above a round trip and an endpoint's
/// wireup, so only a worker that does not progress (or a lost link that reports no error)
/// reaches it.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks that the worker at the far end of `peer`'s endpoint has `identity` (see the module
/// docs); `Ok` once it answered so. Waits for the answer, progressing the worker meanwhile;
/// gives up once the connect is cancelled (`cancels`: [`Ucx::connects_cancelled`] when it
/// started) or the transport closes.
pub(crate) fn check_identity(
    ucx: &Ucx,
    peer: &UcxPeer,
    identity: u64,
    cancels: u64,
) -> Result<(), BackendError> {
    let notifier = ucx.notifier();
    let cell = Arc::new(TransferCell::running());
    // Expected before it is sent: the answer may come before the send returns.
    let seq = notifier.expect(&cell, "connect's identity check");
    let mut bytes = Vec::with_capacity(HELLO_LEN);
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(&identity.to_le_bytes());
    let sent = match ucx.worker() {
        None => Err(revoked()),
        // SAFETY: a live endpoint of a live worker: the peer is not yet anybody's, so nothing
        // closes its endpoint, and the worker guard keeps `revoke` from destroying it.
        Some(_worker) => unsafe {
            post_am(
                peer.ep,
                HELLO_AM_ID,
                bytes,
                UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
                Some(cell.clone()),
            )
        }
        .map_err(|status| errors::error("sending the connect's identity check", status)),
    };
    let answered = sent.and_then(|()| {
        ucx.kick();
        wait(ucx, peer, &cell, cancels)
    });
    notifier.forget(seq);
    answered
}

/// Waits for `cell` (the check's answer) to end, the endpoint to fail, the transport to
/// close ([`Ucx::stop_connecting`]), the connect to be cancelled ([`Ucx::cancel_connect`]) or
/// [`CHECK_TIMEOUT`].
fn wait(ucx: &Ucx, peer: &UcxPeer, cell: &TransferCell, cancels: u64) -> Result<(), BackendError> {
    let started = Instant::now();
    let mut nap = Duration::from_micros(10);
    while !cell.is_ended() {
        ucx.usable()?;
        if ucx.connecting_stopped() {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                "the transport closed while its connect waited for the peer's answer to the \
                 identity check",
            ));
        }
        if ucx.connects_cancelled() != cancels {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                "the registration was superseded (its peer removed or added again) while its \
                 connect waited for the peer's answer to the identity check",
            ));
        }
        // SAFETY: `health` lives as long as the peer.
        let status = unsafe { &*peer.health }.status.load(Ordering::Acquire);
        if status != UCS_OK {
            return Err(errors::error(
                "the peer's endpoint failed before it answered the connect's identity check",
                status,
            ));
        }
        if started.elapsed() > CHECK_TIMEOUT {
            return Err(BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!(
                    "the worker at the descriptor's address did not answer the connect's \
                     identity check in {CHECK_TIMEOUT:?}"
                ),
            ));
        }
        // Progressed here too where a progress thread runs: the endpoint's wireup and the
        // answer each wait for this worker, and an idle progress thread sleeps.
        if ucx.worker().ok_or_else(revoked)?.progress() == 0 {
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_micros(100));
        }
    }
    match cell.state() {
        XferState::Done => Ok(()),
        // The reason names the check (`Notifier::expect`'s words).
        XferState::Failed(FailureReason::RemoteDisconnect(why)) => {
            Err(BackendError::new(BackendErrorKind::RemoteDisconnect, why))
        }
        other => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("the connect's identity check ended {other:?}"),
        )),
    }
}

/// A connect's identity check arrived: answer whether it names this worker.
pub(super) unsafe extern "C" fn on_hello(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: UCX calls the handler with its arguments as `received` requires.
    let (notifier, message) =
        match unsafe { received(arg, data, length, param, "an identity check") } {
            Ok(r) => r,
            Err(status) => return status,
        };
    let Some((seq, identity)) = message.and_then(|(seq, rest)| {
        let identity: [u8; 8] = rest.try_into().ok()?;
        Some((seq, u64::from_le_bytes(identity)))
    }) else {
        tracing::warn!(length, "ucx: a malformed identity check; dropped");
        return UCS_OK;
    };
    let outcome = notifier.judge(identity);
    if outcome == Outcome::Stale {
        tracing::warn!(
            "ucx: a peer connected with a descriptor of another worker (a stale descriptor \
             at this worker's address); refused"
        );
    }
    // SAFETY: UCX's parameters of this running handler.
    unsafe { answer(param, seq, outcome, "an identity check") };
    UCS_OK
}
