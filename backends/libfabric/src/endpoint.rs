//! Endpoints of one peer each (option `endpoint_per_peer`, the default on `shm`): an RDM
//! endpoint with its own completion queue and address vector, so that a peer that dies owing
//! a response blocks only its own endpoint. libfabric 1.17's `shm` completes a sender's
//! operations in order from one response queue per endpoint; sharing one completion queue
//! between endpoints crashed its progress (SIGSEGV in `fi_cq_read`).

use std::ptr;
use std::sync::Arc;

use blockwire_core::{BackendError, BackendErrorKind};
use libfabric_sys::*;
use parking_lot::RwLock;

use crate::errors::check;
use crate::fabric::{Fabric, Raw, close, poll_cq};

/// The completion queues of the peers' endpoints, read with the backend's own.
#[derive(Default)]
pub(crate) struct PeerQueues {
    queues: RwLock<Vec<Raw>>,
}

impl PeerQueues {
    /// Reads each queue once; returns how many completions were handled.
    pub(crate) fn poll(&self) -> usize {
        let queues = self.queues.read();
        queues
            .iter()
            // SAFETY: a queue is removed (under the write lock) before it is closed.
            .map(|q| unsafe { poll_cq(q.0) })
            .sum()
    }
}

/// One peer's endpoint, address vector and completion queue; closed on drop, before the
/// backend's domain (it holds an `Arc` of the [`Fabric`]).
pub(crate) struct Endpoint {
    pub(crate) ep: *mut fid_ep,
    pub(crate) av: *mut fid_av,
    cq: *mut fid_cq,
    fabric: Arc<Fabric>,
}

// SAFETY: objects of an FI_THREAD_SAFE domain; the pointers are only their addresses.
unsafe impl Send for Endpoint {}
// SAFETY: as for `Send`.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens an endpoint on the backend's domain, registers its queue for progress.
    pub(crate) fn open(fabric: &Arc<Fabric>) -> Result<Self, BackendError> {
        if fabric.mr_endpoint {
            return Err(BackendError::new(
                BackendErrorKind::InvalidOption,
                format!(
                    "provider {} binds registrations to an endpoint (FI_MR_ENDPOINT): \
                     endpoint_per_peer is not supported",
                    fabric.provider
                ),
            ));
        }
        let mut e = Endpoint {
            ep: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            fabric: fabric.clone(),
        };
        // SAFETY: a live domain and the info it was opened with; each object opened is stored
        // in `e`, whose Drop closes it.
        unsafe {
            let mut cq_attr = fi_cq_attr {
                format: FI_CQ_FORMAT_CONTEXT,
                size: 4096,
                wait_obj: FI_WAIT_NONE,
                ..Default::default()
            };
            check(
                "fi_cq_open",
                fi_cq_open(fabric.domain, &mut cq_attr, &mut e.cq, ptr::null_mut()),
            )?;
            let mut av_attr = fi_av_attr {
                type_: FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                fi_av_open(fabric.domain, &mut av_attr, &mut e.av, ptr::null_mut()),
            )?;
            check(
                "fi_endpoint",
                fi_endpoint(fabric.domain, fabric.chosen, &mut e.ep, ptr::null_mut()),
            )?;
            check(
                "fi_ep_bind(cq)",
                fi_ep_bind(e.ep, &mut (*e.cq).fid, (FI_TRANSMIT | FI_RECV) as u64),
            )?;
            check("fi_ep_bind(av)", fi_ep_bind(e.ep, &mut (*e.av).fid, 0))?;
            check("fi_enable", fi_enable(e.ep))?;
        }
        fabric.peer_queues.queues.write().push(Raw(e.cq));
        Ok(e)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Out of the progress thread's reach first (it reads under the read lock).
        self.fabric
            .peer_queues
            .queues
            .write()
            .retain(|q| q.0 != self.cq);
        // SAFETY: null or live objects of this endpoint, closed once: the endpoint, then what
        // it is bound to. Its operations are completed, or will never be (a cut link).
        unsafe {
            if !self.ep.is_null() {
                close("closing a peer's endpoint", &mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                close("closing a peer's address vector", &mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                close("closing a peer's completion queue", &mut (*self.cq).fid);
            }
        }
    }
}
