//! # blockwire-libfabric: RDM endpoints and one-sided RMA on the system libfabric
//!
//! - **Provider** by option: `shm`, `tcp` (which resolves to `tcp;ofi_rxm`, the default), `net`
//!   (for many peers: see [`provider_named`]). `fi_getinfo`
//!   is asked for `FI_EP_RDM` endpoints with `FI_RMA` and `FI_MSG` (without `FI_MSG` where the
//!   provider has none: then no notifications), a thread-safe domain, and delivery
//!   completion; the provider's `mr_mode` is honoured: local descriptors (`FI_MR_LOCAL`),
//!   virtual addresses or offsets (`FI_MR_VIRT_ADDR`), provider keys (`FI_MR_PROV_KEY`),
//!   registrations bound to the endpoint (`FI_MR_ENDPOINT`).
//! - **Registration**: one `fi_mr_reg` of the whole region (`FI_REMOTE_WRITE | FI_REMOTE_READ`),
//!   with a random key where the provider lets the caller choose (`tcp`, `shm`), so a peer's
//!   descriptor of a closed transport reaches no later one at the same endpoint address; its
//!   key, the addressing mode and the endpoint name go in the descriptor. Adding a peer is one
//!   `fi_av_insert`.
//! - **Transfers**: runs of blocks adjacent on both sides (`kit::checked_runs`; a scattered
//!   block is a run of one), up to `runs_per_op` of them (the provider's iovec limits: 4 on
//!   `shm` and `tcp`) and the endpoint's `max_msg_size` (at most 1 MiB) joined in one
//!   `fi_writemsg` as iovec lists, with `FI_DELIVERY_COMPLETE` (a completion means the bytes
//!   are at the target); READ through `fi_readmsg` the same way, but one run a READ on
//!   `shm` (there a READ of one remote range is one copy inside the post, of several a
//!   command the target serves, at a quarter of the speed). On `shm`, scattered WRITEs of 4
//!   KiB one an operation went one at a time, 0.03 GB/s (the provider's protocol for a WRITE
//!   of at most 4 KiB holds every other command to that peer until the target took it), four
//!   an operation 0.97; over `tcp`, joining took 4 KiB WRITEs from 0.52 to 0.98 GB/s and 256
//!   KiB READs from 2.86 to 4.29 (one bench run each, 16 blocks a transfer, 4 in flight).
//!   Completions are read from the completion queue and routed to their transfer through the
//!   operation context; an error completion (`fi_cq_readerr`) fails the transfer with the
//!   provider's message.
//! - **Progress**: `tcp`, `net` and `shm` use manual data progress, so a thread of the backend
//!   drives it: a passive peer that never polls still receives writes. Where the provider
//!   gives the completion queue a wait object (`tcp`, `net`), the thread blocks in
//!   `epoll_wait` on the wait fds of every queue (the backend's and the peers'), after
//!   `fi_trywait`, and wakes as soon as the sockets have data. Otherwise, or
//!   with `wait=false` (the default on `shm`, where waiting slowed posts down), it reads the
//!   queue, spinning while there is work and backing off to `idle_sleep_us` when idle, woken by
//!   each post. A target's incoming writes produce no completion, so a polling thread cannot
//!   tell they are coming: in the bench, `tcp` WRITEs of 64 KiB blocks reached 0.2 of raw
//!   libfabric while polling and 0.98 while waiting. With `wait_spin_us` the waiting thread
//!   keeps reading its queues that long after they run dry before it sleeps: reading a queue
//!   is what moves a large message's data over `tcp`, so the pieces of a large transfer, on
//!   both sides, no longer wait for a sleeping thread's wake (35 to 60 us on a VM whose idle
//!   CPUs halt). Off by default: on a 2-core VM (the bench, 16 blocks a transfer, 4 in
//!   flight, both transports in one process, two 3-round runs of each setting alternated) 50
//!   us moved 256 KiB WRITEs at 3.96 to 4.43 GB/s against 2.57 to 2.95 without it, 1 MiB at
//!   4.34 to 4.63 against 3.04 to 3.79, 4 MiB at 4.21 to 4.89 against 3.84 to 4.32; 256 KiB
//!   READs at 4.27 to 4.89 against 3.32 to 3.68, 1 and 4 MiB READs about as much; but 4 KiB
//!   WRITEs and READs and 64 KiB READs 10 to 15 % less: both transports' threads spin on the
//!   cores their data needs.
//! - **Teardown**: endpoint, memory registration, address vector, completion queue, domain,
//!   fabric, in that order, when the last peer and transfer are gone (the `shm` provider
//!   leaves files in `/dev/shm` when its endpoints are not closed: a process killed with
//!   `SIGKILL` leaves one per endpoint, which the next `shm` open on the host removes, see
//!   [`reap_stale_shm_files`]).
//! - **Endpoints**: one RDM endpoint receives (its name is in the descriptor). Posts go
//!   through an endpoint of each peer's own (`endpoint_per_peer`, the default wherever the
//!   provider does not bind registrations to endpoints), with its own completion queue and
//!   address vector, served by the same progress thread. Two reasons: libfabric 1.17's `shm`
//!   completes a sender's operations in order from one response queue per endpoint, so on a
//!   shared endpoint a peer killed while owing a response blocks every later completion, to
//!   every peer; and closing a peer's endpoint is the only safe cut of its connection (below).
//!   The cost is opening the endpoint: about 20 us on `shm`, 50 to 200 us on `net`, 7 to 50
//!   ms on `tcp` (`ofi_rxm`'s `fi_enable`). Adding the peer opens only its address vector
//!   (the peer's name checked there); a thread of the backend opens the endpoint right after,
//!   one peer at a time, and the peer's first post opens it if it comes first (on the
//!   transport's posting thread): so `add_remote_peer` takes microseconds (86 us median for
//!   16 peers in the bench's scale mode, against 49 ms when it opened the endpoint), and a
//!   first transfer right after the add waits for the open. With `endpoint_per_peer=false` posts go through the
//!   receiving endpoint, adding a peer is one `fi_av_insert`, and nothing can be cut. On
//!   `shm` a removed peer's endpoint stays open, idle, for the next connection to the same
//!   name: the peer's region keeps a slot for each endpoint that ever reached it, 256 at most,
//!   so a new endpoint per add made a peer removed and added back 256 times unreachable.
//! - **Cut** (`fail_peer`, the transport's stall watchdog): only where no byte can land in the
//!   local region afterwards. On `tcp`/`net`, the peer's endpoint is closed, which closes its
//!   connections (data arriving for them is refused by the kernel); `fi_av_remove` is no cut:
//!   in 1.17 the connection goes on, and READ data landed in the local region after it once a
//!   cut network link came back (`conformance/tests/two_hosts.rs`). On `shm` the provider
//!   copies WRITEs through the target process, so a live peer is never cut (READs it serves
//!   in the initiator's own post, from the target's memory: they hold the target's endpoint
//!   file locked, which its close waits for, see `guard`); one whose process has
//!   exited (watched through a pidfd, the pid being in its endpoint name) is: the first post
//!   to it after it exited is refused and cuts the link, which fails its transfers in flight.
//!   libfabric 1.17's `shm` would otherwise spin forever in `fi_writemsg` to a peer killed
//!   while holding its region's lock. A kill that lands between that check and the provider
//!   taking the lock still leaves one post spinning: in a retry (operations the provider
//!   refused for now, posted by a thread of their own), the progress thread notices it after
//!   a second, fails what was queued for that peer and starts a new retry thread, so other
//!   peers and completions go on; the backend's endpoint then stays open for the process's
//!   lifetime. In a caller's own post (a peer killed within microseconds of it) the call
//!   does not return: a libfabric 1.17 bug blockwire cannot reach. Operations the provider never completes keep their
//!   context allocated until their endpoint closes (the peer's own, with the link; the
//!   backend's, with the backend).
//! - **Notifications** ([`Backend::notify`]): an `fi_sendmsg` of the frame with
//!   `FI_DELIVERY_COMPLETE`, through the peer's endpoint (as its RMA goes) to the endpoint
//!   its descriptor names. That endpoint keeps 64 receive buffers posted (one pool per
//!   backend, about 270 KiB, each the largest frame plus a byte); the progress thread hands
//!   each completed one to the transport's inbox and posts it again, so a passive target
//!   receives them in both settings (`tcp` waiting, `shm` polling). A burst beyond the pool
//!   waits in the provider's unexpected queue. **Delivered** means the target's provider
//!   took the message: on `shm` the send's own completion (libfabric 1.17 completes a
//!   delivery-complete send once the target's progress copied it); on `tcp;ofi_rxm`, which
//!   completes an eager send once it is in the socket (measured: done in 2 ms to a target
//!   process stopped with `SIGSTOP`), the send is followed by a zero-length delivery-complete
//!   write to the same peer, ordered after it (`FI_ORDER_WAS`), whose completion is the
//!   target's acknowledgement. Elsewhere: the probe where the provider orders writes after
//!   sends, else the send's completion, whatever the provider makes of it. Refused posts are
//!   retried, and a cut fails the notification, as for RMA. Not carried where the provider
//!   requires local registrations (`FI_MR_LOCAL`): [`Capabilities::notifications`] says
//!   which. After [`Backend::revoke`] nothing more reaches the inbox; a sender's
//!   notification to a revoked target fails (`tcp`: the connection is gone; `shm`: the link is
//!   cut). The buffers stay posted, and allocated, until the endpoint closes.
//! - **Cancel**: an operation in flight cannot be stopped: [`Capabilities::abort`] is false and
//!   `release` reports busy until every operation of the transfer has completed.
//! - **Memory** (`tcp;ofi_rxm`): each endpoint preposts a shared receive queue of 4,096
//!   buffers of 16 KiB (64 MiB, `FI_OFI_RXM_MSG_RX_SIZE` and `FI_OFI_RXM_BUFFER_SIZE`) and
//!   opens a completion queue of 262,144 entries (12 MiB: its receive depth plus
//!   `FI_UNIVERSE_SIZE`, 1,024, times its connections' transmit depth, 128). The queue's
//!   pages become resident as completions go once around it (about 41 bytes per transfer
//!   for the first 262,144 transfers), then resident memory stays flat
//!   (`conformance/tests/memory.rs`). Each peer's own endpoint has such a queue: with 16
//!   peers, memory grows until each has gone once around its own, up to 12 MiB a peer (the
//!   bench's scale mode, transfers spread over 16 peers: +46 MiB over 1,000,000, +174 MiB
//!   over 6,000,000 and +160 MiB over 12,000,000: bounded; runs 1796396952 and 1796397189).
//!   Those are libfabric's process-wide environment
//!   settings, read at its first call: set them lower before starting a process that opens
//!   many peers.
//!
//! ## Options
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `provider` | `tcp` | `shm`, `tcp` (`tcp;ofi_rxm`), `net`, or any provider name `fi_info` lists |
//! | `domain` | the provider's first | the domain (for `tcp`/`net`: the interface, e.g. `lo`) |
//! | `wait` | `true` but on `shm` | block on the completion queue's wait object where the provider has one |
//! | `endpoint_per_peer` | `true` unless the provider binds registrations to endpoints | post to each peer through an endpoint of its own (see **Endpoints**) |
//! | `runs_per_op` | the provider's limit (4 on `shm`, `tcp`) | the most runs of blocks one RMA carries (1: one operation a run; READs on `shm` always 1); more than the provider takes counts as its limit |
//! | `idle_sleep_us` | 100 | longest sleep of an idle polling progress thread: a passive target's latency against its CPU use |
//! | `wait_spin_us` | 0 | how long a waiting progress thread keeps reading its queues after they run dry before it sleeps (at most 1,000,000; nothing where the thread polls: `shm`, `wait=false`); see **Progress** |
//! | `reap_stale_files` | `true` | on `shm`, first remove the files of dead processes from `/dev/shm` ([`reap_stale_shm_files`]); `false` where `/dev/shm` is shared with processes of another pid namespace |
//!
//! ```
//! use blockwire_core::{Backend, OpenBackend, BackendOptions, Op, PeerDescriptor, RegionSpan, XferState};
//! use blockwire_libfabric::OfiBackend;
//! use std::ptr::NonNull;
//!
//! let mut a = vec![7u8; 4 * 1024];
//! let mut b = vec![0u8; 4 * 1024];
//! let span = |v: &mut Vec<u8>| RegionSpan::new(NonNull::new(v.as_mut_ptr()).unwrap(), 4, 1024).unwrap();
//! let opts = || BackendOptions::new().with("provider", "tcp").with("domain", "lo");
//! // SAFETY: both vectors outlive both backends and are not accessed while they run.
//! let (ba, bb) = unsafe {
//!     (OfiBackend::open(span(&mut a), opts())?, OfiBackend::open(span(&mut b), opts())?)
//! };
//! let desc = PeerDescriptor::new("libfabric", bb.address(), b.as_ptr() as u64, 4, 1024, "");
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
mod completion;
mod cq;
mod endpoint;
mod errors;
mod fabric;
mod guard;
mod link;
mod local;
mod notify;
mod op;
mod open;
mod opener;
mod post;
mod reap;
mod recv;
mod retry;

