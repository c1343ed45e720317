//! # blockwire-ucx: raw UCP RMA on the system UCX
//!
//! - **Registration**: one `ucp_mem_map` of the whole region and one packed remote key in the
//!   descriptor, next to the worker address; adding a peer unpacks that key once and computes
//!   block addresses, so it costs the same for a thousand blocks as for a million.
//! - **Transfers**: WRITE posts one `ucp_put_nbx` per run of blocks adjacent on both sides
//!   (`kit::checked_runs`, at most `kit::DEFAULT_MAX_RUN_BYTES` each; a scattered block is a
//!   run of one), READ one `ucp_get_nbx`, then a `ucp_ep_flush_nbx` on the endpoint; the
//!   transfer is done when the flush completes, which is when every byte is at the target
//!   (remote completion), not when the local buffer is merely reusable.
//! - **Progress**: by default a thread of the backend progresses the worker (spinning while
//!   there is work, backing off to `idle_sleep_us` sleeps when idle, woken by each post), so a passive
//!   peer that never polls still receives writes: UCX over TCP, and over shared memory on
//!   memory it did not allocate, emulates RMA with active messages that the target must
//!   progress. `progress=caller` progresses only inside `poll`.
//! - **Threads**: the worker is created with `UCS_THREAD_MODE_MULTI`: posts from any session
//!   thread, connects on the registration worker and the progress thread share it, and UCX
//!   serializes them.
//! - **Failures**: endpoints use `UCP_ERR_HANDLING_MODE_PEER` with an error callback (unless
//!   `peer_errors=false`); a dead peer's outstanding operations complete with an error, so its
//!   transfers fail with the remote-disconnect reason, and later posts to it are refused at
//!   once.
//! - **Posts never wait**: a put or get UCX cannot send at once goes on its own pending queue
//!   (`ucp_put_nbx` does not report a lack of resources), so a post costs the CPU time of its
//!   operations and never waits on the peer.
//! - **Cancel**: UCX cannot cancel an RMA in flight, so [`Capabilities::abort`] is false and a
//!   transfer reports busy to `release` until its flush completes.
//! - **Revocation** (close): UCX 1.13 has no way to invalidate a remote key, and on memory it
//!   did not allocate, and over TCP, it emulates a peer's put and get with active messages
//!   that this side's worker serves by copying to or from whatever address the message names
//!   (the key is not checked). So close stops the progress thread, destroys the worker (its
//!   connections close: a peer's transfers over TCP fail as a remote disconnect; over shared
//!   memory without peer error handling they stall until the peer's watchdog cuts them) and
//!   unmaps the region: nothing serves a peer's put or get afterwards. Memory UCX allocated
//!   ([`UcxBackend::open_allocated`]) is mapped by same-host peers over `posix`/`sysv`, which
//!   then write into it directly, with nothing this side can stop: it stays mapped until the
//!   transport is dropped (and is then unmapped here, leaving peers writing into pages no
//!   longer in this process), so [`Capabilities::revoke`] is false for it unless `tls=tcp`.
//!
//! ## Notifications
//!
//! A notification ([`Backend::notify`]) is an active message (`ucp_am_send_nbx`, eager, with a
//! reply endpoint) on the peer's endpoint, carrying a sequence number and the frame. The
//! handler installed on every worker at open (`ucp_worker_set_am_recv_handler`) runs inside
//! the target's `ucp_worker_progress`, hands the frame to the target transport's inbox, and
//! answers on the reply endpoint with what the inbox did (queued, full, closed, malformed).
//! The sender's transfer is done when the answer says queued: "delivered" means in the
//! target's inbox, so a drain right after finds it. It fails when the answer says otherwise,
//! when the send fails, or when the endpoint fails first (remote disconnect); over shared
//! memory without peer error handling, a notification to a target that is gone stays running
//! until the stall watchdog cuts the peer. (A flush would not do: UCX flushes active messages
//! with `UCT_FLUSH_FLAG_LOCAL`, which over TCP means "in the local socket buffer".)
//!
//! Who receives: the progress thread, without the target ever polling; with `progress=caller`
//! the target's worker runs only when driven, so `poll_notifications` (every drain) progresses
//! it, and the sender's notify stays running until the target drains or polls. After close
//! (`revoke`) nothing is delivered: arrivals during the teardown are answered "closed", and
//! the destroyed worker answers nothing (the sender fails by endpoint error or stall cut). A
//! backend opened before its transport ([`UcxBackend::open_allocated`]) is given the
//! transport's inbox (and doorbell) with [`UcxBackend::adopt_transport`].
//!
//! ## Options
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `tls` | UCX's default (`UCX_TLS`) | transports, as `UCX_TLS`: `tcp`, `posix,cma,self`, ... |
//! | `net_devices` | UCX's default (`UCX_NET_DEVICES`) | network devices, for example `lo` |
//! | `progress` | `thread` | `thread` or `caller` (see above) |
//! | `idle_sleep_us` | 100 | longest sleep of an idle progress thread: a passive target's latency against its CPU use |
//! | `tcp_seg_bytes` | [`DEFAULT_TCP_SEG_BYTES`] (64 KiB), or `UCX_TCP_TX_SEG_SIZE` where set | the TCP transport's send segment, 8 KiB to 64 KiB (UCX's default is 8 KiB): the most a READ's answer or a put carries in one message; see [`tcp_tuning`] |
//! | `peer_errors` | `true` | endpoints use `UCP_ERR_HANDLING_MODE_PEER`, so a dead peer fails transfers; UCX 1.13 then uses only transports that can detect peer failure, which excludes its shared-memory transports (`posix`, `sysv`, `self`): set `false` to use them, at the price of no disconnect detection ([`Capabilities::remote_disconnect`] is then false) |
//!
//! UCX's own `UCX_*` environment variables apply too; these options override them.
//!
//! ## Shared memory, TCP, and who allocates the region
//!
//! Measured on the development machine (UCX 1.13.1, 2 cores, two transports in one process,
//! 16 blocks per transfer, 4 in flight, ratio to a single-thread `memcpy` in the same run):
//!
//! | setting | lanes UCX chose | WRITE 64 KiB / 1 MiB | READ 64 KiB / 1 MiB |
//! |---|---|---|---|
//! | `tls=tcp` | `rma_am(tcp/lo)`: software emulation over active messages | 0.14 / 0.11 | |
//! | `tls=posix,cma,peer_errors=false`, caller's memory | `rma(posix/memory)`; protocol v2 reports software emulation | 0.58 / 0.58 | 0.59 / 0.64 |
//! | same, region from [`UcxBackend::open_allocated`] | `rma(posix/memory)`: true one-sided puts (v2: `short` up to 30306 bytes) | 0.91 / 1.01 | 1.05 / 0.98 |
//!
//! (Measured with UCX's default TCP send segment of 8 KiB; see `tcp_seg_bytes` for what 64 KiB
//! changes over TCP.)
//!
//! UCX 1.13 gives peer-failure handling only to transports that support it, which leaves out
//! `posix`, `sysv` and `self` (and `cma` carries no active messages): with the default
//! `peer_errors=true` a shared-memory-only `tls` cannot connect, and the default `tls` falls back
//! to TCP lanes. The shared-memory setting therefore runs with `peer_errors=false` and does not
//! detect a peer that vanishes.
//!
//! ```
//! use blockwire_core::{Backend, OpenBackend, BackendOptions, Op, PeerDescriptor, RegionSpan, XferState};
//! use blockwire_ucx::UcxBackend;
//! use std::ptr::NonNull;
//!
//! let mut a = vec![7u8; 4 * 1024];
//! let mut b = vec![0u8; 4 * 1024];
//! let span = |v: &mut Vec<u8>| RegionSpan::new(NonNull::new(v.as_mut_ptr()).unwrap(), 4, 1024).unwrap();
//! // SAFETY: both vectors outlive both backends and are not accessed while they run.
//! let (ba, bb) = unsafe {
//!     (UcxBackend::open(span(&mut a), BackendOptions::new())?,
//!      UcxBackend::open(span(&mut b), BackendOptions::new())?)
//! };
//! let desc = PeerDescriptor::new("ucx", bb.address(), b.as_ptr() as u64, 4, 1024, "");
//! let peer = ba.connect(&desc)?;
//! let mut x = ba.post(&peer, Op::Write, &[0], &[3])?;
//! while ba.state(&mut x) == XferState::Running {}
//! assert!(ba.release(x).is_ok());
//! ba.disconnect(peer);
//! drop((ba, bb));
//! assert_eq!(b[3 * 1024], 7);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod address;
mod endpoint;
mod errors;
mod notify;
mod tuning;
mod worker;

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI8, Ordering};

