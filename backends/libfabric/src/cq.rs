//! Completion queues: reading them (completions go to their operations' contexts,
//! `crate::completion`, or, on the backend's own queue, to the receive buffers,
//! `crate::recv`), and the queues the progress thread serves: the backend's, and those of the
//! peers' own endpoints (see `crate::endpoint`). Where the queues have wait objects (`tcp`,
//! `net`), the thread sleeps in `epoll_wait` on all their file descriptors at once, after
//! `fi_trywait` says nothing is pending (libfabric's protocol for waiting on several queues);
//! otherwise it polls them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::time::{Duration, Instant};

use blockwire_core::BackendError;
use libfabric_sys::*;
use parking_lot::RwLock;

use std::ffi::CStr;

use crate::completion::complete;
use crate::errors::{EAVAIL, check, reason};
use crate::recv::RecvPool;

/// A completion queue's address, shared with the progress thread.
pub(crate) struct Raw(pub(crate) *mut fid_cq);

// SAFETY: the completion queue belongs to an FI_THREAD_SAFE domain; the pointer is an address.
unsafe impl Send for Raw {}
// SAFETY: as for `Send`: the queue is thread-safe and only its address is shared.
unsafe impl Sync for Raw {}

/// Reads up to 16 completions (or one error) from a peer endpoint's `cq` (format
/// `FI_CQ_FORMAT_CONTEXT`) and completes their operations.
///
/// # Safety
///
/// `cq` is a live completion queue whose operation contexts are all [`OpContext`](crate::completion::OpContext)s.
pub(crate) unsafe fn poll_cq(cq: *mut fid_cq) -> usize {
    let mut entries = [fi_cq_entry::default(); 16];
    // SAFETY: `entries` holds 16 context-format entries.
    let n = unsafe { fi_cq_read(cq, entries.as_mut_ptr().cast(), entries.len()) };
    if n > 0 {
        for e in &entries[..n as usize] {
            // SAFETY: every operation is posted with a boxed OpContext, completed once.
            unsafe { complete(e.op_context, None) };
        }
        return n as usize;
    }
    // SAFETY: per this function's contract.
    unsafe { read_error(cq, n, None) }
}

/// Reads up to 16 completions (or one error) from the backend's own `cq` (format
/// `FI_CQ_FORMAT_MSG`): those of `recv`'s buffers hand their frames to the inbox
/// (`crate::recv`), the others complete their operations. Then posts again the buffers the
/// provider refused for now.
///
/// # Safety
///
/// `cq` is a live completion queue of format `FI_CQ_FORMAT_MSG` whose contexts are
/// [`OpContext`](crate::completion::OpContext)s or `recv`'s buffers; `recv`'s endpoint is open.
pub(crate) unsafe fn poll_main(cq: *mut fid_cq, recv: Option<&RecvPool>) -> usize {
    let mut entries = [fi_cq_msg_entry::default(); 16];
    // SAFETY: `entries` holds 16 msg-format entries, the queue's format.
    let n = unsafe { fi_cq_read(cq, entries.as_mut_ptr().cast(), entries.len()) };
    let handled = if n > 0 {
        for e in &entries[..n as usize] {
            match recv.and_then(|r| Some((r, r.slot_of(e.op_context)?))) {
                // SAFETY: a completion of that buffer, just read.
                Some((r, slot)) => unsafe { r.completed(slot, e.len) },
                // SAFETY: every other operation is posted with a boxed OpContext, completed
                // once.
                None => unsafe { complete(e.op_context, None) },
            }
        }
        n as usize
    } else {
        // SAFETY: per this function's contract.
        unsafe { read_error(cq, n, recv) }
    };
    if let Some(r) = recv {
        r.repost_refused();
    }
    handled
}

