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

use blockwire_core::{BackendError, BackendErrorKind};
use libfabric_sys::*;

use crate::completion::Outstanding;
use crate::errors::check;
use crate::fabric::{Fabric, close};

/// Receive queue depth of a peer's endpoint (it receives no messages, only RMA responses).
const PEER_RX_SIZE: usize = 16;

/// One peer's endpoint, address vector and completion queue; closed on drop, before the
/// backend's domain (it holds an `Arc` of the [`Fabric`]).
///
/// Made in two steps: [`Endpoint::new`] opens the address vector and inserts the peer's name
/// when the peer is added (cheap; a name the provider refuses fails the add), and
/// [`Endpoint::enable`] opens the endpoint itself later, off the caller's thread (on
/// `tcp;ofi_rxm` its `fi_enable` takes 7 to 50 ms: `crate::opener`).
pub(crate) struct Endpoint {
    /// Null until [`Endpoint::enable`] succeeded.
    pub(crate) ep: *mut fid_ep,
    pub(crate) av: *mut fid_av,
    /// The peer's entry in `av`.
    pub(crate) addr: fi_addr_t,
    /// Operations posted through `ep` and not completed yet.
    pub(crate) outstanding: Arc<Outstanding>,
    /// Its own completion queue (null until enabled).
    cq: *mut fid_cq,
    fabric: Arc<Fabric>,
}

// SAFETY: objects of an FI_THREAD_SAFE domain; the pointers are only their addresses.
unsafe impl Send for Endpoint {}
// SAFETY: as for `Send`.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens the address vector of a peer's endpoint and inserts the peer's endpoint `name`;
    /// the endpoint itself is opened by [`Endpoint::enable`].
    pub(crate) fn new(fabric: &Arc<Fabric>, name: &[u8]) -> Result<Self, BackendError> {
        let mut e = Endpoint {
            ep: ptr::null_mut(),
            av: ptr::null_mut(),
            addr: 0,
            outstanding: Arc::new(Outstanding::default()),
            cq: ptr::null_mut(),
            fabric: fabric.clone(),
        };
        let mut av_attr = fi_av_attr {
            type_: FI_AV_TABLE,
            ..Default::default()
        };
        // SAFETY: a live domain; the vector opened is stored in `e`, whose Drop closes it.
        check("fi_av_open", unsafe {
            fi_av_open(fabric.domain, &mut av_attr, &mut e.av, ptr::null_mut())
        })?;
        // SAFETY: a live address vector; `name` holds one address of the provider's length
        // (checked by `OfiAddress::from_bytes`).
        let n = unsafe {
            fi_av_insert(
                e.av,
                name.as_ptr().cast(),
                1,
                &mut e.addr,
                0,
                ptr::null_mut(),
            )
        };
        if n != 1 {
            return Err(BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("fi_av_insert accepted {n} of 1 addresses"),
            ));
        }
        Ok(e)
    }

    /// Whether [`Endpoint::enable`] succeeded: posts may go through it.
    pub(crate) fn is_enabled(&self) -> bool {
        !self.ep.is_null()
    }

    /// Opens the endpoint, with a queue of its own, bound to the address vector, registered
    /// for progress. On failure what it opened is closed again, so a later call starts over.
    pub(crate) fn enable(&mut self) -> Result<(), BackendError> {
        if self.is_enabled() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut ep: *mut fid_ep = ptr::null_mut();
        let mut cq: *mut fid_cq = ptr::null_mut();
        // SAFETY: a live domain and the info it was opened with; what is opened here is
        // closed below on failure, else kept in `self`, whose Drop closes it.
        let opened = unsafe { self.open_ep(&mut ep, &mut cq) };
        if let Err(e) = opened {
            // SAFETY: null or objects just opened here, used by nobody, closed once, the
            // endpoint before its queue.
            unsafe {
                if !ep.is_null() {
                    close("closing a peer's endpoint", &mut (*ep).fid);
                }
                if !cq.is_null() {
                    close("closing a peer's completion queue", &mut (*cq).fid);
                }
            }
            return Err(e);
        }
        self.ep = ep;
        self.cq = cq;
        tracing::debug!(took = ?started.elapsed(), "libfabric peer endpoint opened");
        Ok(())
    }

    /// The steps of [`Endpoint::enable`], storing what they opened in `ep` and `cq`.
    ///
    /// # Safety
    ///
    /// `self.av` is live; `ep` and `cq` are null.
    unsafe fn open_ep(
        &self,
        ep: &mut *mut fid_ep,
        cq: &mut *mut fid_cq,
    ) -> Result<(), BackendError> {
        let fabric = &self.fabric;
        // SAFETY: per this function's contract; a live domain and the info it was opened
        // with.
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
                fi_cq_open(fabric.domain, &mut cq_attr, cq, ptr::null_mut()),
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
            let opened = fi_endpoint(fabric.domain, info, ep, ptr::null_mut());
            fi_freeinfo(info);
            check("fi_endpoint", opened)?;
            check(
                "fi_ep_bind(cq)",
                fi_ep_bind(*ep, &mut (**cq).fid, (FI_TRANSMIT | FI_RECV) as u64),
            )?;
            check("fi_ep_bind(av)", fi_ep_bind(*ep, &mut (*self.av).fid, 0))?;
            check("fi_enable", fi_enable(*ep))?;
            // A live queue, opened with FI_WAIT_FD when the queues wait; removed in Drop
            // before it is closed.
            fabric.peer_queues.add(*cq)
        }
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