use blockwire_core::kit::{self, CuttableLink, Doorbell, LinkHold, Live, LiveCounts, TransferCell};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendOptions, BackendStats, BlockIndex,
    Capabilities, Error, Op, OpenBackend, PeerDescriptor, RegionSpan, RegisteredRegion, XferState,
};
use parking_lot::Mutex;
use ucx_sys::*;

use address::UcxAddress;
use endpoint::{ForceClose, close_peer, fail_posted, force_close};
pub use tuning::{DEFAULT_TCP_SEG_BYTES, tcp_tuning};
pub use worker::ProgressMode;
use worker::{Memory, Settings, Ucx};

/// The backend kind written in descriptors.
///
/// ```
/// assert_eq!(blockwire_ucx::KIND, "ucx");
/// ```
pub const KIND: &str = "ucx";

/// The raw UCX backend (see the crate docs).
pub struct UcxBackend {
    span: RegionSpan,
    ucx: Arc<Ucx>,
    counts: LiveCounts,
    peer_errors: bool,
    /// Close revokes every peer's access (see the crate docs).
    revokes: bool,
    /// Rung when a transfer ends: the transport's, once adopted
    /// ([`UcxBackend::adopt_transport`]).
    doorbell: Mutex<Doorbell>,
}

/// A connected peer: an endpoint and the unpacked remote key of its region.
pub struct UcxPeer {
    ucx: Arc<Ucx>,
    ep: ucp_ep_h,
    rkey: ucp_rkey_h,
    base: u64,
    num_blocks: u32,
    /// Set by the endpoint's error callback; owned through a raw `Arc` while the endpoint
    /// exists.
    health: *const PeerHealth,
    /// Posts hold it shared for their whole duration, so `fail_peer` never closes the
    /// endpoint under one; it also fails the transfers posted through it (UCX 1.13's forced
    /// close does not complete flushes already posted on the endpoint).
    link: CuttableLink<ForcedClose, TransferCell>,
    _live: Live,
}

