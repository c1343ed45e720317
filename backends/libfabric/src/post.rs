//! Posting RMA operations, and the queue of those the provider refused for now.
//!
//! A provider says `FI_EAGAIN` when its transmit queue is full, or (`ofi_rxm`) while the
//! connection to the peer is not up, which for a peer that went away lasts until something
//! cuts it. A caller's post never waits for that: the operations the provider refused stay in
//! [`Retries`], in order, and the progress thread posts them as completions free the queue.
//! A transfer whose operations stay refused for [`POST_RETRY`] fails as a remote disconnect
//! (its operations already posted still complete first); one whose link is cut fails with it.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use blockwire_core::{BackendError, BackendErrorKind, FailureReason, Op};
use libfabric_sys::*;
use parking_lot::Mutex;

use crate::errors::{self, EAGAIN};
use crate::fabric::{OpContext, Transfer};
use crate::link::Link;

/// How long the progress thread retries a transfer's refused operations before it fails the
/// transfer: a peer that accepts no operation for this long (`tcp;ofi_rxm` refuses those to a
/// peer whose connection is gone) is treated as disconnected.
pub(crate) const POST_RETRY: Duration = Duration::from_secs(3);

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

/// Posts `op` to the peer at `addr` through `ep` as part of `transfer`. Returns libfabric's
/// result: 0 when posted (the transfer then counts it pending until its completion).
///
/// # Safety
///
/// `ep` is a live endpoint whose address vector holds `addr`; `desc` is the local
/// registration's descriptor; `op.local` lies in the registered region for `op.len` bytes,
/// which stays valid until the transfer is released; the remote range lies inside the peer's
/// registered region.
pub(crate) unsafe fn post_one(
    ep: *mut fid_ep,
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
    let context = OpContext::new(transfer.clone());
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
    transfer.pending.fetch_add(1, Ordering::AcqRel);
    // SAFETY: per this function's contract; `msg` and what it points to live through the call
    // (the provider copies them).
    let ret = unsafe {
        match op.op {
            Op::Write => fi_writemsg(ep, &msg, (FI_DELIVERY_COMPLETE | FI_COMPLETION) as u64),
            Op::Read => fi_readmsg(ep, &msg, FI_COMPLETION as u64),
        }
    };
    if ret != 0 {
        transfer.pending.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: the provider did not take the context; reclaim it.
        drop(unsafe { Box::from_raw(context) });
    }
    ret
}

/// The failure of a post libfabric refused with `ret` (not `FI_EAGAIN`).
pub(crate) fn refused(op: Op, ret: isize) -> FailureReason {
    let e = errors::error(&format!("posting {op}"), ret);
    as_reason(&e)
}

fn as_reason(e: &BackendError) -> FailureReason {
    match e.kind() {
        BackendErrorKind::RemoteDisconnect => {
            FailureReason::RemoteDisconnect(e.message().to_owned())
        }
        _ => FailureReason::Backend(e.message().to_owned()),
    }
}

/// A transfer's operations the provider has not taken yet.
struct Queued {
    /// Weak: the queue must not keep a link (and through its endpoint the fabric, whose
    /// progress thread runs this queue) alive; a transfer still queued keeps its peer alive.
    link: Weak<Link>,
    transfer: Arc<Transfer>,
    ops: VecDeque<RmaOp>,
    since: Instant,
}

/// The operations refused for now, in posting order (see the module docs).
#[derive(Default)]
pub(crate) struct Retries {
    queue: Mutex<VecDeque<Queued>>,
    /// Queued transfers, per link, for [`Retries::has`] (read without the lock).
    len: AtomicUsize,
}

impl Retries {
    /// Queues `ops` of `transfer` to `link`, behind what is queued already.
    pub(crate) fn push(&self, link: &Arc<Link>, transfer: &Arc<Transfer>, ops: Vec<RmaOp>) {
        link.queued.fetch_add(1, Ordering::AcqRel);
        self.len.fetch_add(1, Ordering::AcqRel);
        self.queue.lock().push_back(Queued {
            link: Arc::downgrade(link),
            transfer: transfer.clone(),
            ops: ops.into(),
            since: Instant::now(),
        });
    }

    /// Whether anything is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Posts what the provider takes now: per link in order, a link's later operations wait
    /// behind one refused. Returns how many operations it posted or gave up on.
    pub(crate) fn run(&self, main_ep: *mut fid_ep, desc: *mut c_void) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut queue = self.queue.lock();
        let mut blocked: Vec<*const Link> = Vec::new();
        let mut handled = 0;
        let mut finished = Vec::new();
        for (i, q) in queue.iter_mut().enumerate() {
            let key = q.link.as_ptr();
            if blocked.contains(&key) {
                continue;
            }
            let outcome = match q.link.upgrade() {
                None => Some(FailureReason::RemoteDisconnect(
                    "the peer was disconnected before its operations were posted".into(),
                )),
                // SAFETY: the link's endpoint, or the backend's, is live while the link holds
                // it; `q.ops` were built by `post` for this transfer (see `post_one`).
                Some(link) => unsafe { Self::post_queued(&link, q, main_ep, desc, &mut handled) },
            };
            match outcome {
                Some(why) => {
                    handled += q.ops.len();
                    q.ops.clear();
                    q.transfer.fail(why);
                }
                None if q.ops.is_empty() => {}
                None => {
                    blocked.push(key);
                    continue;
                }
            }
            finished.push(i);
        }
        for i in finished.into_iter().rev() {
            if let Some(q) = queue.remove(i) {
                if let Some(link) = q.link.upgrade() {
                    link.queued.fetch_sub(1, Ordering::AcqRel);
                }
                self.len.fetch_sub(1, Ordering::AcqRel);
                // Last: once every operation is accounted for, the transfer may be released.
                q.transfer.posted_all.store(true, Ordering::Release);
            }
        }
        handled
    }

    /// Posts `q`'s operations until the provider refuses one. `Some(why)` when the transfer
    /// must give up the rest.
    ///
    /// # Safety
    ///
    /// As for [`post_one`].
    unsafe fn post_queued(
        link: &Arc<Link>,
        q: &mut Queued,
        main_ep: *mut fid_ep,
        desc: *mut c_void,
        handled: &mut usize,
    ) -> Option<FailureReason> {
        let held = match link.hold() {
            Ok(held) => held,
            Err(e) => return Some(as_reason(&e)),
        };
        let ep = held.ep_or(main_ep);
        while let Some(op) = q.ops.front() {
            // SAFETY: per this function's contract.
            let ret = unsafe { post_one(ep, link.addr, desc, op, &q.transfer) };
            if ret == EAGAIN {
                if q.since.elapsed() > POST_RETRY {
                    return Some(FailureReason::RemoteDisconnect(format!(
                        "posting {}: the provider refused it for {POST_RETRY:?} (FI_EAGAIN): the \
                         peer accepts no operations",
                        op.op
                    )));
                }
                return None;
            }
            let op = q.ops.pop_front()?;
            *handled += 1;
            if ret != 0 {
                return Some(refused(op.op, ret));
            }
        }
        None
    }
}
