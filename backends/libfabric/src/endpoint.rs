//! Endpoints of one peer each (option `endpoint_per_peer`, the default wherever the provider
//! allows it): an RDM endpoint with its own address vector, for two reasons.
//!
//! - `shm`: libfabric 1.17 completes a sender's operations in order from one response queue
//!   per endpoint, so a peer that dies owing a response blocks only its own endpoint.
//! - `tcp;ofi_rxm`: closing the endpoint closes its connections, which is the only way to
//!   cut one peer's connection safely (`fi_av_remove` leaves it running).
//!
//! Each also has its own completion queue, which the progress thread serves with the
//! backend's (`crate::cq`): endpoints sharing one queue crashed both providers' progress
//! (SIGSEGV in `fi_cq_read`).

use std::ptr;
use std::sync::Arc;

use blockwire_core::BackendError;
use libfabric_sys::*;

use crate::completion::Outstanding;
use crate::errors::check;
use crate::fabric::{Fabric, close};

/// Receive queue depth of a peer's endpoint (it receives no messages, only RMA responses).
const PEER_RX_SIZE: usize = 16;

/// One peer's endpoint, address vector and completion queue; closed on drop, before the
/// backend's domain (it holds an `Arc` of the [`Fabric`]).
pub(crate) struct Endpoint {
    pub(crate) ep: *mut fid_ep,
    pub(crate) av: *mut fid_av,
    /// Operations posted through `ep` and not completed yet.
    pub(crate) outstanding: Arc<Outstanding>,
    /// Its own completion queue.
    cq: *mut fid_cq,
    fabric: Arc<Fabric>,
}

// SAFETY: objects of an FI_THREAD_SAFE domain; the pointers are only their addresses.
unsafe impl Send for Endpoint {}
// SAFETY: as for `Send`.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens an endpoint on the backend's domain, with a queue of its own, registered for
    /// progress.
    pub(crate) fn open(fabric: &Arc<Fabric>) -> Result<Self, BackendError> {
        let mut e = Endpoint {
            ep: ptr::null_mut(),
            av: ptr::null_mut(),
            outstanding: Arc::new(Outstanding::default()),
            cq: ptr::null_mut(),
            fabric: fabric.clone(),
        };
        // SAFETY: a live domain and the info it was opened with; each object opened is stored
        // in `e`, whose Drop closes it.
        unsafe {
            let mut cq_attr = fi_cq_attr {
                format: FI_CQ_FORMAT_CONTEXT,
                size: 4096,
                wait_obj: if fabric.peer_queues.waiting() {
                    FI_WAIT_FD
                } else {
                    FI_WAIT_NONE
                },
                ..Default::default()
            };
            check(
                "fi_cq_open",
                fi_cq_open(fabric.domain, &mut cq_attr, &mut e.cq, ptr::null_mut()),
            )?;
            let cq = e.cq;
            let mut av_attr = fi_av_attr {
                type_: FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                fi_av_open(fabric.domain, &mut av_attr, &mut e.av, ptr::null_mut()),
            )?;
            // It only initiates RMA: a small receive side (rxm preallocates a buffer per
            // receive, which made each endpoint cost about 10 ms to open).
            let info = fi_dupinfo(fabric.chosen);
            if info.is_null() {
                return Err(BackendError::other("fi_dupinfo failed"));
            }
            if !(*info).rx_attr.is_null() {
                (*(*info).rx_attr).size = (*(*info).rx_attr).size.min(PEER_RX_SIZE);
            }
            let opened = fi_endpoint(fabric.domain, info, &mut e.ep, ptr::null_mut());
            fi_freeinfo(info);
            check("fi_endpoint", opened)?;
            check(
                "fi_ep_bind(cq)",
                fi_ep_bind(e.ep, &mut (*cq).fid, (FI_TRANSMIT | FI_RECV) as u64),
            )?;
            check("fi_ep_bind(av)", fi_ep_bind(e.ep, &mut (*e.av).fid, 0))?;
            check("fi_enable", fi_enable(e.ep))?;
        }
        // SAFETY: a live queue, opened with FI_WAIT_FD when the queues wait; removed in
        // Drop before it is closed.
        unsafe { fabric.peer_queues.add(e.cq) }?;
        Ok(e)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Out of the progress thread's reach first.
        if !self.cq.is_null() {
            self.fabric.peer_queues.remove(self.cq);
        }
        // SAFETY: null or live objects of this endpoint, closed once: the endpoint, then what
        // it is bound to. Its operations are completed, or will never be (a cut link), and
        // their contexts are freed once nothing can complete them.
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
            // Closed: what the provider never completed, it never will (a cut link's).
            self.outstanding.abandon();
        }
    }
}