pub use link::MAX_IDLE_ENDPOINTS;
pub use open::provider_named;
pub use reap::{ReapReport, reap_stale_shm_files};

use std::sync::Arc;

use blockwire_core::kit::{self, Doorbell, Live, LiveCounts};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendStats, BlockIndex, Capabilities, Op,
    PeerDescriptor, RegionSpan, RegisteredRegion, XferState,
};

use address::OfiAddress;
use completion::Transfer;
use fabric::Fabric;
use link::{Link, Links};
use op::{Part, RmaOp, Verb};
use opener::Opener;
use parking_lot::Mutex;

/// The backend kind written in descriptors.
///
/// ```
/// assert_eq!(blockwire_libfabric::KIND, "libfabric");
/// ```
pub const KIND: &str = "libfabric";

/// The libfabric backend (see the crate docs).
pub struct OfiBackend {
    /// Opens the peers' own endpoints in the background, started by the first peer that has
    /// one (`crate::opener`). First: joined before the rest goes.
    opener: Mutex<Option<Opener>>,
    span: RegionSpan,
    fabric: Arc<Fabric>,
    counts: LiveCounts,
    /// The remote endpoints, one address-vector entry each.
    links: Links,
    /// Rung by every transfer's cell when it ends.
    doorbell: Doorbell,
}

