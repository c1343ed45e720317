//! Transfers and the completion of their operations: each posted operation carries a boxed
//! [`OpContext`] naming its [`Transfer`], reclaimed when its completion is read. An endpoint
//! keeps the contexts of its operations still outstanding ([`Outstanding`]), so that closing
//! it (a cut link, a peer removed) frees those the provider will now never complete.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use blockwire_core::FailureReason;
use blockwire_core::kit::{Doorbell, TransferCell};
use libfabric_sys::*;
use parking_lot::Mutex;

/// One transfer: its outcome, and its operations posted and not yet completed. It ends
/// (done, or failed with the first failure) once every operation was posted and has
/// completed, or at once when its link is cut.
pub(crate) struct Transfer {
    pub(crate) cell: TransferCell,
    pending: AtomicUsize,
    posted_all: AtomicBool,
    /// The bytes a send reads (a notification's frame): owned here, so that they stay valid
    /// while any operation's context (which holds this transfer) may still be read by the
    /// provider, even after the caller released the transfer (a cut link).
    payload: Box<[u8]>,
}

impl AsRef<TransferCell> for Transfer {
    fn as_ref(&self) -> &TransferCell {
        &self.cell
    }
}

impl Transfer {
    /// A transfer ringing `doorbell` when it ends.
    pub(crate) fn new(doorbell: &Doorbell) -> Arc<Self> {
        Self::carrying(Box::default(), doorbell)
    }

    /// A transfer whose operations send `payload` (see [`Transfer::payload`]), ringing
    /// `doorbell` when it ends.
    pub(crate) fn carrying(payload: Box<[u8]>, doorbell: &Doorbell) -> Arc<Self> {
        Arc::new(Transfer {
            cell: TransferCell::running().with_doorbell(doorbell.clone()),
            pending: AtomicUsize::new(0),
            posted_all: AtomicBool::new(false),
            payload,
        })
    }

    /// The bytes its send operations read; valid as long as this transfer is (and so until
    /// every operation's context is reclaimed).
    pub(crate) fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// An operation is about to be posted.
    pub(crate) fn op_posting(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// An operation completed, failed, or was not taken: the last one of a transfer whose
    /// operations were all posted ends it.
    pub(crate) fn op_ended(&self) {
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1
            && self.posted_all.load(Ordering::SeqCst)
        {
            self.cell.finish();
        }
    }

    /// Every operation was posted (or given up): the transfer ends with the last of them.
    pub(crate) fn all_posted(&self) {
        self.posted_all.store(true, Ordering::SeqCst);
        if self.pending.load(Ordering::SeqCst) == 0 {
            self.cell.finish();
        }
    }
}

/// The context of one posted operation: libfabric's scratch space first (`FI_CONTEXT2`), then
/// the transfer it belongs to. Boxed at post, reclaimed at its completion.
#[repr(C)]
pub(crate) struct OpContext {
    fi: fi_context2,
    pub(crate) transfer: Arc<Transfer>,
    /// The outstanding set of the endpoint it was posted through.
    outstanding: Arc<Outstanding>,
}

impl OpContext {
    /// A context for one operation of `transfer` through the endpoint owning `outstanding`,
    /// recorded there (before the post: its completion may come at once).
    pub(crate) fn new(transfer: Arc<Transfer>, outstanding: &Arc<Outstanding>) -> *mut OpContext {
        let context = Box::into_raw(Box::new(OpContext {
            fi: fi_context2::default(),
            transfer,
            outstanding: outstanding.clone(),
        }));
        outstanding.0.lock().insert(context as usize);
        context
    }

    /// Frees a context the provider did not take (its post failed).
    ///
    /// # Safety
    ///
    /// `context` came from [`OpContext::new`] and the provider does not hold it.
    pub(crate) unsafe fn reclaim(context: *mut OpContext) {
        // SAFETY: per this function's contract.
        let op = unsafe { Box::from_raw(context) };
        op.outstanding.0.lock().remove(&(context as usize));
    }
}

/// The contexts of the operations posted through one endpoint and not completed yet.
#[derive(Default)]
pub(crate) struct Outstanding(Mutex<HashSet<usize>>);

impl Outstanding {
    /// Frees every context still recorded, and ends its operation as failed.
    ///
    /// # Safety
    ///
    /// The endpoint they were posted through, and its completion queue, are closed: the
    /// provider will never complete them.
    pub(crate) unsafe fn abandon(&self) {
        let left: Vec<usize> = self.0.lock().drain().collect();
        for context in left {
            // SAFETY: recorded by `OpContext::new` and never completed, so still boxed; the
            // provider no longer holds it (this function's contract).
            let op = unsafe { Box::from_raw(context as *mut OpContext) };
            op.transfer
                .cell
                .note_failure(FailureReason::RemoteDisconnect(
                    "the endpoint closed before the operation completed".into(),
                ));
            op.transfer.op_ended();
        }
    }
}

/// Completes one operation.
///
/// # Safety
///
/// `context` is an `OpContext` boxed at post and not completed before (or null).
pub(crate) unsafe fn complete(context: *mut c_void, failure: Option<FailureReason>) {
    if context.is_null() {
        return;
    }
    // SAFETY: per this function's contract.
    let op = unsafe { Box::from_raw(context.cast::<OpContext>()) };
    op.outstanding.0.lock().remove(&(context as usize));
    if let Some(why) = failure {
        op.transfer.cell.note_failure(why);
    }
    op.transfer.op_ended();
}
