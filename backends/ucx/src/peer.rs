//! A connected peer: its endpoint, its region's unpacked remote key and the endpoint's health
//! (connect), and the cut of a stalled peer (`fail_peer`).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI8, Ordering};

use blockwire_core::kit::{CuttableLink, Doorbell, LinkHold, Live, ProcessWatch, TransferCell};
use blockwire_core::{BackendError, BackendErrorKind, PeerDescriptor};
use ucx_sys::*;

use crate::address::UcxAddress;
use crate::endpoint::{ForceClose, close_endpoint, close_peer, fail_posted, force_close};
use crate::notify::check_identity;
use crate::worker::{Ucx, Worker, live_here};
use crate::{UcxBackend, errors, revoked};

/// A connected peer: an endpoint and the unpacked remote key of its region.
pub struct UcxPeer {
    pub(crate) ucx: Arc<Ucx>,
    pub(crate) ep: ucp_ep_h,
    pub(crate) rkey: ucp_rkey_h,
    pub(crate) base: u64,
    pub(crate) num_blocks: u32,
    /// Set by the endpoint's error callback; owned through a raw `Arc` while the endpoint
    /// exists.
    pub(crate) health: *const PeerHealth,
    /// The worker address the endpoint connects to, under which it is kept when the peer is
    /// disconnected (`crate::idle`).
    pub(crate) worker_address: Box<[u8]>,
    /// Posts hold it shared for their whole duration, so `fail_peer` never closes the
    /// endpoint under one; it also fails the transfers posted through it (UCX 1.13's forced
    /// close does not complete flushes already posted on the endpoint).
    pub(crate) link: CuttableLink<ForcedClose, TransferCell>,
    /// Where the peer's worker runs, watched without peer error handling only (see
    /// [`Origin`]).
    pub(crate) origin: Origin,
    _live: Live,
}

/// Where a peer's worker runs, so that a cut whose endpoint UCX could not close can tell
/// whether the peer may still answer the operations it abandons (without peer error
/// handling: `fail_peer`).
pub(crate) enum Origin {
    /// A worker of this process, by its identity: gone once torn down.
    ThisProcess(u64),
    /// Another process, pinned by a pidfd: gone once it exited.
    Process(ProcessWatch),
    /// Not known (its descriptor named no process, or one this process cannot see: another
    /// pid namespace, or one already gone at connect), or not watched (with peer error
    /// handling UCX reports a dead peer itself).
    Unknown,
}

impl Origin {
    /// Watches where the worker of `addr` runs (peer error handling off only).
    fn of(addr: &UcxAddress, ucx: &Ucx, peer_errors: bool) -> Origin {
        if peer_errors || addr.pid == 0 {
            return Origin::Unknown;
        }
        if (addr.pid, addr.start) == ucx.process {
            return Origin::ThisProcess(addr.identity);
        }
        ProcessWatch::open(addr.pid, Some(addr.start)).map_or(Origin::Unknown, Origin::Process)
    }

    /// Whether the peer's worker is certainly gone, so it can answer nothing any more.
    fn gone(&self) -> bool {
        match self {
            Origin::ThisProcess(identity) => !live_here(*identity),
            Origin::Process(watch) => watch.has_exited(),
            Origin::Unknown => false,
        }
    }
}

/// What `fail_peer`'s cut did to the endpoint: once cut, `close_peer` leaves the key and
/// endpoint alone (destroyed, or closing by force).
#[derive(Clone, Copy, Default)]
pub(crate) struct ForcedClose {
    /// The forced close finished, so the error-callback state may be freed.
    pub(crate) closed: bool,
}

// SAFETY: the endpoint and remote key belong to a UCS_THREAD_MODE_MULTI worker, which
// serializes every call on them; `health` points to an `Arc` allocation this peer owns.
unsafe impl Send for UcxPeer {}
// SAFETY: as for `Send`; shared references only post operations (serialized by UCX) and read
// atomics.
unsafe impl Sync for UcxPeer {}

/// The endpoint's health, which UCX's error callback (`endpoint_failed`) sets.
pub(crate) struct PeerHealth {
    /// `UCS_OK` while healthy, else the status the error callback reported.
    pub(crate) status: AtomicI8,
    /// Rung when the endpoint fails: a notification awaiting its acknowledgement then fails
    /// at its next check.
    pub(crate) doorbell: Doorbell,
    /// No peer uses the endpoint (kept in `crate::idle`): its failure is no peer's news.
    idle: AtomicBool,
}