/// A connected peer: the link to its endpoint and the key of its region.
pub struct OfiPeer {
    /// Keeps the address vector its link's entry lives in open.
    _fabric: Arc<Fabric>,
    link: Arc<Link>,
    key: u64,
    base: u64,
    num_blocks: u32,
    virt: bool,
    _live: Live,
}

/// A posted transfer.
pub struct OfiXfer {
    transfer: Arc<Transfer>,
    _fabric: Arc<Fabric>,
    _live: Live,
}

impl OfiBackend {
    /// The provider in use (`shm`, `net`, `tcp;ofi_rxm`, ...).
    ///
    /// ```
    /// use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
    /// let mut mem = vec![0u8; 512];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 1, 512).unwrap();
    /// // SAFETY: `mem` outlives the backend.
    /// let b = unsafe { blockwire_libfabric::OfiBackend::open(span, BackendOptions::new())? };
    /// assert_eq!(b.provider(), "tcp;ofi_rxm");
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    pub fn provider(&self) -> &str {
        &self.fabric.provider
    }

    /// What `fi_getinfo` granted: provider, domain, `mr_mode` flags, progress modes.
    ///
    /// ```
    /// use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
    /// let mut mem = vec![0u8; 512];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 1, 512).unwrap();
    /// // SAFETY: `mem` outlives the backend.
    /// let b = unsafe { blockwire_libfabric::OfiBackend::open(span, BackendOptions::new().with("provider", "shm"))? };
    /// assert!(b.attributes().contains("mr_mode"));
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    pub fn attributes(&self) -> &str {
        &self.fabric.attributes
    }

