//! Posting a transfer: one put or get per run of adjacent blocks, then one flush of the
//! endpoint whose callback ends the transfer.

use std::ffi::c_void;
use std::sync::Arc;

use blockwire_core::kit::{self, TransferCell};
use blockwire_core::{BackendError, BlockIndex, Op};
use ucx_sys::*;

use crate::{UcxBackend, UcxPeer, UcxXfer, errors, revoked};

impl UcxBackend {
    /// `Backend::post`.
    pub(crate) fn post_runs(
        &self,
        peer: &UcxPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<UcxXfer, BackendError> {
        let link = peer.hold()?;
        self.ucx.usable()?;
        // Held through the flush: the endpoint and key are the worker's.
        let worker = self.ucx.worker().ok_or_else(revoked)?;
        // Every index is checked before the first operation is posted. Blocks adjacent on
        // both sides are one operation (bounded: UCX sets no practical limit of its own).
        let runs = kit::checked_runs(
            &self.span,
            local,
            remote,
            peer.num_blocks,
            kit::DEFAULT_MAX_RUN_BYTES,
        )?;
        let shared = Arc::new(TransferCell::running().with_doorbell(self.doorbell()));
        let plain = ucp_request_param_t::default();
        for (i, run) in runs.enumerate() {
            // SAFETY: `run.local` is inside the region (checked by `checked_runs`).
            let local_ptr = unsafe { self.span.base().as_ptr().add(run.local) };
            let remote_addr = peer.base + run.remote;
            // SAFETY: the local run is valid for `run.len` bytes until the backend is
            // dropped, which happens only after this transfer is released (every block of it
            // checked inside the region); the remote range lies inside the peer's registered
            // region (every index checked, size checked when the descriptor was validated);
            // the endpoint and key are live.
            let request = unsafe {
                match op {
                    Op::Write => ucp_put_nbx(
                        peer.ep,
                        local_ptr.cast(),
                        run.len,
                        remote_addr,
                        peer.rkey,
                        &plain,
                    ),
                    Op::Read => ucp_get_nbx(
                        peer.ep,
                        local_ptr.cast(),
                        run.len,
                        remote_addr,
                        peer.rkey,
                        &plain,
                    ),
                }
            };
            if UCS_PTR_IS_ERR(request) {
                let status = UCS_PTR_STATUS(request);
                if i == 0 {
                    return Err(errors::error(&format!("posting {op}"), status));
                }
                // Earlier blocks are in flight: flush them, then report the failure.
                shared.note_failure(errors::reason("transfer", status));
                break;
            }
            if UCS_PTR_IS_PTR(request) {
                // The flush below covers its completion; no callback is needed.
                // SAFETY: a request handle returned by the call above, released once.
                unsafe { ucp_request_free(request) };
            }
        }
        let user_data = Arc::into_raw(shared.clone());
        let params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            cb: ucp_request_param_t__bindgen_ty_1 {
                send: Some(flush_done),
            },
            user_data: user_data as *mut c_void,
            ..Default::default()
        };
        // SAFETY: a live endpoint; the callback reclaims `user_data` exactly once.
        let request = unsafe { ucp_ep_flush_nbx(peer.ep, &params) };
        if !UCS_PTR_IS_PTR(request) {
            // Completed (or failed) at once: the callback will not run.
            // SAFETY: reclaims the Arc leaked for the callback that will not run.
            drop(unsafe { Arc::from_raw(user_data) });
            complete(&shared, UCS_PTR_STATUS(request));
        }
        link.track(&shared);
        drop(worker);
        drop(link);
        self.ucx.kick();
        Ok(UcxXfer {
            shared,
            ucx: self.ucx.clone(),
            ack: None,
            _live: self.counts.transfer(),
        })
    }
}

/// Ends a transfer with the status of its flush (an error a put or get returned when posted
/// was noted on the cell first, and wins).
fn complete(cell: &TransferCell, status: ucs_status_t) {
    if status != UCS_OK {
        cell.note_failure(errors::reason("transfer", status));
    }
    cell.finish();
}

unsafe extern "C" fn flush_done(
    request: *mut c_void,
    status: ucs_status_t,
    user_data: *mut c_void,
) {
    // SAFETY: `user_data` is the `Arc<TransferCell>` leaked for this flush in `post`; the
    // callback runs once, so it is reclaimed once.
    let shared = unsafe { Arc::from_raw(user_data as *const TransferCell) };
    complete(&shared, status);
    // SAFETY: `request` is this flush's request; UCX allows releasing it in its callback.
    unsafe { ucp_request_free(request) };
}
