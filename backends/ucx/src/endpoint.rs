//! Closing a peer's endpoint: gracefully when the peer is disconnected, by force when the
//! stall watchdog cuts it (`UcxBackend::fail_peer`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ucx_sys::*;

use crate::{UcxPeer, errors};

/// Destroys the key, closes the endpoint (progressing until UCX is done with it, bounded),
/// then frees the error-callback state.
pub(crate) fn close_peer(peer: UcxPeer) {
    if peer.link.why_cut().is_some() {
        let closed = peer.link.write().closed;
        // SAFETY: the Arc leaked for the endpoint's error callback, reclaimed once (the
        // endpoint's owner is gone).
        let health = unsafe { Arc::from_raw(peer.health) };
        if !closed {
            // The endpoint may still call back: its state lives as long as the worker.
            peer.ucx.keep(Box::new(health));
        }
        return;
    }
    let Some(worker) = peer.ucx.worker() else {
        // The worker was revoked: it destroyed the endpoint and key, and no callback runs.
        // SAFETY: as above, the error callback can no longer run.
        drop(unsafe { Arc::from_raw(peer.health) });
        return;
    };
    // SAFETY: the key and endpoint are live (the worker guard) and released once; no transfer
    // to this peer is held (the generic layer disconnects only after every transfer is
    // released).
    unsafe {
        if !peer.rkey.is_null() {
            ucp_rkey_destroy(peer.rkey);
        }
        // A healthy endpoint closes gracefully (UCX 1.13 asserts when a forced close races
        // the endpoint's own wireup); a failed one is closed by force.
        let failed = (*peer.health).status.load(Ordering::Acquire) != UCS_OK;
        let params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
            flags: if failed { UCP_EP_CLOSE_FLAG_FORCE } else { 0 },
            ..Default::default()
        };
        let request = ucp_ep_close_nbx(peer.ep, &params);
        let mut closed = !UCS_PTR_IS_PTR(request);
        if !closed {
            let deadline = Instant::now() + Duration::from_secs(2);
            while ucp_request_check_status(request) == UCS_INPROGRESS && Instant::now() < deadline {
                worker.progress();
            }
            closed = ucp_request_check_status(request) != UCS_INPROGRESS;
            ucp_request_free(request);
        }
        let health = Arc::from_raw(peer.health);
        if !closed {
            tracing::warn!(
                "ucx endpoint close did not finish; its error state is kept with the worker"
            );
            peer.ucx.keep(Box::new(health));
        }
    }
}

/// Fails every transfer posted to `peer` that is still running (its operations will not be
/// completed by UCX).
pub(crate) fn fail_posted(peer: &UcxPeer) {
    peer.link
        .fail_posted(errors::reason("transfer", UCS_ERR_CANCELED));
}

/// What a forced close did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForceClose {
    /// The endpoint is closed (or died with a revoked worker).
    Closed,
    /// Still closing at the deadline.
    TimedOut,
    /// UCX refused (an endpoint without peer error handling): it stays open.
    Refused(ucs_status_t),
}

/// Destroys the peer's key and closes its endpoint by force, progressing until UCX is done
/// with it (bounded).
///
/// # Safety
///
/// The key and endpoint are live unless the worker was revoked, no post uses them, and
/// neither is used again.
pub(crate) unsafe fn force_close(peer: &UcxPeer) -> ForceClose {
    let Some(worker) = peer.ucx.worker() else {
        return ForceClose::Closed;
    };
    // SAFETY: per this function's contract; the worker guard keeps them live.
    unsafe {
        if !peer.rkey.is_null() {
            ucp_rkey_destroy(peer.rkey);
        }
        let params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
            flags: UCP_EP_CLOSE_FLAG_FORCE,
            ..Default::default()
        };
        let request = ucp_ep_close_nbx(peer.ep, &params);
        if UCS_PTR_IS_ERR(request) {
            return ForceClose::Refused(UCS_PTR_STATUS(request));
        }
        if !UCS_PTR_IS_PTR(request) {
            return ForceClose::Closed;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while ucp_request_check_status(request) == UCS_INPROGRESS && Instant::now() < deadline {
            worker.progress();
        }
        let closed = ucp_request_check_status(request) != UCS_INPROGRESS;
        ucp_request_free(request);
        if closed {
            ForceClose::Closed
        } else {
            ForceClose::TimedOut
        }
    }
}