    /// Has the opener thread open `link`'s own endpoint (started here the first time). If
    /// the thread cannot start, the peer's first post opens it.
    fn open_soon(&self, link: &Arc<Link>) {
        let mut opener = self.opener.lock();
        if opener.is_none() {
            match Opener::start(&self.fabric) {
                Ok(started) => *opener = Some(started),
                Err(e) => tracing::warn!(error = %e, "libfabric: endpoints open at first post"),
            }
        }
        if let Some(opener) = opener.as_ref() {
            opener.open_soon(link);
        }
    }

    /// The handle of a transfer just posted.
    fn xfer(&self, transfer: Arc<Transfer>) -> OfiXfer {
        OfiXfer {
            transfer,
            _fabric: self.fabric.clone(),
            _live: self.counts.transfer(),
        }
    }
}

impl Backend for OfiBackend {
    type Peer = OfiPeer;
    type Xfer = OfiXfer;

    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.read = true;
        c.cross_process = true;
        // The shm provider's target must progress commands: a vanished peer leaves transfers
        // to it running. Connection-based providers report the peer's end as an error.
        c.remote_disconnect = !self.fabric.provider.starts_with("shm");
        // A connection (tcp) or a region (shm) per peer: the dead-peer check, on every
        // provider, holds another peer's transfers to this.
        c.isolates_peers = true;
        c.revoke = true;
        c.notifications = self.fabric.carrier.is_some();
        // Its post may move data in the caller's thread (the tcp provider writes a large message to the socket inside `fi_writemsg`): the
        // transport posts on its posting thread, so the caller never waits for the data.
        c.posts_in_caller = true;
        // Every transfer ends in its cell (its last operation's completion, a cut, an
        // endpoint closed under it), which rings.
        c.doorbell = true;
        c
    }

    fn address(&self) -> Vec<u8> {
        OfiAddress {
            provider: self.fabric.provider.clone(),
            name: self.fabric.name.clone(),
            key: self.fabric.key,
            virt: self.fabric.virt,
            region: RegisteredRegion::of(&self.span),
        }
        .to_bytes()
    }

    fn connect(&self, desc: &PeerDescriptor) -> Result<OfiPeer, BackendError> {
        let addr = OfiAddress::from_bytes(&desc.address)?;
        addr.region.check(desc)?;
        if self.fabric.is_revoked() {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                "the transport closed: its libfabric endpoint is revoked",
            ));
        }
        let bad = |why: String| BackendError::new(BackendErrorKind::MalformedAddress, why);
        if addr.provider != self.fabric.provider {
            return Err(bad(format!(
                "the peer uses provider {:?}, this side {:?}",
                addr.provider, self.fabric.provider
            )));
        }
        // One link per endpoint name: a peer added again (replaced, or re-added after a
        // remove) shares it, unless it was cut.
        let link = self.links.acquire(&self.fabric, &addr.name)?;
        if self.fabric.endpoint_per_peer {
            self.open_soon(&link);
        }
        Ok(OfiPeer {
            _fabric: self.fabric.clone(),
            link,
            key: addr.key,
            base: desc.base_addr,
            num_blocks: desc.num_blocks,
            virt: addr.virt,
            _live: self.counts.peer(),
        })
    }

    fn disconnect(&self, peer: OfiPeer) {
        self.links.release(&self.fabric, &peer.link);
    }

    fn post(
        &self,
        peer: &OfiPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<OfiXfer, BackendError> {
        // Every index is checked before the first operation is posted. Blocks adjacent on
        // both sides are one run, and up to `runs_per_op` runs one RMA, at most the
        // endpoint's message size (`crate::op`).
        let max_bytes = self.fabric.max_run_bytes;
        let runs_per_op = match op {
            Op::Write => self.fabric.runs_per_write,
            Op::Read => self.fabric.runs_per_read,
        };
        let runs = kit::checked_runs(&self.span, local, remote, peer.num_blocks, max_bytes)?;
        let (base, virt) = (peer.base, peer.virt);
        let ops = op::join_runs(
            op.into(),
            runs,
            self.span.base().as_ptr(),
            |offset| if virt { base + offset } else { offset },
            peer.key,
            runs_per_op,
            max_bytes,
        );
        let fabric = &self.fabric;
        let transfer = Transfer::new(&self.doorbell);
        // SAFETY: the link's endpoint (or the backend's) is live while the link is held; the
        // local blocks stay valid until the backend is dropped, after this transfer is
        // released; the remote ranges lie inside the peer's registered region (indices
        // checked, size validated in its descriptor).
        unsafe { post::submit(fabric, &peer.link, &transfer, ops) }?;
        Ok(self.xfer(transfer))
    }

    fn notify(&self, peer: &OfiPeer, frame: &[u8]) -> Result<OfiXfer, BackendError> {
        // Where the carrier has a probe: a zero-length WRITE at the start of the peer's region.
        let start = Part {
            local: self.span.base().as_ptr(),
            remote: if peer.virt { peer.base } else { 0 },
            len: 0,
        };
        let probe = RmaOp::single(Verb::Write, start, peer.key);
        let ops = notify::operations(&self.fabric, frame, probe)?;
        let transfer = Transfer::carrying(frame.into(), &self.doorbell);
        // SAFETY: as in `post`: the send reads the transfer's own payload; the probe is a
        // zero-length write at the start of the peer's registered region.
        unsafe { post::submit(&self.fabric, &peer.link, &transfer, ops) }?;
        Ok(self.xfer(transfer))
    }

    fn state(&self, xfer: &mut OfiXfer) -> XferState {
        xfer.transfer.cell.state()
    }

    fn fail_peer(&self, peer: &OfiPeer) -> bool {
        peer.link.cut_if_safe(&self.fabric)
    }

    fn revoke(&self) {
        self.fabric.revoke();
        // The idle peer endpoints (`shm`) close now, not when the backend is dropped, which a
        // transfer held past close delays (and one released after this closes at once).
        self.links.close_idle();
    }

    fn release(&self, xfer: OfiXfer) -> Result<(), OfiXfer> {
        if xfer.transfer.cell.is_ended() {
            Ok(())
        } else {
            Err(xfer)
        }
    }

    fn stats(&self) -> BackendStats {
        self.counts.stats()
    }
}