impl PeerHealth {
    /// Marks the endpoint kept idle, or taken again.
    pub(crate) fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::Release);
    }
}

impl UcxPeer {
    /// Holds the link for a post (refused once cut) and checks that the endpoint is healthy.
    pub(crate) fn hold(&self) -> Result<LinkHold<'_, ForcedClose, TransferCell>, BackendError> {
        let link = self.link.hold().map_err(|why| {
            BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!("the connection to this peer was cut: {why}"),
            )
        })?;
        // SAFETY: `health` lives as long as the peer.
        let health = unsafe { &*self.health }.status.load(Ordering::Acquire);
        if health != UCS_OK {
            return Err(errors::error("peer endpoint failed", health));
        }
        Ok(link)
    }

    /// A reference of its own to the endpoint's health.
    pub(crate) fn health_arc(&self) -> Arc<PeerHealth> {
        // SAFETY: `health` came from `Arc::into_raw` and the peer holds that reference until
        // it is dropped, so the count is at least one here; the new reference is the
        // caller's.
        unsafe {
            Arc::increment_strong_count(self.health);
            Arc::from_raw(self.health)
        }
    }
}

impl UcxBackend {
    /// `Backend::connect`: an endpoint to the worker the descriptor names, and its key.
    pub(crate) fn connect_peer(&self, desc: &PeerDescriptor) -> Result<UcxPeer, BackendError> {
        // Read first: a cancel from here on is this connect's.
        let cancels = self.ucx.connects_cancelled();
        let addr = UcxAddress::from_bytes(&desc.address)?;
        addr.region.check(desc)?;
        self.ucx.usable()?;
        let worker = self.ucx.worker().ok_or_else(revoked)?;
        let (idle, failed) = self.ucx.idle.take(&addr.worker);
        for e in failed {
            // SAFETY: a live endpoint of this worker that no peer uses, released once with
            // its state.
            unsafe { close_endpoint(&self.ucx, &worker, e.ep, e.health, true) };
        }
        let (ep, health) = match idle {
            Some(e) => {
                tracing::debug!("ucx: the idle endpoint to this worker connects the peer");
                (e.ep, e.health)
            }
            None => self.create_endpoint(&worker, &addr.worker)?,
        };
        let mut rkey: ucp_rkey_h = ptr::null_mut();
        // SAFETY: a live endpoint and the packed key bytes from the descriptor.
        let status = unsafe { ucp_ep_rkey_unpack(ep, addr.rkey.as_ptr().cast(), &mut rkey) };
        let mut peer = UcxPeer {
            ucx: self.ucx.clone(),
            ep,
            rkey,
            base: desc.base_addr,
            num_blocks: desc.num_blocks,
            health,
            worker_address: addr.worker.clone().into_boxed_slice(),
            link: CuttableLink::new(ForcedClose::default()),
            origin: Origin::of(&addr, &self.ucx, self.peer_errors),
            _live: self.counts.peer(),
        };
        drop(worker);
        if status != UCS_OK {
            peer.rkey = ptr::null_mut();
            close_peer(peer);
            let e = errors::error("ucp_ep_rkey_unpack", status);
            return Err(BackendError::new(
                BackendErrorKind::MalformedAddress,
                e.message(),
            ));
        }
        if addr.answers {
            // Before any put: a stale descriptor's worker must not serve one.
            if let Err(e) = check_identity(&self.ucx, &peer, addr.identity, cancels) {
                tracing::warn!(error = %e, "ucx: connect refused: the identity check failed");
                close_peer(peer);
                return Err(e);
            }
        }
        Ok(peer)
    }