/// What `fail_peer`'s cut did to the endpoint: once cut, `close_peer` leaves the key and
/// endpoint alone (destroyed, or closing by force).
#[derive(Clone, Copy, Default)]
struct ForcedClose {
    /// The forced close finished, so the error-callback state may be freed.
    closed: bool,
}

// SAFETY: the endpoint and remote key belong to a UCS_THREAD_MODE_MULTI worker, which
// serializes every call on them; `health` points to an `Arc` allocation this peer owns.
unsafe impl Send for UcxPeer {}
// SAFETY: as for `Send`; shared references only post operations (serialized by UCX) and read
// atomics.
unsafe impl Sync for UcxPeer {}

struct PeerHealth {
    /// `UCS_OK` while healthy, else the status the error callback reported.
    status: AtomicI8,
    /// Rung when the endpoint fails: a notification awaiting its acknowledgement then fails
    /// at its next check.
    doorbell: Doorbell,
}

/// A posted transfer (or notification).
pub struct UcxXfer {
    shared: Arc<TransferCell>,
    ucx: Arc<Ucx>,
    /// A notification's wait for its acknowledgement.
    ack: Option<notify::Awaited>,
    _live: Live,
}

impl Drop for UcxXfer {
    fn drop(&mut self) {
        if let Some(ack) = &self.ack {
            ack.forget(self.ucx.notifier());
        }
    }
}

