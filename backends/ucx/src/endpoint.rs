//! Letting a peer's endpoint go: kept for reuse when the peer is disconnected healthy
//! (`crate::idle`), closed by force when it failed or the stall watchdog cuts it
//! (`UcxBackend::fail_peer`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ucx_sys::*;

use crate::idle::IdleEndpoint;
use crate::peer::PeerHealth;
use crate::worker::{Ucx, Worker};
use crate::{UcxPeer, errors};

/// Destroys the key and lets the endpoint go: a healthy one is kept open for the next
/// connection to the same worker (see `crate::idle`), a failed one is closed by force.
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
    }
    // SAFETY: `health` lives as long as the peer.
    let failed = unsafe { &*peer.health }.status.load(Ordering::Acquire) != UCS_OK;
    if failed {
        // SAFETY: a live endpoint of this worker, released once with its state.
        unsafe { close_endpoint(&peer.ucx, &worker, peer.ep, peer.health, true) };
        return;
    }
    // Kept while the worker guard is held: a teardown waiting for it finds it there.
    let evicted = peer.ucx.idle.put(IdleEndpoint {
        worker_address: peer.worker_address,
        ep: peer.ep,
        health: peer.health,
    });
    if let Some(e) = evicted {
        // Closed gracefully while healthy: UCX 1.13 asserts when a forced close races an
        // endpoint's wireup, and a forced close would reset the peer's own registration of
        // this transport.
        let failed = !e.healthy();
        // SAFETY: a live endpoint of this worker that no peer uses, released once with its
        // state.
        unsafe { close_endpoint(&peer.ucx, &worker, e.ep, e.health, failed) };
    }
}

/// Closes an endpoint (by force when `force`: one that failed), progressing the worker until
/// UCX is done with it (bounded), then frees its error-callback state, or keeps that with the
/// worker when the close did not finish.
///
/// # Safety
///
/// `ep` is a live endpoint of `worker`, not used again; `health` is the `Arc` leaked for its
/// error callback, released here once.
pub(crate) unsafe fn close_endpoint(
    ucx: &Ucx,
    worker: &Worker<'_>,
    ep: ucp_ep_h,
    health: *const PeerHealth,
    force: bool,
) {
    if ucx.is_halted() {
        // Never progressed again: a close would not finish. The state stays with the worker.
        // SAFETY: the Arc leaked for the endpoint's error callback, reclaimed once.
        ucx.keep(Box::new(unsafe { Arc::from_raw(health) }));
        return;
    }
    let params = ucp_request_param_t {
        op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
        flags: if force { UCP_EP_CLOSE_FLAG_FORCE } else { 0 },
        ..Default::default()
    };
    // SAFETY: per this function's contract; the request is checked and freed once.
    unsafe {
        let request = ucp_ep_close_nbx(ep, &params);
        let mut closed = !UCS_PTR_IS_PTR(request);
        if !closed {
            let deadline = Instant::now() + Duration::from_secs(2);
            while ucp_request_check_status(request) == UCS_INPROGRESS && Instant::now() < deadline {
                worker.progress();
            }
            closed = ucp_request_check_status(request) != UCS_INPROGRESS;
            ucp_request_free(request);
        }
        let health = Arc::from_raw(health);
        if !closed {
            tracing::warn!(
                "ucx endpoint close did not finish; its error state is kept with the worker"
            );
            ucx.keep(Box::new(health));
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
    if peer.ucx.is_halted() {
        // Never progressed again: a close would not finish.
        return ForceClose::TimedOut;
    }
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
