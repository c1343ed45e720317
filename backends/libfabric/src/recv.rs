//! The receiving endpoint's pool of posted receive buffers, into which peers' notification
//! frames arrive (`crate::notify`), and the hand-off of each to the transport's inbox.
//!
//! [`SLOTS`] buffers of [`BUF_LEN`] bytes each (about 270 KiB per backend, whatever the number
//! of peers, allocated zeroed: a page becomes resident only once a frame arrives in it),
//! posted with `fi_recv` when the backend opens and posted again as soon as the progress
//! thread has handed a completed one's bytes to the inbox. A message that arrives while every
//! buffer is taken waits in the provider's unexpected queue (both `shm` and `ofi_rxm` keep
//! one) until a buffer is posted again, so a burst beyond [`SLOTS`] is slower, not lost.
//!
//! Each buffer is owned by the provider while posted, and by the one thread that read its
//! completion from the queue until it is posted again. The buffers stay allocated until the
//! endpoint is closed (`Fabric::drop` drops the pool after closing it, and leaks it when the
//! endpoint must stay open).

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use blockwire_core::kit::Inbox;
use blockwire_core::{BackendError, MAX_NAME_LEN, MAX_NOTIFICATION_LEN};
use libfabric_sys::*;
use parking_lot::Mutex;

use crate::errors::{EAGAIN, error};

/// How many receive buffers the backend keeps posted.
pub(crate) const SLOTS: usize = 64;

/// The largest frame (`blockwire_core::encode_frame`): magic, name length and name, message
/// length and message.
pub(crate) const MAX_FRAME: usize = 4 + 1 + MAX_NAME_LEN + 4 + MAX_NOTIFICATION_LEN;

/// A buffer's length: one byte more than the largest frame, so that a longer message arrives
/// as a frame too long (malformed), not cut to a valid one.
const BUF_LEN: usize = MAX_FRAME + 1;

/// The posted receive buffers of the backend's receiving endpoint.
pub(crate) struct RecvPool {
    /// Each slot's receive context (libfabric's scratch space, `FI_CONTEXT2`): its address
    /// names the slot in a completion.
    contexts: Box<[UnsafeCell<fi_context2>]>,
    /// [`SLOTS`] buffers of [`BUF_LEN`] bytes, slot `i`'s at `i * BUF_LEN`: a boxed slice
    /// owned through this pointer (freed by `Drop`), written by the provider while posted.
    buffers: NonNull<[u8]>,
    ep: *mut fid_ep,
    inbox: Inbox,
    /// Set by [`RecvPool::close`]: nothing more is delivered or posted.
    closed: AtomicBool,
    /// Buffers the provider would not take back for now (`FI_EAGAIN`), posted again at the
    /// next read of the queue.
    unposted: Mutex<Vec<usize>>,
}

// SAFETY: `ep` is an endpoint of an FI_THREAD_SAFE domain (only its address is shared); each
// slot is written by the provider only while posted, and read only by the thread that took
// its completion from the queue (each completion is returned to one reader), until that
// thread posts it again.
unsafe impl Send for RecvPool {}
// SAFETY: as for `Send`; the other fields are thread-safe.
unsafe impl Sync for RecvPool {}

impl RecvPool {
    /// Allocates the buffers of `ep`, whose arriving frames go to `inbox`; nothing is posted
    /// yet ([`RecvPool::post_all`]).
    pub(crate) fn new(ep: *mut fid_ep, inbox: Inbox) -> Self {
        let contexts = (0..SLOTS)
            .map(|_| UnsafeCell::new(fi_context2::default()))
            .collect();
        // Zeroed (calloc): untouched pages stay out of resident memory.
        let buffers = NonNull::from(Box::leak(vec![0u8; SLOTS * BUF_LEN].into_boxed_slice()));
        RecvPool {
            contexts,
            buffers,
            ep,
            inbox,
            closed: AtomicBool::new(false),
            unposted: Mutex::new(Vec::new()),
        }
    }

    /// Posts every buffer (once). On an error, those posted before stay posted: the pool
    /// must still outlive the endpoint.
    ///
    /// # Safety
    ///
    /// The pool's `ep` is an enabled endpoint with `FI_RECV`, bound to a completion queue of
    /// format `FI_CQ_FORMAT_MSG` whose completions of these buffers go to
    /// [`RecvPool::completed`] and [`RecvPool::failed`]. It stays open for as long as the
    /// pool is not closed, and the pool is dropped only after the endpoint closed (or never).
    pub(crate) unsafe fn post_all(&self) -> Result<(), BackendError> {
        for index in 0..SLOTS {
            // SAFETY: per this function's contract; nothing posted any slot yet.
            let ret = unsafe { self.post(index) };
            if ret != 0 && ret != EAGAIN {
                return Err(error(
                    "posting a notification receive buffer (fi_recv)",
                    ret,
                ));
            }
        }
        Ok(())
    }