impl UcxPeer {
    /// Holds the link for a post (refused once cut) and checks that the endpoint is healthy.
    fn hold(&self) -> Result<LinkHold<'_, ForcedClose, TransferCell>, BackendError> {
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
    fn health_arc(&self) -> Arc<PeerHealth> {
        // SAFETY: `health` came from `Arc::into_raw` and the peer holds that reference until
        // it is dropped, so the count is at least one here; the new reference is the
        // caller's.
        unsafe {
            Arc::increment_strong_count(self.health);
            Arc::from_raw(self.health)
        }
    }
}

/// Ends a transfer with the status of its flush (an error a put or get returned when posted
/// was noted on the cell first, and wins).
fn complete(cell: &TransferCell, status: ucs_status_t) {
    if status != UCS_OK {
        cell.note_failure(errors::reason("transfer", status));
    }
    cell.finish();
}

unsafe extern "C" fn flush_done(
    request: *mut c_void,
    status: ucs_status_t,
    user_data: *mut c_void,
) {
    // SAFETY: `user_data` is the `Arc<TransferCell>` leaked for this flush in `post`; the
    // callback runs once, so it is reclaimed once.
    let shared = unsafe { Arc::from_raw(user_data as *const TransferCell) };
    complete(&shared, status);
    // SAFETY: `request` is this flush's request; UCX allows releasing it in its callback.
    unsafe { ucp_request_free(request) };
}

unsafe extern "C" fn endpoint_failed(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the `PeerHealth` the peer keeps alive until its endpoint is closed.
    let health = unsafe { &*(arg as *const PeerHealth) };
    health.status.store(status, Ordering::Release);
    health.doorbell.ring();
    tracing::warn!(error = %status_string(status), "ucx endpoint failed (remote disconnect)");
}

impl OpenBackend for UcxBackend {
    const KIND: &'static str = KIND;

    /// Opens the backend over `span` with the options in the crate docs.
    ///
    /// # Safety
    ///
    /// The memory `span` describes must stay allocated until this backend, and every peer and
    /// transfer it made, has been dropped: UCX reads and writes it (and remote peers write
    /// into it) until then.
    ///
    /// ```
    /// use blockwire_core::{Backend, OpenBackend, BackendOptions, RegionSpan};
    /// let mut mem = vec![0u8; 2 * 512];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 2, 512).unwrap();
    /// let opts = BackendOptions::new().with("tls", "tcp").with("progress", "caller");
    /// // SAFETY: `mem` outlives the backend.
    /// let b = unsafe { blockwire_ucx::UcxBackend::open(span, opts)? };
    /// assert_eq!(b.kind(), "ucx");
    /// drop(b);
    /// // A TCP send segment larger than a peer on UCX's defaults receives is refused at open.
    /// let opts = BackendOptions::new().with("tls", "tcp").with("tcp_seg_bytes", "1048576");
    /// // SAFETY: as above.
    /// let refused = unsafe { blockwire_ucx::UcxBackend::open(span, opts) };
    /// let e = refused.err().expect("refused");
    /// assert!(matches!(&e, blockwire_core::Error::Open { source, .. }
    ///     if source.kind() == blockwire_core::BackendErrorKind::InvalidOption));
    /// assert!(e.report().contains("tcp_seg_bytes=1048576"), "{}", e.report());
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    unsafe fn open(span: RegionSpan, options: BackendOptions) -> Result<Self, Error> {
        Self::open_memory(Memory::Caller(span), options)
    }
}

