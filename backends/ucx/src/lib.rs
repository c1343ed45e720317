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
//! - **Connect checks whom it reached**: each worker has a random identity, which its
//!   descriptors carry; connect asks the worker at the descriptor's address for it (an active
//!   message its handler answers) before the peer exists, so a descriptor of a closed
//!   transport whose TCP port another worker took is refused (a remote disconnect) instead of
//!   having its WRITEs copied to the closed region's address (UCX serves an emulated put
//!   without checking the key). Connect then includes the endpoint's wireup, which the first
//!   transfer used to pay, and a round trip: 0.7 to 1.2 ms to a new worker on the
//!   development machine, 0.1 ms through an idle endpoint kept from an earlier peer. A
//!   worker that does not answer (a stopped process) fails the connect after 5 s, meanwhile
//!   holding the transport's registration worker (later adds queue behind it); removing or
//!   adding the peer again stops that wait at once, and so does the transport's close,
//!   which then takes about 2 s, as the worker's
//!   teardown waits that long for what it queued for the silent peer and then leaves the
//!   worker undestroyed, never progressed again (`stopped_peer` across processes). A target
//!   opened with `progress=caller` answers only while polled, so its descriptors say so and
//!   it is not checked.
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
//! - **Disconnect**: a healthy endpoint is not closed but kept, idle, and the next connection
//!   to the same worker takes it again (a failed one is closed by force): UCX 1.13 destroys an
//!   endpoint closed gracefully only with its worker while the peer lives, so every add and
//!   remove of a live peer left a socket at both ends (or, over shared memory, 46 KB), and a
//!   forced close resets the peer's own registration of this transport, which UCX pairs with
//!   it on one connection. See `idle.rs`; `blockwire_conformance::churn` checks it.
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
//! | `peer_errors` | `true` | endpoints use `UCP_ERR_HANDLING_MODE_PEER`, so a dead peer fails transfers; UCX 1.13 then uses only transports that can detect peer failure, which excludes its shared-memory transports (`posix`, `sysv`, `self`): set `false` to use them, at the price of no disconnect detection ([`Capabilities::remote_disconnect`] is then false) and of no isolation between peers ([`Capabilities::isolates_peers`]: a peer process killed while it sends to this one, a READ's data or a WRITE's completion, can stop every peer's transfers until the transport is reopened; and a stalled peer that is still running, or whose process cannot be watched, is cut by halting the whole worker, so that it cannot answer a READ reported failed into the region: every later transfer fails until the transport is reopened, see `SECURITY.md`) |
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
mod idle;
mod notify;
mod peer;
mod post;
mod tuning;
mod worker;

use std::sync::Arc;

use blockwire_core::kit::{Doorbell, Live, LiveCounts, TransferCell};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendOptions, BackendStats, BlockIndex,
    Capabilities, Error, Op, OpenBackend, PeerDescriptor, RegionSpan, RegisteredRegion, XferState,
};
use parking_lot::Mutex;

use address::UcxAddress;
use endpoint::close_peer;
pub use peer::UcxPeer;
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
        // Without peer error handling UCX 1.13 uses its shared-memory transports, where every
        // peer's messages to this worker (a READ's data, every WRITE's completion: UCX
        // emulates RMA on them with active messages) share one receive queue, and a peer
        // killed while it writes a message there blocks that queue for good.
        c.isolates_peers = self.peer_errors;
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
            identity: self.ucx.notifier().identity(),
            answers: self.ucx.mode == ProgressMode::Thread,
            pid: self.ucx.process.0,
            start: self.ucx.process.1,
        }
        .to_bytes()
    }

    fn connect(&self, desc: &PeerDescriptor) -> Result<UcxPeer, BackendError> {
        self.connect_peer(desc)
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
        self.post_runs(peer, op, local, remote)
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
        self.cut_peer(peer)
    }

    fn revoke(&self) {
        self.ucx.revoke();
    }

    fn stop_connecting(&self) {
        self.ucx.stop_connecting();
    }

    fn cancel_connect(&self) {
        self.ucx.cancel_connect();
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
