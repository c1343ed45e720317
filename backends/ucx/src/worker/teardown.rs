//! Tearing a worker down: revoke (the worker destroyed, remote access gone), the drain
//! before it, a worker left undestroyed where UCX 1.13 would crash destroying it, and the
//! registry of this process's workers that are not torn down yet.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ucx_sys::*;

use super::Ucx;
use crate::errors::error;

/// The identities of this process's workers that are not yet torn down: a cut of a peer in
/// this process tells from it whether that peer's worker can still answer.
static LIVE_WORKERS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Whether this process has a worker of `identity` that is not torn down.
pub(crate) fn live_here(identity: u64) -> bool {
    LIVE_WORKERS.lock().contains(&identity)
}

/// Workers (and their contexts) left undestroyed ([`Ucx::abandon`]): kept here, reachable,
/// for the process's lifetime.
static ABANDONED: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Records that this process has a worker of `identity` (until it is torn down).
pub(super) fn register_live(identity: u64) {
    LIVE_WORKERS.lock().push(identity);
}

impl Ucx {
    /// Revokes remote access to the region (idempotent): waits for every call on the worker
    /// to finish, stops the progress thread, destroys the worker (which closes its
    /// connections: peers' transfers to it fail, or stall until their watchdog cuts them) and
    /// unmaps the caller's memory. No handler runs afterwards, so no peer's emulated put or
    /// get touches the region. Endpoints and remote keys made on the worker die with it: their
    /// owners must not release them (see [`Ucx::worker`]). Memory UCX allocated stays mapped
    /// until drop, where it is freed.
    pub(crate) fn revoke(&self) {
        let mut live = self.live.write();
        if !*live {
            return;
        }
        *live = false;
        // SAFETY: the exclusive guard: no call on the worker runs or starts.
        unsafe { self.teardown_worker(!self.allocated) };
    }

    /// Stops the progress thread, then releases the worker and (if `unmap`) the region's
    /// registration.
    ///
    /// # Safety
    ///
    /// No other call on the worker runs or will run, and this is called once.
    unsafe fn teardown_worker(&self, unmap: bool) {
        LIVE_WORKERS
            .lock()
            .retain(|&w| w != self.notifier.identity());
        // Notifications arriving from here on (during the drain) are refused.
        self.notifier.close();
        if let Some(mut t) = self.progress.lock().take() {
            t.stop();
        }
        if self.worker.is_null() {
            return;
        }
        if !self.abandoned.load(Ordering::Acquire) && !self.drain_worker(Duration::from_secs(2)) {
            tracing::warn!(
                "ucx: the worker still has work queued for peers after 2 s; it is abandoned \
                 rather than destroyed under it"
            );
            self.abandon();
        }
        let abandoned = self.abandoned.load(Ordering::Acquire);
        // SAFETY: per this function's contract; each handle is live and released once. The
        // worker goes first: destroying it purges requests still pending on its endpoints
        // (replies to a peer's gets, among them), which release registrations of the region.
        unsafe {
            if abandoned {
                tracing::warn!(
                    "ucx: the worker holds operations a cut abandoned; it is left undestroyed \
                     (never progressed again) rather than crash UCX 1.13"
                );
                ABANDONED
                    .lock()
                    .push((self.worker as usize, self.context as usize));
            } else {
                ucp_worker_destroy(self.worker);
            }
            // The idle endpoints died with the worker (or stay in one never progressed
            // again): no error callback runs any more, so their states are freed with the
            // kept ones.
            for idle in self.idle.drain() {
                self.keep(Box::new(Arc::from_raw(idle.health)));
            }
            if unmap && !self.memh.is_null() {
                let status = ucp_mem_unmap(self.context, self.memh);
                if status != UCS_OK {
                    tracing::warn!(error = %error("ucp_mem_unmap", status), "ucx teardown");
                }
            }
        }
    }
}

impl Ucx {
    /// Flushes the whole worker, then progresses it until nothing happens for [`QUIET`], from
    /// this thread, for at most `limit` in all; returns whether it went quiet. Destroying a
    /// worker purges what is still queued on its endpoints, and UCX 1.13 crashes purging some
    /// of it: a wireup reply (it asserts), or a reply to a peer's emulated get (its request
    /// never set a datatype, and the purge frees whatever the recycled request held). The
    /// worker flush does not wait for either (the shared-memory transport's flush reports
    /// done with sends queued), so the worker is progressed until a live peer has taken
    /// everything queued for it.
    fn drain_worker(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let user_data = std::sync::Arc::into_raw(done.clone());
        let params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            cb: ucp_request_param_t__bindgen_ty_1 {
                send: Some(worker_flushed),
            },
            user_data: user_data as *mut std::ffi::c_void,
            ..Default::default()
        };
        // SAFETY: a live worker (the caller's contract); the callback reclaims `user_data`
        // once.
        let request = unsafe { ucp_worker_flush_nbx(self.worker, &params) };
        if !UCS_PTR_IS_PTR(request) {
            // SAFETY: the callback will not run; reclaim its Arc.
            drop(unsafe { std::sync::Arc::from_raw(user_data) });
            done.store(true, Ordering::Release);
        }
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline {
            // SAFETY: as above.
            if unsafe { ucp_worker_progress(self.worker) } > 0 {
                quiet_since = Instant::now();
            } else if done.load(Ordering::Acquire) && quiet_since.elapsed() >= QUIET {
                return true;
            }
        }
        tracing::debug!(
            flushed = done.load(Ordering::Acquire),
            "ucx worker still busy at teardown"
        );
        false
    }
}

/// How long a worker must have nothing to progress before it is destroyed. Long enough for a
/// peer's transfer, and a wireup reply waiting for its connection, to show up after a pause of
/// the peer's threads on a loaded machine: at 10 ms, runs of the suite's `target::` cases on
/// two busy cores crashed in `ucp_worker_destroy` (a wireup reply, or a reply to an emulated
/// get, still pending) 5 times in 27; at 50 ms, none in 10.
const QUIET: Duration = Duration::from_millis(50);

unsafe extern "C" fn worker_flushed(
    request: *mut std::ffi::c_void,
    _status: ucs_status_t,
    user_data: *mut std::ffi::c_void,
) {
    // SAFETY: `user_data` is the Arc leaked in `drain_worker`, reclaimed once here.
    let done = unsafe { std::sync::Arc::from_raw(user_data as *const AtomicBool) };
    done.store(true, Ordering::Release);
    // SAFETY: this flush's request, released in its callback.
    unsafe { ucp_request_free(request) };
}

impl Drop for Ucx {
    fn drop(&mut self) {
        let live = std::mem::replace(self.live.get_mut(), false);
        // SAFETY: `&mut self`: no peer or transfer is left (they hold an Arc of this) and no
        // call on the worker runs; each handle was created in `open` and is released once, in
        // reverse order (`revoke` already released the worker, and the caller's memory).
        unsafe {
            if live {
                self.teardown_worker(true);
            } else if self.allocated && !self.memh.is_null() {
                let status = ucp_mem_unmap(self.context, self.memh);
                if status != UCS_OK {
                    tracing::warn!(error = %error("ucp_mem_unmap", status), "ucx teardown");
                }
            }
            // A context whose worker was left undestroyed stays too, and so does what its
            // handlers point to.
            if self.abandoned.load(Ordering::Acquire) {
                std::mem::forget(self.notifier.clone());
            } else if !self.context.is_null() {
                ucp_cleanup(self.context);
            }
        }
    }
}