impl UcxBackend {
    /// Opens the backend over a region UCX allocates (`ucp_mem_map` with
    /// `UCP_MEM_MAP_ALLOCATE`): `num_blocks` blocks of `block_len` bytes, valid until the
    /// backend (and every peer and transfer it made) is dropped. Returns the region's span.
    /// On shared-memory transports peers write into such memory with true one-sided puts,
    /// where the caller's memory gets software emulation over active messages.
    ///
    /// ```
    /// use blockwire_core::{Backend, OpenBackend, BackendOptions};
    /// let (b, span) = blockwire_ucx::UcxBackend::open_allocated(4, 4096, BackendOptions::new())?;
    /// assert_eq!(span.len(), 4 * 4096);
    /// assert_eq!(b.kind(), "ucx");
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    pub fn open_allocated(
        num_blocks: u32,
        block_len: usize,
        options: BackendOptions,
    ) -> Result<(Self, RegionSpan), Error> {
        if (num_blocks as usize)
            .checked_mul(block_len)
            .is_none_or(|l| l == 0)
        {
            return Err(Error::Region(format!(
                "{num_blocks} blocks of {block_len} bytes is empty or overflows"
            )));
        }
        let memory = Memory::Allocate {
            num_blocks,
            block_len,
        };
        let backend = Self::open_memory(memory, options)?;
        let span = backend.span;
        Ok((backend, span))
    }

    /// Hands arriving notifications to the inbox in `options`, and rings the doorbell in
    /// them when a transfer ends, from now on: for a backend opened before its transport
    /// ([`UcxBackend::open_allocated`], whose region the transport then wraps), with the
    /// options the transport passes to `BlockTransport::open_with`'s closure. Nothing else in
    /// `options` is read.
    ///
    /// ```
    /// use blockwire_core::{BackendOptions, Backend, kit::{Doorbell, Inbox}};
    /// let (b, _span) = blockwire_ucx::UcxBackend::open_allocated(2, 4096, BackendOptions::new())?;
    /// let inbox = Inbox::new(8);
    /// let transport_options = BackendOptions::new()
    ///     .with_identity("t", inbox.clone())
    ///     .with_doorbell(Doorbell::new());
    /// b.adopt_transport(&transport_options);
    /// assert!(b.capabilities().notifications);
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    pub fn adopt_transport(&self, options: &BackendOptions) {
        self.ucx.notifier().set_inbox(options.inbox());
        *self.doorbell.lock() = options.doorbell();
    }

    /// The doorbell its transfers ring.
    fn doorbell(&self) -> Doorbell {
        self.doorbell.lock().clone()
    }

    fn open_memory(memory: Memory, mut options: BackendOptions) -> Result<Self, Error> {
        let open_err = Error::opening(KIND);
        let tls = options.take::<String>("tls").map_err(open_err)?;
        let net_devices = options.take::<String>("net_devices").map_err(open_err)?;
        let progress = match options
            .take::<String>("progress")
            .map_err(open_err)?
            .as_deref()
        {
            None | Some("thread") => ProgressMode::Thread,
            Some("caller") => ProgressMode::Caller,
            Some(other) => {
                return Err(open_err(BackendError::new(
                    BackendErrorKind::InvalidOption,
                    format!("progress={other:?}: expected thread or caller"),
                )));
            }
        };
        let idle_sleep = std::time::Duration::from_micros(
            options
                .take::<u64>("idle_sleep_us")
                .map_err(open_err)?
                .unwrap_or(0),
        );
        let peer_errors = options
            .take::<bool>("peer_errors")
            .map_err(open_err)?
            .unwrap_or(true);
        let tcp_seg_bytes = options.take::<u64>("tcp_seg_bytes").map_err(open_err)?;
        let tuning = tcp_tuning(tls.as_deref(), tcp_seg_bytes).map_err(open_err)?;
        let inbox = options.inbox();
        let doorbell = options.doorbell();
        options.finish(KIND).map_err(open_err)?;
        // A same-host peer writes straight into memory UCX allocated, over any shared-memory
        // transport UCX may choose (see the crate docs).
        let revokes = matches!(memory, Memory::Caller(_)) || tls.as_deref() == Some("tcp");
        let settings = Settings {
            tls,
            net_devices,
            progress,
            idle_sleep,
            tuning,
        };
        let notifier = notify::Notifier::new(inbox);
        let (ucx, base) = Ucx::open(memory, &settings, notifier).map_err(open_err)?;
        tracing::debug!(?settings, peer_errors, ?memory, "ucx backend opened");
        let span = match memory {
            Memory::Caller(span) => Some(span),
            Memory::Allocate {
                num_blocks,
                block_len,
            } => {
                std::ptr::NonNull::new(base).and_then(|b| RegionSpan::new(b, num_blocks, block_len))
            }
        }
        .ok_or_else(|| open_err(BackendError::other("UCX returned no usable region address")))?;
        Ok(UcxBackend {
            span,
            ucx,
            counts: LiveCounts::default(),
            peer_errors,
            revokes,
            doorbell: Mutex::new(doorbell),
        })
    }
}