    /// Posts slot `index`, or notes it for later when the provider says `FI_EAGAIN`.
    ///
    /// # Safety
    ///
    /// The slot is not posted (it was just completed, or never posted) and the endpoint is
    /// open.
    unsafe fn post(&self, index: usize) -> isize {
        // SAFETY: a slot of this pool, not posted: nobody else accesses its buffer or
        // context. Both stay valid until the endpoint closes (this type's contract).
        let ret = unsafe {
            fi_recv(
                self.ep,
                self.buffer(index).cast::<c_void>(),
                BUF_LEN,
                std::ptr::null_mut(),
                FI_ADDR_UNSPEC,
                self.contexts[index].get().cast::<c_void>(),
            )
        };
        if ret == EAGAIN {
            self.unposted.lock().push(index);
        }
        ret
    }

    /// Slot `index`'s buffer (`index` < [`SLOTS`]).
    fn buffer(&self, index: usize) -> *mut u8 {
        debug_assert!(index < SLOTS);
        // SAFETY: inside the allocation of `SLOTS * BUF_LEN` bytes.
        unsafe { self.buffers.cast::<u8>().as_ptr().add(index * BUF_LEN) }
    }

    /// The slot whose receive has `context`, or `None` (an operation's context).
    pub(crate) fn slot_of(&self, context: *mut c_void) -> Option<usize> {
        let size = std::mem::size_of::<UnsafeCell<fi_context2>>();
        let offset = (context as usize).checked_sub(self.contexts.as_ptr() as usize)?;
        (offset % size == 0 && offset / size < SLOTS).then_some(offset / size)
    }

    /// A receive completed with `len` bytes: they go to the inbox (unless closed), and the
    /// buffer is posted again.
    ///
    /// # Safety
    ///
    /// `index` came from [`RecvPool::slot_of`] for a completion just read from the queue.
    pub(crate) unsafe fn completed(&self, index: usize, len: usize) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the provider completed this receive, so it no longer writes the buffer,
        // and this thread, which read the completion, owns it until it posts it again below.
        let bytes = unsafe { std::slice::from_raw_parts(self.buffer(index), len.min(BUF_LEN)) };
        let delivery = self.inbox.deliver_frame(bytes);
        tracing::trace!(len, ?delivery, "libfabric notification received");
        // SAFETY: completed and not posted; the endpoint is open while the pool is not closed.
        unsafe { self.repost(index) };
    }

    /// A receive completed with an error (`errnum`, positive): a message longer than the
    /// buffer (`FI_ETRUNC`) counts as malformed; the buffer is posted again, except when the
    /// provider cancelled it (the endpoint is closing).
    ///
    /// # Safety
    ///
    /// As for [`RecvPool::completed`].
    pub(crate) unsafe fn failed(&self, index: usize, errnum: i32, text: &str) {
        if errnum == FI_ECANCELED as i32 || self.closed.load(Ordering::Acquire) {
            return;
        }
        if errnum == FI_ETRUNC as i32 {
            tracing::warn!(
                max = MAX_FRAME,
                "a peer sent a message longer than any notification frame: dropped"
            );
            // Counted as malformed, like any frame that does not decode.
            self.inbox.deliver_frame(&[]);
        } else {
            tracing::warn!(errnum, %text, "libfabric notification receive failed");
        }
        // SAFETY: per this function's contract.
        unsafe { self.repost(index) };
    }

    /// Posts `index` again, logging a refusal other than `FI_EAGAIN` (the buffer is then out
    /// of the pool).
    ///
    /// # Safety
    ///
    /// As for [`RecvPool::post`].
    unsafe fn repost(&self, index: usize) {
        // SAFETY: per this function's contract.
        let ret = unsafe { self.post(index) };
        if ret != 0 && ret != EAGAIN {
            tracing::error!(
                error = %error("posting a notification receive buffer again (fi_recv)", ret),
                "one receive buffer fewer for notifications"
            );
        }
    }

    /// Posts again the buffers the provider refused for now. Called after each read of the
    /// queue, by the thread that reads it.
    pub(crate) fn repost_refused(&self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let refused = std::mem::take(&mut *self.unposted.lock());
        for index in refused {
            // SAFETY: a slot completed (or never posted) and refused by the provider, so not
            // posted; the endpoint is open while the pool is not closed.
            unsafe { self.repost(index) };
        }
    }

    /// Stops delivering and posting (`Fabric::revoke`, before its progress thread stops and
    /// the endpoint closes). The buffers stay posted, and allocated, until the endpoint
    /// closes.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl Drop for RecvPool {
    fn drop(&mut self) {
        // SAFETY: the boxed slice `new` leaked, freed once; no buffer is posted any more (the
        // pool is dropped only after its endpoint closed).
        drop(unsafe { Box::from_raw(self.buffers.as_ptr()) });
    }
}
