//! The libfabric resources of one backend (fabric, domain, RDM endpoint, completion queue,
//! address vector, the region's registration, the notification receive buffers), the
//! completion dispatch and the progress thread.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use blockwire_core::kit::{Inbox, ProgressThread};
use libfabric_sys::*;
use parking_lot::Mutex;

use crate::completion::Outstanding;
use crate::cq::PeerQueues;
use crate::errors::error;
use crate::local;
use crate::notify::Carrier;
use crate::recv::RecvPool;
use crate::retry::Retries;

mod open;

/// Settings from the backend options.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) provider: String,
    pub(crate) domain: Option<String>,
    /// Bound on the progress thread's sleep when idle (polling progress).
    pub(crate) idle_sleep: Duration,
    /// Block on the completion queue's wait object where the provider offers one.
    pub(crate) wait: bool,
    /// How long a waiting progress thread keeps reading the queues before it sleeps.
    pub(crate) wait_spin: Duration,
    /// Post to each peer through an endpoint of its own (see `crate::endpoint`); `None`:
    /// wherever the provider allows it.
    pub(crate) endpoint_per_peer: Option<bool>,
    /// How long refused posts are retried (half the transport's stall timeout, `crate::retry`).
    pub(crate) give_up_after: Duration,
    /// Where arriving notifications go (`crate::recv`).
    pub(crate) inbox: Inbox,
    /// The most runs of blocks one RMA carries (`crate::op`); `None`: as many as the provider
    /// takes.
    pub(crate) runs_per_op: Option<usize>,
}

struct RawFabric(*mut fid_fabric);
// SAFETY: the fabric of an FI_THREAD_SAFE domain; the pointer is an address.
unsafe impl Send for RawFabric {}

/// Everything libfabric, closed in order on drop (after every peer and transfer: they hold an
/// `Arc` of it).
pub(crate) struct Fabric {
    info: *mut fi_info,
    /// The entry of `info` in use (freed with it).
    pub(crate) chosen: *mut fi_info,
    fabric: *mut fid_fabric,
    pub(crate) domain: *mut fid_domain,
    pub(crate) ep: *mut fid_ep,
    /// Operations posted through `ep` and not completed yet.
    pub(crate) outstanding: Arc<Outstanding>,
    pub(crate) cq: *mut fid_cq,
    pub(crate) av: *mut fid_av,
    mr: *mut fid_mr,
    /// Local descriptor of the region's registration (`FI_MR_LOCAL`), or null.
    pub(crate) desc: *mut c_void,
    pub(crate) key: u64,
    pub(crate) virt: bool,
    /// The most bytes one RMA may move: the endpoint's `max_msg_size`, bounded by
    /// `kit::DEFAULT_MAX_RUN_BYTES` (a run of blocks is split to fit, `crate::post`).
    pub(crate) max_run_bytes: usize,
    /// The most runs of blocks one WRITE carries as an iovec list: the provider's `iov_limit`
    /// and `rma_iov_limit`, at most `crate::op::MAX_PARTS`, or fewer where the option asks
    /// (`crate::op`).
    pub(crate) runs_per_write: usize,
    /// The same for a READ: 1 on `shm`, whose READ of one remote range is one copy inside
    /// the post (`crate::guard`), and of several a command the target serves (a quarter of
    /// the speed: 1.22 GB/s against 4.58 at 64 KiB); else as for WRITEs.
    pub(crate) runs_per_read: usize,
    pub(crate) name: Vec<u8>,
    pub(crate) provider: String,
    /// What `fi_getinfo` granted, in words (for logs and users).
    pub(crate) attributes: String,
    progress: Mutex<Option<ProgressThread>>,
    /// Operations the provider refused for now, and their thread (`crate::retry`).
    pub(crate) retries: Arc<Retries>,
    /// Set by [`Fabric::revoke`]; what it closed already.
    revoked: Mutex<Option<Revoked>>,
    /// The completion queue has a wait object (the progress thread blocks on it).
    waitable: bool,
    /// Registrations are bound to an endpoint (`FI_MR_ENDPOINT`).
    pub(crate) mr_endpoint: bool,
    /// See `Settings::endpoint_per_peer`.
    pub(crate) endpoint_per_peer: bool,
    /// The completion queues of the peers' own endpoints, read by the progress thread too.
    /// Set once the backend's queue is open.
    pub(crate) peer_queues: Arc<PeerQueues>,
    /// How notifications are carried, or `None` where the provider cannot (`crate::notify`).
    pub(crate) carrier: Option<Carrier>,
    /// The receive buffers posted on `ep` (with a carrier). Dropped only after `ep` is
    /// closed, or leaked when it must stay open.
    recv: Option<Arc<RecvPool>>,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE, so every call on these objects may come
// from any thread; the raw pointers are only addresses of libfabric objects this struct owns.
unsafe impl Send for Fabric {}
// SAFETY: as for `Send`.
unsafe impl Sync for Fabric {}

impl Fabric {
    /// Wakes the progress thread.
    pub(crate) fn kick(&self) {
        if let Some(t) = &*self.progress.lock() {
            t.kick();
        }
    }