impl Backend for UcxBackend {
    type Peer = UcxPeer;
    type Xfer = UcxXfer;

    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.read = true;
        c.cross_process = true;
        c.remote_disconnect = self.peer_errors;
        c.revoke = self.revokes;
        c.notifications = true;
        // Its post may move data in the caller's thread (UCX over TCP sends a large put or get inside `ucp_put_nbx`): the
        // transport posts on its posting thread, so the caller never waits for the data.
        c.posts_in_caller = true;
        // Every transfer ends in its cell (its flush's callback, a notification's
        // acknowledgement, a cut), which rings; a failed endpoint rings for the notifications
        // awaiting an acknowledgement. With `progress=caller` nothing ends unless somebody
        // calls `state`.
        c.doorbell = self.ucx.mode == ProgressMode::Thread;
        c
    }

    fn address(&self) -> Vec<u8> {
        UcxAddress {
            worker: self.ucx.worker_address.clone(),
            rkey: self.ucx.rkey.clone(),
            region: RegisteredRegion::of(&self.span),
        }
        .to_bytes()
    }

    fn connect(&self, desc: &PeerDescriptor) -> Result<UcxPeer, BackendError> {
        let addr = UcxAddress::from_bytes(&desc.address)?;
        addr.region.check(desc)?;
        let worker = self.ucx.worker().ok_or_else(revoked)?;
        let health = Arc::into_raw(Arc::new(PeerHealth {
            status: AtomicI8::new(UCS_OK),
            doorbell: self.doorbell(),
        }));
        let params = ucp_ep_params_t {
            field_mask: (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64,
            address: addr.worker.as_ptr().cast(),
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
            link: CuttableLink::new(ForcedClose::default()),
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
        Ok(peer)
    }

    fn disconnect(&self, peer: UcxPeer) {
        close_peer(peer);
    }

    fn post(
        &self,
        peer: &UcxPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<UcxXfer, BackendError> {
        let link = peer.hold()?;
        // Held through the flush: the endpoint and key are the worker's.
        let worker = self.ucx.worker().ok_or_else(revoked)?;
        // Every index is checked before the first operation is posted. Blocks adjacent on
        // both sides are one operation (bounded: UCX sets no practical limit of its own).
        let runs = kit::checked_runs(
            &self.span,
            local,
            remote,
            peer.num_blocks,
            kit::DEFAULT_MAX_RUN_BYTES,
        )?;
        let shared = Arc::new(TransferCell::running().with_doorbell(self.doorbell()));
        let plain = ucp_request_param_t::default();
        for (i, run) in runs.enumerate() {
            // SAFETY: `run.local` is inside the region (checked by `checked_runs`).
            let local_ptr = unsafe { self.span.base().as_ptr().add(run.local) };
            let remote_addr = peer.base + run.remote;
            // SAFETY: the local run is valid for `run.len` bytes until the backend is
            // dropped, which happens only after this transfer is released (every block of it
            // checked inside the region); the remote range lies inside the peer's registered
            // region (every index checked, size checked when the descriptor was validated);
            // the endpoint and key are live.
            let request = unsafe {
                match op {
                    Op::Write => ucp_put_nbx(
                        peer.ep,
                        local_ptr.cast(),
                        run.len,
                        remote_addr,
                        peer.rkey,
                        &plain,
                    ),
                    Op::Read => ucp_get_nbx(
                        peer.ep,
                        local_ptr.cast(),
                        run.len,
                        remote_addr,
                        peer.rkey,
                        &plain,
                    ),
                }
            };
            if UCS_PTR_IS_ERR(request) {
                let status = UCS_PTR_STATUS(request);
                if i == 0 {
                    return Err(errors::error(&format!("posting {op}"), status));
                }
                // Earlier blocks are in flight: flush them, then report the failure.
                shared.note_failure(errors::reason("transfer", status));
                break;
            }
            if UCS_PTR_IS_PTR(request) {
                // The flush below covers its completion; no callback is needed.
                // SAFETY: a request handle returned by the call above, released once.
                unsafe { ucp_request_free(request) };
            }
        }
        let user_data = Arc::into_raw(shared.clone());
        let params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            cb: ucp_request_param_t__bindgen_ty_1 {
                send: Some(flush_done),
            },
            user_data: user_data as *mut c_void,
            ..Default::default()
        };
        // SAFETY: a live endpoint; the callback reclaims `user_data` exactly once.
        let request = unsafe { ucp_ep_flush_nbx(peer.ep, &params) };
        if !UCS_PTR_IS_PTR(request) {
            // Completed (or failed) at once: the callback will not run.
            // SAFETY: reclaims the Arc leaked for the callback that will not run.
            drop(unsafe { Arc::from_raw(user_data) });
            complete(&shared, UCS_PTR_STATUS(request));
        }
        link.track(&shared);
        drop(worker);
        drop(link);
        self.ucx.kick();
        Ok(UcxXfer {
            shared,
            ucx: self.ucx.clone(),
            ack: None,
            _live: self.counts.transfer(),
        })
    }

    fn notify(&self, peer: &UcxPeer, frame: &[u8]) -> Result<UcxXfer, BackendError> {
        notify::send(self, peer, frame)
    }

    fn poll_notifications(&self) {
        // Whatever reached this worker is handed to the inbox now, whether or not a progress
        // thread runs: progress until the worker is idle, bounded (never blocks).
        for _ in 0..POLL_ROUNDS {
            if self.ucx.progress_once() == 0 {
                break;
            }
        }
    }

    fn state(&self, xfer: &mut UcxXfer) -> XferState {
        if xfer.ucx.mode == ProgressMode::Caller {
            xfer.ucx.progress_once();
        }
        if let Some(ack) = &xfer.ack {
            ack.check(&xfer.shared);
        }
        xfer.shared.state()
    }

    fn fail_peer(&self, peer: &UcxPeer) -> bool {
        // Waits for the posts holding the link; later ones are refused once it is marked.
        let mut link = peer.link.write();
        if !peer
            .link
            .mark_cut("no transfer completed for the stall timeout")
        {
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
                // stays, with its operations (for a peer that died, or whose worker was
                // destroyed, they never complete). Their transfers end here so that they
                // surface; the worker, which still holds them, is never destroyed (UCX 1.13
                // crashes destroying a worker with such operations), only never progressed
                // again once revoked.
                tracing::warn!(
                    error = %status_string(status),
                    "ucx: the stalled peer's endpoint cannot be closed (no peer error \
                     handling); its transfers are failed and its operations abandoned"
                );
                self.ucx.abandon();
                fail_posted(peer);
            }
            ForceClose::TimedOut => {}
        }
        true
    }

    fn revoke(&self) {
        self.ucx.revoke();
    }

    fn release(&self, xfer: UcxXfer) -> Result<(), UcxXfer> {
        // UCX cannot cancel an RMA in flight: busy until the flush has completed.
        if !xfer.shared.is_ended() {
            Err(xfer)
        } else {
            Ok(())
        }
    }

    fn stats(&self) -> BackendStats {
        self.counts.stats()
    }
}

/// Most rounds of worker progress one `poll_notifications` makes.
const POLL_ROUNDS: usize = 16;

/// Why a call finds the worker gone.
fn revoked() -> BackendError {
    BackendError::new(
        BackendErrorKind::Unsupported,
        "the transport closed: its UCX worker was destroyed",
    )
}
