//! The worker's active-message handlers: a notification arrives (deliver it, acknowledge it),
//! an acknowledgement arrives (end the notification it names), and, in `super::hello`, a
//! connect's identity check arrives (answer it). All run inside
//! `ucp_worker_progress`, on whichever thread progresses the worker (the progress thread, a
//! state check, `poll_notifications`, a close's drain), possibly under the worker's exclusive
//! guard during teardown: they take none of the backend's locks, only the inbox's and the
//! pending map's, and never call `Ucx::worker`. The bytes come from a peer: every length is
//! checked, nothing panics.

use std::ffi::c_void;

use ucx_sys::*;

use super::{ACK_AM_ID, Notifier, Outcome, SEQ_LEN, post_am};

pub(super) type AmHandler = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    *mut c_void,
    usize,
    *const ucp_am_recv_param_t,
) -> ucs_status_t;

/// The receive attributes UCX passed (none when it passed no parameters).
///
/// # Safety
///
/// `param` is null or valid for the handler's duration.
pub(super) unsafe fn recv_attr(param: *const ucp_am_recv_param_t) -> u64 {
    // SAFETY: per this function's contract.
    unsafe { param.as_ref() }.map_or(0, |p| p.recv_attr)
}

/// The reply endpoint UCX passed, or null.
///
/// # Safety
///
/// `param` is null or valid for the handler's duration.
pub(super) unsafe fn reply_ep(param: *const ucp_am_recv_param_t) -> ucp_ep_h {
    // SAFETY: per this function's contract.
    unsafe { param.as_ref() }
        .filter(|p| p.recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP as u64 != 0)
        .map_or(std::ptr::null_mut(), |p| p.reply_ep)
}

/// The message's data, split into its sequence number and the rest.
///
/// # Safety
///
/// `data` is null or valid for `length` bytes for the handler's duration.
unsafe fn split<'a>(data: *const c_void, length: usize) -> Option<(u64, &'a [u8])> {
    if data.is_null() || length < SEQ_LEN {
        return None;
    }
    // SAFETY: per this function's contract, non-null.
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, length) };
    let (seq, rest) = bytes.split_at(SEQ_LEN);
    Some((u64::from_le_bytes(seq.try_into().ok()?), rest))
}

/// A message's sequence number and the rest of its bytes.
pub(super) type Message<'a> = (u64, &'a [u8]);

/// The start of every handler: the notifier, and the message split into its sequence number
/// and the rest (`None` when too short). `Err` (to return to UCX) for a message that came by
/// rendezvous: this backend's senders send eagerly, so such a message is refused (the sender's
/// send fails). `what` names the message in the log.
///
/// # Safety
///
/// The handler's arguments as UCX passed them: `arg` is the `Notifier` registered with this
/// worker (alive while it calls back, `Notifier::register`), `data` is null or valid for
/// `length` bytes and `param` null or valid, for the handler's duration.
pub(super) unsafe fn received<'a>(
    arg: *mut c_void,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
    what: &str,
) -> Result<(&'a Notifier, Option<Message<'a>>), ucs_status_t> {
    // SAFETY: per this function's contract.
    let notifier = unsafe { &*(arg as *const Notifier) };
    // SAFETY: per this function's contract.
    if unsafe { recv_attr(param) } & UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0 {
        tracing::warn!(length, "ucx: {what} came by rendezvous; refused");
        return Err(UCS_ERR_UNSUPPORTED);
    }
    // SAFETY: per this function's contract.
    Ok((notifier, unsafe { split(data, length) }))
}

/// Answers message `seq` with `outcome` (an acknowledgement, [`ACK_AM_ID`]) on the reply
/// endpoint UCX passed, if it passed one. `what` names the message in the log.
///
/// # Safety
///
/// `param` is null or the parameters UCX passed to the handler still running.
pub(super) unsafe fn answer(
    param: *const ucp_am_recv_param_t,
    seq: u64,
    outcome: Outcome,
    what: &str,
) {
    // SAFETY: per this function's contract.
    let ep = unsafe { reply_ep(param) };
    if ep.is_null() {
        tracing::debug!(seq, "ucx: {what} without a reply endpoint; not answered");
        return;
    }
    let mut ack = Vec::with_capacity(SEQ_LEN + 1);
    ack.extend_from_slice(&seq.to_le_bytes());
    ack.push(outcome as u8);
    // SAFETY: the reply endpoint UCX passed to this running handler (UCX hands only valid,
    // open endpoints).
    if let Err(status) = unsafe { post_am(ep, ACK_AM_ID, ack, UCP_AM_SEND_FLAG_EAGER, None) } {
        tracing::debug!(seq, error = %status_string(status), "ucx: answering {what} failed");
    }
}

/// A notification arrived: deliver it and acknowledge it.
pub(super) unsafe extern "C" fn on_notification(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: UCX calls the handler with its arguments as `received` requires.
    let (notifier, message) = match unsafe { received(arg, data, length, param, "a notification") }
    {
        Ok(r) => r,
        Err(status) => return status,
    };
    let Some((seq, frame)) = message else {
        tracing::warn!(
            length,
            "ucx: a notification too short to hold its sequence number; dropped"
        );
        return UCS_OK;
    };
    let outcome = notifier.receive(frame);
    // SAFETY: UCX's parameters of this running handler.
    unsafe { answer(param, seq, outcome, "a notification") };
    UCS_OK
}

/// A notification this side sent was acknowledged: end it.
pub(super) unsafe extern "C" fn on_ack(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: UCX calls the handler with its arguments as `received` requires.
    match unsafe { received(arg, data, length, param, "an acknowledgement") } {
        Err(status) => return status,
        Ok((notifier, Some((seq, &[outcome])))) => notifier.acknowledged(seq, outcome),
        Ok(_) => tracing::warn!(length, "ucx: a malformed acknowledgement; dropped"),
    }
    UCS_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_checks_lengths() {
        let bytes = [1u8, 0, 0, 0, 0, 0, 0, 0, 9];
        // SAFETY: a live array of that length.
        let whole = unsafe { split(bytes.as_ptr().cast(), 9) };
        assert_eq!(whole, Some((1, &[9u8][..])));
        // SAFETY: as above, shorter.
        assert_eq!(unsafe { split(bytes.as_ptr().cast(), 7) }, None);
        // SAFETY: null is allowed.
        assert_eq!(unsafe { split(std::ptr::null(), 9) }, None);
    }
}