/// When a read returned `n` = `-FI_EAVAIL`, reads the error and fails its operation (or
/// hands it to `recv` when it is one of its buffers). Returns how many it handled.
///
/// # Safety
///
/// As for [`poll_main`] (with `recv` `None`: as for [`poll_cq`]).
unsafe fn read_error(cq: *mut fid_cq, n: isize, recv: Option<&RecvPool>) -> usize {
    if n != EAVAIL {
        return 0;
    }
    let mut err = fi_cq_err_entry::default();
    // SAFETY: a live queue and a writable error entry.
    let r = unsafe { fi_cq_readerr(cq, &mut err, 0) };
    if r <= 0 {
        return 0;
    }
    // SAFETY: fi_cq_strerror returns a string owned by the provider (or null).
    let text = unsafe {
        let p = fi_cq_strerror(cq, err.prov_errno, err.err_data, ptr::null_mut(), 0);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    tracing::debug!(err = err.err, %text, "libfabric completion error");
    match recv.and_then(|r| Some((r, r.slot_of(err.op_context)?))) {
        // SAFETY: the failed completion of that buffer, just read.
        Some((r, slot)) => unsafe { r.failed(slot, err.err, &text) },
        // SAFETY: as above.
        None => unsafe { complete(err.op_context, Some(reason(err.err, &text))) },
    }
    1
}

/// How long the progress thread sleeps in `epoll_wait` at most (a stop signals the backend's
/// queue, which wakes it at once).
const WAIT_MS: i32 = 100;

/// The peers' completion queues, and the epoll set of every queue's wait fd (when waiting).
pub(crate) struct PeerQueues {
    queues: RwLock<Vec<Raw>>,
    epoll: Option<OwnedFd>,
}

/// The wait fd of a queue opened with `FI_WAIT_FD`.
///
/// # Safety
///
/// `cq` is a live completion queue.
unsafe fn wait_fd(cq: *mut fid_cq) -> Result<i32, BackendError> {
    let mut fd: i32 = -1;
    // SAFETY: per this function's contract; FI_GETWAIT writes one int.
    check("fi_control(FI_GETWAIT)", unsafe {
        fi_control(
            &mut (*cq).fid,
            FI_GETWAIT as i32,
            (&mut fd as *mut i32).cast(),
        )
    })?;
    Ok(fd)
}

impl PeerQueues {
    /// No queue and no waiting (until the backend's queue is open).
    pub(crate) fn empty() -> Self {
        PeerQueues {
            queues: RwLock::new(Vec::new()),
            epoll: None,
        }
    }

    /// No peer queue yet; with `wait`, an epoll set holding the backend's queue `main` (opened
    /// with `FI_WAIT_FD`).
    ///
    /// # Safety
    ///
    /// `main` is a live completion queue.
    pub(crate) unsafe fn new(main: *mut fid_cq, wait: bool) -> Result<Self, BackendError> {
        let mut queues = PeerQueues {
            queues: RwLock::new(Vec::new()),
            epoll: None,
        };
        if wait {
            // SAFETY: plain syscall; the new fd is owned below.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                return Err(BackendError::from_io(
                    "epoll_create1",
                    &std::io::Error::last_os_error(),
                ));
            }
            // SAFETY: a new fd owned by nobody else.
            queues.epoll = Some(unsafe { OwnedFd::from_raw_fd(fd) });
            // SAFETY: per this function's contract.
            queues.watch(unsafe { wait_fd(main) }?, libc::EPOLL_CTL_ADD)?;
        }
        Ok(queues)
    }

    /// Whether the queues have wait objects (a peer's queue must be opened with one too).
    pub(crate) fn waiting(&self) -> bool {
        self.epoll.is_some()
    }

    fn watch(&self, fd: i32, op: i32) -> Result<(), BackendError> {
        let Some(epoll) = &self.epoll else {
            return Ok(());
        };
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: a live epoll fd and a valid event struct.
        if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut event) } < 0 {
            return Err(BackendError::from_io(
                "epoll_ctl",
                &std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Adds a peer's queue.
    ///
    /// # Safety
    ///
    /// `cq` is a live completion queue, opened with `FI_WAIT_FD` when [`Self::waiting`], and
    /// stays open until [`Self::remove`] returns.
    pub(crate) unsafe fn add(&self, cq: *mut fid_cq) -> Result<(), BackendError> {
        if self.waiting() {
            // SAFETY: per this function's contract.
            self.watch(unsafe { wait_fd(cq) }?, libc::EPOLL_CTL_ADD)?;
        }
        self.queues.write().push(Raw(cq));
        Ok(())
    }

    /// Removes a peer's queue: the progress thread no longer reads or waits on it.
    pub(crate) fn remove(&self, cq: *mut fid_cq) {
        let mut queues = self.queues.write();
        let before = queues.len();
        queues.retain(|q| q.0 != cq);
        if queues.len() != before && self.waiting() {
            // SAFETY: the queue is live (its owner removes it before closing it).
            if let Ok(fd) = unsafe { wait_fd(cq) } {
                let _ = self.watch(fd, libc::EPOLL_CTL_DEL);
            }
        }
    }

    /// Reads each peer queue once; returns how many completions were handled.
    pub(crate) fn poll(&self) -> usize {
        let queues = self.queues.read();
        queues
            .iter()
            // SAFETY: a queue is removed (under the write lock) before it is closed.
            .map(|q| unsafe { poll_cq(q.0) })
            .sum()
    }

    /// The waiting progress thread's step: reads every queue, again and again for up to
    /// `spin` while they are empty; if nothing was there and `fi_trywait` agrees, sleeps until
    /// a queue's fd is readable (or [`WAIT_MS`]; 1 ms when `busy`: posts wait to be retried).
    ///
    /// # Safety
    ///
    /// `fabric` and `main` are live and outlive the call; [`Self::waiting`] is true; as for
    /// [`poll_main`] with `main` and `recv`.
    pub(crate) unsafe fn wait(
        &self,
        fabric: *mut fid_fabric,
        main: *mut fid_cq,
        recv: Option<&RecvPool>,
        busy: bool,
        spin: Duration,
    ) {
        // Reading a queue is what makes the provider progress (`ofi_rxm` over `tcp` moves a
        // large message's data only in such calls), so a spin keeps the data moving with no
        // sleep and wake between its pieces (`wait_spin_us`). No deadline (a clock that cannot
        // add `spin`): no spin.
        let deadline = if spin.is_zero() {
            None
        } else {
            Instant::now().checked_add(spin)
        };
        loop {
            // SAFETY: per this function's contract.
            if unsafe { poll_main(main, recv) } + self.poll() > 0 {
                return;
            }
            match deadline {
                Some(at) if Instant::now() < at => std::hint::spin_loop(),
                _ => break,
            }
        }
        let Some(epoll) = &self.epoll else {
            return;
        };
        let ready = {
            let queues = self.queues.read();
            // SAFETY: live queues (the read lock keeps peer queues open).
            let mut fids: Vec<*mut fid> = std::iter::once(main)
                .chain(queues.iter().map(|q| q.0))
                .map(|cq| unsafe { ptr::addr_of_mut!((*cq).fid) })
                .collect();
            // SAFETY: a live fabric and live queues of it.
            unsafe { fi_trywait(fabric, fids.as_mut_ptr(), fids.len() as i32) }
        };
        if ready != 0 {
            // -FI_EAGAIN: something is pending; read again.
            return;
        }
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        let timeout = if busy { 1 } else { WAIT_MS };
        // SAFETY: a live epoll fd and a buffer of 16 events.
        unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), 16, timeout) };
    }
}