    /// A new endpoint to the worker at `worker_address`, with the `Arc` leaked for its error
    /// callback.
    fn create_endpoint(
        &self,
        worker: &Worker<'_>,
        worker_address: &[u8],
    ) -> Result<(ucp_ep_h, *const PeerHealth), BackendError> {
        let health = Arc::into_raw(Arc::new(PeerHealth {
            status: AtomicI8::new(UCS_OK),
            doorbell: self.doorbell(),
            idle: AtomicBool::new(false),
        }));
        let params = ucp_ep_params_t {
            field_mask: (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64,
            address: worker_address.as_ptr().cast(),
            err_mode: if self.peer_errors {
                UCP_ERR_HANDLING_MODE_PEER
            } else {
                UCP_ERR_HANDLING_MODE_NONE
            },
            err_handler: ucp_err_handler_t {
                cb: Some(endpoint_failed),
                arg: health as *mut c_void,
            },
            ..Default::default()
        };
        let mut ep: ucp_ep_h = ptr::null_mut();
        // SAFETY: a live worker; `params` points to the worker address bytes, which UCX copies
        // during the call; `health` stays alive until the endpoint is closed.
        let status = unsafe { ucp_ep_create(worker.raw(), &params, &mut ep) };
        if status != UCS_OK {
            // SAFETY: no endpoint holds `health`; reclaim the Arc leaked above.
            drop(unsafe { Arc::from_raw(health) });
            let e = errors::error("ucp_ep_create", status);
            return Err(BackendError::new(
                BackendErrorKind::MalformedAddress,
                e.message(),
            ));
        }
        Ok((ep, health))
    }

    /// `Backend::fail_peer`: cuts the link (later posts refused) and closes the endpoint by
    /// force, failing the transfers posted through it.
    pub(crate) fn cut_peer(&self, peer: &UcxPeer) -> bool {
        // Waits for the posts holding the link; later ones are refused once it is marked.
        let mut link = peer.link.write();
        if !peer
            .link
            .mark_cut("no transfer completed for the stall timeout")
        {
            return true;
        }
        if self.ucx.is_halted() {
            // Another peer's cut halted the worker: it is never progressed again, so UCX
            // touches none of this peer's buffers any more, and its transfers end here.
            drop(link);
            fail_posted(peer);
            return true;
        }
        // SAFETY: `health` lives as long as the peer. Later posts are refused from here on.
        let health = unsafe { &*peer.health };
        let _ = health.status.compare_exchange(
            UCS_OK,
            UCS_ERR_ENDPOINT_TIMEOUT,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        // SAFETY: no post runs (the write lock); the key and endpoint are live (or died with
        // a revoked worker, which `force_close` checks) and released here once (`close_peer`
        // skips a cut link). A forced close completes every operation outstanding on the
        // endpoint with an error, so each transfer's flush callback runs.
        let closed = unsafe { force_close(peer) };
        link.closed = closed == ForceClose::Closed;
        drop(link);
        match closed {
            ForceClose::Closed => {
                // The endpoint is gone, and with it every operation posted on it: UCX touches
                // none of their buffers again, but it does not complete their flushes either
                // (their callbacks' `Arc`s are leaked), so they end here.
                fail_posted(peer);
            }
            ForceClose::Refused(status) => {
                // UCX 1.13 force-closes only endpoints with peer error handling: this one
                // stays, with its operations. Their transfers end here so that they surface;
                // the worker, which still holds them, is never destroyed (UCX 1.13 crashes
                // destroying a worker with such operations). If the peer's worker is gone (its
                // process exited, or it was this process's and was torn down) they can never
                // complete; otherwise the peer may answer them yet (a stopped process that
                // resumes), and UCX would copy a READ's data into the region after its
                // transfer was reported failed: the worker is then halted, never progressed
                // again.
                let gone = peer.origin.gone();
                tracing::warn!(
                    error = %status_string(status),
                    peer_gone = gone,
                    "ucx: the stalled peer's endpoint cannot be closed (no peer error \
                     handling); its transfers are failed and its operations abandoned. {}",
                    if gone {
                        "Without peer error handling peers are not isolated: where other \
                         peers stall too, a peer killed while it sent to this process has \
                         stopped the worker's shared-memory receive queue for all of them; \
                         reopen the transport (or use peer_errors=true, or the shm backend)"
                    } else {
                        "The peer may still be running (stopped, or its transport closed \
                         mid-transfer), and could answer them into the region: the worker is \
                         halted, and every transfer of this transport fails; reopen it (or \
                         use peer_errors=true, or the shm backend)"
                    }
                );
                if gone {
                    self.ucx.abandon();
                } else {
                    self.ucx.halt();
                }
                fail_posted(peer);
            }
            ForceClose::TimedOut => {}
        }
        true
    }
}

unsafe extern "C" fn endpoint_failed(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the `PeerHealth` the peer keeps alive until its endpoint is closed.
    let health = unsafe { &*(arg as *const PeerHealth) };
    health.status.store(status, Ordering::Release);
    health.doorbell.ring();
    if health.idle.load(Ordering::Acquire) {
        tracing::debug!(error = %status_string(status), "ucx: an idle endpoint's peer went away");
    } else {
        tracing::warn!(error = %status_string(status), "ucx endpoint failed (remote disconnect)");
    }
}
