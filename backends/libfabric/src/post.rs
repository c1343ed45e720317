//! Posting the operations of one transfer: RMA (each up to `crate::op::MAX_PARTS` runs of
//! adjacent blocks, `crate::op`) and a notification's send (`crate::notify`), in order, those
//! the provider refused for now queued for the retry thread (`crate::retry`).

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockwire_core::{BackendError, BackendErrorKind, FailureReason};
use libfabric_sys::*;

use crate::completion::{OpContext, Transfer};
use crate::errors::{self, EAGAIN};
use crate::fabric::Fabric;
use crate::link::{Link, Route};
use crate::op::MAX_PARTS;
pub(crate) use crate::op::{RmaOp, Verb};

/// Posts `op` to the peer along `route` as part of `transfer`. Returns libfabric's result: 0 when posted (the
/// transfer then counts it pending until its completion).
///
/// # Safety
///
/// `route.ep` is a live endpoint whose address vector holds `route.addr`; `desc` is the local
/// registration's descriptor; each of `op`'s parts lies in the registered region, which stays
/// valid until the transfer is released, and its remote range inside the peer's registered
/// region. A send needs no local descriptor (the backend carries notifications
/// only where the provider does not require `FI_MR_LOCAL`).
pub(crate) unsafe fn post_one(
    route: &Route<'_>,
    desc: *mut c_void,
    op: &RmaOp,
    transfer: &Arc<Transfer>,
) -> isize {
    let (ep, addr) = (route.ep, route.addr);
    let context = OpContext::new(transfer.clone(), route.outstanding);
    transfer.op_posting();
    let delivery = (FI_DELIVERY_COMPLETE | FI_COMPLETION) as u64;
    let ret = if op.op == Verb::Send {
        let payload = transfer.payload();
        let iov = iovec {
            iov_base: payload.as_ptr().cast_mut().cast(),
            iov_len: payload.len(),
        };
        let mut desc = [std::ptr::null_mut::<c_void>()];
        let msg = fi_msg {
            msg_iov: &iov,
            desc: desc.as_mut_ptr(),
            iov_count: 1,
            addr,
            context: context.cast::<c_void>(),
            data: 0,
        };
        // SAFETY: per this function's contract; the payload is owned by the transfer, which
        // the context keeps alive until the provider completed the send (or its endpoint
        // closed); the provider only reads it. `msg` lives through the call.
        unsafe { fi_sendmsg(ep, &msg, delivery) }
    } else {
        let (iov, rma, count) = op.lists();
        let mut desc = [desc; MAX_PARTS];
        let msg = fi_msg_rma {
            msg_iov: iov.as_ptr(),
            desc: desc.as_mut_ptr(),
            iov_count: count,
            addr,
            rma_iov: rma.as_ptr(),
            rma_iov_count: count,
            context: context.cast::<c_void>(),
            data: 0,
        };
        // SAFETY: per this function's contract; `msg` and what it points to live through the
        // call (the provider copies them).
        unsafe {
            match op.op {
                Verb::Read => fi_readmsg(ep, &msg, FI_COMPLETION as u64),
                _ => fi_writemsg(ep, &msg, delivery),
            }
        }
    };
    if ret != 0 {
        // SAFETY: the provider did not take the context.
        unsafe { OpContext::reclaim(context) };
        transfer.op_ended();
    }
    ret
}

/// Posts `ops` of `transfer` to `link`, in order, behind what is queued for it already; what
/// the provider refuses for now is queued for the retry thread. `Err` only when the first
/// operation is refused outright (nothing was posted); a later refusal fails the transfer
/// once its earlier operations completed.
///
/// # Safety
///
/// As for [`post_one`], for every operation of `ops`.
pub(crate) unsafe fn submit(
    fabric: &Fabric,
    link: &Arc<Link>,
    transfer: &Arc<Transfer>,
    mut ops: Vec<RmaOp>,
) -> Result<(), BackendError> {
    // Its own endpoint, if it has one, is open before the hold (the opener thread opens it
    // soon after the peer is added; a post that comes first opens it, or waits for that).
    link.enable_endpoint()?;
    // Held until every operation is posted or queued: a cut waits for it.
    let held = link.hold()?;
    let route = link.route(&held, (fabric.ep, &fabric.outstanding))?;
    // Behind operations already queued for this peer, in order.
    let mut queue_from = (link.queued.load(Ordering::Acquire) > 0).then_some(0);
    // READs hold off a closing shm target in another process (`crate::guard`).
    let mut reads = link.read_guard();
    let mut closed = None;
    if queue_from.is_none() {
        for (i, rma) in ops.iter().enumerate() {
            if let Err(why) = reads.admit(rma) {
                if i == 0 {
                    drop((reads, held));
                    link.cut_closed(&why);
                    return Err(BackendError::new(
                        BackendErrorKind::RemoteDisconnect,
                        format!("the connection to this peer was cut: {why}"),
                    ));
                }
                // Earlier operations are in flight: they finish, then the transfer fails.
                transfer
                    .cell
                    .note_failure(FailureReason::RemoteDisconnect(why.clone()));
                closed = Some(why);
                break;
            }
            // SAFETY: per this function's contract; the link holds its address-vector entry.
            let ret = unsafe { post_one(&route, fabric.desc, rma, transfer) };
            reads.posted(rma);
            if ret == EAGAIN {
                queue_from = Some(i);
                break;
            }
            if ret != 0 {
                if i == 0 {
                    return Err(errors::error(&format!("posting {}", rma.op), ret));
                }
                // Earlier operations are in flight: they finish, then the transfer reports this.
                transfer.cell.note_failure(refused(rma.op, ret));
                break;
            }
        }
    }
    drop(reads);
    held.track(transfer);
    match queue_from {
        // The provider refused more for now: the retry thread posts the rest (`crate::retry`).
        Some(i) => {
            let rest = ops.split_off(i);
            tracing::trace!(queued = rest.len(), "libfabric post queued for retry");
            fabric.retries.push(link, transfer, rest);
        }
        None => transfer.all_posted(),
    }
    drop(held);
    if let Some(why) = closed {
        link.cut_closed(&why);
    }
    if queue_from.is_some() {
        fabric.retries.kick();
    }
    fabric.kick();
    Ok(())
}

/// The failure of a post libfabric refused with `ret` (not `FI_EAGAIN`).
pub(crate) fn refused(op: Verb, ret: isize) -> FailureReason {
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