    /// Stops the retry thread; whether one is stuck in a post (see `crate::retry`), and the
    /// endpoint and what it is bound to must then stay open.
    fn stop_retries(&self) -> bool {
        let wedged = self.retries.stop();
        if wedged {
            tracing::error!(
                provider = %self.provider,
                "libfabric: a retry thread is stuck in a post: the endpoint stays open, and \
                 the region registered, for the process's lifetime"
            );
        }
        wedged
    }

    /// Whether [`Fabric::revoke`] ran.
    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.lock().is_some()
    }

    /// Revokes every peer's access to the region (idempotent; called when no transfer of
    /// this backend is held). The provider copies into and out of the region only in this
    /// side's progress, after checking the key: so the progress thread stops, and the
    /// registration closes. On `tcp` and the like the receiving endpoint closes too (peers'
    /// connections reset: their transfers fail). On `shm` the endpoint's file is removed
    /// first, and the READs peers in other processes posted before are waited for (they copy
    /// in the peer's own post, `crate::guard`; such a peer sees the file gone and cuts its
    /// link), this process's endpoints that
    /// link to it are cut, and the endpoint itself closes with the last of them
    /// (`crate::local`).
    pub(crate) fn revoke(&self) {
        let mut revoked = self.revoked.lock();
        if revoked.is_some() {
            return;
        }
        let shm = self.provider == "shm";
        // First, on shm: peers in other processes post no more READs, and those they posted
        // (copied inside their own post, not by this side's progress) have returned
        // (`crate::guard`). The endpoint's file goes with it: such a peer sees it gone and
        // cuts its link.
        if let (true, Some(file)) = (shm, crate::link::shm_file_name(&self.name)) {
            let path = std::path::Path::new(crate::reap::SHM_DIR).join(file);
            let waited = crate::guard::close_to_reads(&path);
            tracing::debug!(?waited, "libfabric shm: peers' READs stopped");
        }
        // Nothing arriving from now on reaches the inbox.
        if let Some(recv) = &self.recv {
            recv.close();
        }
        let wedged = self.stop_retries();
        // First: this endpoint's progress serves peers' commands by writing into their
        // regions, which a peer endpoint of this process unmaps when it closes (below).
        if let Some(mut t) = self.progress.lock().take() {
            t.stop();
        }
        if shm {
            for link in local::revoke(&self.name) {
                link.cut_local_peer();
            }
        }
        let mut done = Revoked {
            mr_closed: false,
            ep_closed: false,
        };
        // SAFETY: no thread progresses these objects any more, and no post runs (the
        // transport refuses them after close); each is closed once (`Drop` skips what this
        // closed).
        unsafe {
            if !self.mr.is_null() && !wedged {
                close("closing the memory registration", &mut (*self.mr).fid);
                done.mr_closed = true;
            }
            if !shm && !wedged && !self.ep.is_null() {
                close("closing the endpoint", &mut (*self.ep).fid);
                done.ep_closed = true;
            }
        }
        *revoked = Some(done);
    }
}

/// What [`Fabric::revoke`] closed.
struct Revoked {
    mr_closed: bool,
    ep_closed: bool,
}

pub(crate) fn close(what: &str, fid: *mut fid) {
    if fid.is_null() {
        return;
    }
    // SAFETY: a live object owned by the Fabric being dropped, closed once.
    let ret = unsafe { fi_close(fid) };
    if ret != 0 {
        tracing::warn!(error = %error(what, ret as isize), "libfabric teardown");
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let wedged = self.stop_retries();
        if let Some(mut t) = self.progress.get_mut().take() {
            t.stop();
        }
        if self.provider == "shm" {
            local::unregister(&self.name);
        }
        if wedged {
            // The stuck post uses the endpoint and what it is bound to: none of it is closed,
            // and the receive buffers posted on it stay allocated.
            std::mem::forget(self.recv.take());
            return;
        }
        let (mr_closed, ep_closed) = self
            .revoked
            .get_mut()
            .as_ref()
            .map_or((false, false), |r| (r.mr_closed, r.ep_closed));
        // SAFETY: each pointer is null or a live object of this Fabric (not closed by
        // `revoke`); `fid` is the first field of every fid_* struct. Order: endpoint, then
        // what it was bound to, then the registration, domain and fabric.
        unsafe {
            if !self.ep.is_null() && !ep_closed {
                close("closing the endpoint", &mut (*self.ep).fid);
            }
            if !self.mr.is_null() && !mr_closed {
                close("closing the memory registration", &mut (*self.mr).fid);
            }
            if !self.av.is_null() {
                close("closing the address vector", &mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                close("closing the completion queue", &mut (*self.cq).fid);
            }
            // The endpoint and its queue are closed: what it never completed, it never will,
            // and its receive buffers are the provider's no more.
            self.outstanding.abandon();
            drop(self.recv.take());
            if !self.domain.is_null() {
                close("closing the domain", &mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                close("closing the fabric", &mut (*self.fabric).fid);
            }
            if !self.info.is_null() {
                fi_freeinfo(self.info);
            }
        }
    }
}
