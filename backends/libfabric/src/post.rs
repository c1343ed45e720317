//! Posting one RMA operation (the queue of those the provider refused for now is
//! `crate::retry`).

use std::ffi::c_void;
use std::sync::Arc;

use blockwire_core::{BackendError, BackendErrorKind, FailureReason, Op};
use libfabric_sys::*;

use crate::completion::{OpContext, Outstanding, Transfer};
use crate::errors;

/// One RMA operation of a transfer: one block.
#[derive(Clone, Copy)]
pub(crate) struct RmaOp {
    pub(crate) op: Op,
    /// The local block.
    pub(crate) local: *mut u8,
    pub(crate) len: usize,
    /// The remote block, as the provider addresses it (virtual address or offset).
    pub(crate) remote: u64,
    pub(crate) key: u64,
}

// SAFETY: `local` is an address in the backend's registered region, valid until the backend
// is dropped, which happens only after every transfer (and so every queued operation) is
// released; the op is only data.
unsafe impl Send for RmaOp {}

/// Posts `op` to the peer at `addr` through `ep` (whose outstanding operations are
/// `outstanding`) as part of `transfer`. Returns libfabric's result: 0 when posted (the
/// transfer then counts it pending until its completion).
///
/// # Safety
///
/// `ep` is a live endpoint whose address vector holds `addr`; `desc` is the local
/// registration's descriptor; `op.local` lies in the registered region for `op.len` bytes,
/// which stays valid until the transfer is released; the remote range lies inside the peer's
/// registered region.
pub(crate) unsafe fn post_one(
    (ep, outstanding): (*mut fid_ep, &Arc<Outstanding>),
    addr: fi_addr_t,
    desc: *mut c_void,
    op: &RmaOp,
    transfer: &Arc<Transfer>,
) -> isize {
    let iov = iovec {
        iov_base: op.local.cast(),
        iov_len: op.len,
    };
    let mut desc = [desc];
    let rma = fi_rma_iov {
        addr: op.remote,
        len: op.len,
        key: op.key,
    };
    let context = OpContext::new(transfer.clone(), outstanding);
    let msg = fi_msg_rma {
        msg_iov: &iov,
        desc: desc.as_mut_ptr(),
        iov_count: 1,
        addr,
        rma_iov: &rma,
        rma_iov_count: 1,
        context: context.cast::<c_void>(),
        data: 0,
    };
    transfer.op_posting();
    // SAFETY: per this function's contract; `msg` and what it points to live through the call
    // (the provider copies them).
    let ret = unsafe {
        match op.op {
            Op::Write => fi_writemsg(ep, &msg, (FI_DELIVERY_COMPLETE | FI_COMPLETION) as u64),
            Op::Read => fi_readmsg(ep, &msg, FI_COMPLETION as u64),
        }
    };
    if ret != 0 {
        // SAFETY: the provider did not take the context.
        unsafe { OpContext::reclaim(context) };
        transfer.op_ended();
    }
    ret
}

/// The failure of a post libfabric refused with `ret` (not `FI_EAGAIN`).
pub(crate) fn refused(op: Op, ret: isize) -> FailureReason {
    let e = errors::error(&format!("posting {op}"), ret);
    as_reason(&e)
}

pub(crate) fn as_reason(e: &BackendError) -> FailureReason {
    match e.kind() {
        BackendErrorKind::RemoteDisconnect => {
            FailureReason::RemoteDisconnect(e.message().to_owned())
        }
        _ => FailureReason::Backend(e.message().to_owned()),
    }
}
