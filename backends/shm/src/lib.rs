//! # blockwire-shm: the shared-memory loopback data path
//!
//! Moves blocks between transports on one host, in one process or across processes, with no
//! native dependency. It is blockwire's default backend and the reference the conformance suite
//! is first proven on.
//!
//! ## How bytes move
//!
//! - **Same process**: a direct copy between the two regions, with streaming (non-temporal)
//!   stores on x86_64 (option `copy_kernel`; see below). The peer's region is found
//!   through a process-wide registry of live regions (the address carries a token), and each
//!   chunk is copied while the region is pinned as registered; a transport that closes
//!   deregisters its region first, so later chunks fail with a remote disconnect instead of
//!   writing freed memory (the role a remote key's invalidation plays in RDMA).
//! - **Across processes, a region in shared memory** (`Region::new_shared` in `blockwire`, or
//!   `open_allocated("shm", ..)`): the region is a shared mapping of a sealed memfd. The
//!   peer duplicates the memfd (`pidfd_getfd`), checks its seals and size, maps it, and
//!   copies straight into it with the same streaming copy as in one process: memory speed,
//!   no system call per chunk. The size is sealed, so the mapping never faults whatever the
//!   region's process does. Option `map_peers=false` makes a backend use `process_vm_*`
//!   even then.
//! - **Across processes, any other region**: `process_vm_writev` (WRITE) and
//!   `process_vm_readv` (READ) on the peer's pid and the addresses from its descriptor.
//!
//! Either way the peer process is pinned by a pidfd and identified by its start time as well
//! as its pid, so a pid reused by another process is never written to; its exit is detected
//! before every chunk (and reported by the kernel as `ESRCH`), and fails the transfer as a
//! remote disconnect.
//!
//! Why `process_vm_*` for the other regions: it works on any memory, including a KV cache the
//! caller allocated ([`Region::from_raw_parts`] in `blockwire`), where a shared mapping needs
//! the region to be allocated in shared memory; and it leaves nothing behind when a process
//! dies (memfds are anonymous: no files in `/dev/shm`). The price: the kernel pins the
//! peer's pages on every call, and the copy runs at about 0.65 of a shared mapping's. Both
//! ways need the same permission: the kernel allows `process_vm_*` and `pidfd_getfd` only
//! between processes of the same user with ptrace access
//! (`/proc/sys/kernel/yama/ptrace_scope` 0; scope 1 allows only ancestors). `connect` reads an
//! identity record the peer's backend keeps at an address named in its descriptor (magic,
//! region token, base, length, lease and region memfds) and probes the region: it fails with
//! a clear [`BackendErrorKind::PermissionDenied`] error when the kernel refuses, and with
//! [`BackendErrorKind::MalformedAddress`] when the descriptor names no region that process
//! registered, so a descriptor cannot aim writes at arbitrary memory of another process.
//!
//! A peer that mapped a shared region keeps its pages (not the region process's address
//! range) until it removes that transport or exits: the region's memory returns to the
//! system only then.
//!
//! ## Revocation
//!
//! `close` revokes every peer's access before it returns ([`Capabilities::revoke`]). In this
//! process, the region leaves the registry (a chunk being copied is waited out, later chunks
//! fail). Across processes, where nothing in the kernel would stop `process_vm_writev`, each
//! region has a lease: one sealed memfd page whose descriptor the identity record names, which
//! a connecting peer duplicates (`pidfd_getfd`) and maps: a close fence
//! (`blockwire_core::kit::fence`). A peer counts itself in on its slot of the page around
//! every chunk and checks the closed mark first; close sets the mark and waits (up to a
//! second) for the copies counted in by peers whose process is alive. Either way the peer's transfer then fails as a
//! remote disconnect, and nothing lands in, or is read from, the region after close.
//!
//! Measured on the development machine (2 cores, one run, 256 MiB working set, best of five
//! passes): `process_vm_writev` into another process moved 3.8, 4.3, 4.4 and 4.9 GB/s with
//! 64 KiB, 256 KiB, 1 MiB and 4 MiB per call, where a `memcpy` into a shared mapping moved
//! 6.1 to 6.9 GB/s over the same sizes. `cargo run --release -p blockwire-bench --
//! --cross-process --allocate --backends shm` measures the mapped path against the memory
//! ceiling in the same run.
//!
//! **Huge pages for shared memory.** Both the region's process and the mapping peer ask for
//! transparent huge pages (`madvise`); the kernel gives them to shared memory only where
//! `/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows (`advise` or `always`; some
//! distributions default to `never`), and otherwise maps 4 KiB pages, which copy slower. On a
//! 2-core VM, across two processes with 256 KiB to 4 MiB blocks, three rounds each, minutes
//! apart: `never` moved 22.2 to 29.3 GB/s (0.63 to 0.84 of the private-memory ceiling),
//! `advise` 28.9 to 33.2 (0.80 to 0.91). Since a waiting caller copies too (`assist_bytes`),
//! the two measured level on a later VM of the same kind (`never` 0.80 to 0.89, `advise` 0.72
//! to 0.89, alternated: `docs/performance.md`).
//!
//! [`Region::from_raw_parts`]: https://docs.rs/blockwire
//!
//! ## Transfers
//!
//! `post` returns at once; the copy runs on the backend's own threads (`copy_threads`), in
//! chunks of at most `chunk_bytes` (several small blocks share a chunk, a large block spans
//! several), so a transfer is observable as running and an abort (cancel, remove, close) takes
//! effect between chunks. A chunk in flight always completes: once `release` succeeds no byte
//! of the transfer lands.
//!
//! A caller waiting in `poll_wait` with nothing to report yet lends its thread before it sleeps
//! ([`Backend::assist`]): it copies the first queued transfer itself, when that is at most
//! `assist_bytes` and fits its deadline at a byte a nanosecond, then reports what ended. Waking
//! the caller for each transfer cost it about 40 µs of CPU (half in the context switch) on a
//! 2-core VM, taken from the copy threads; copying instead, shm moved 0.89 to 0.93 of the
//! memory ceiling at 256 KiB blocks (16 per transfer, 4 in flight) against 0.75 to 0.79, and
//! 0.80 to 0.84 at 64 KiB against 0.66 to 0.69. The price is the tail of a transfer's
//! completion where the copy threads already have every core: three threads then share two, and
//! a copy thread waits out the caller's time slice (p99 from submit to done 4.5 to 4.8 ms at
//! 256 KiB against 1.2). A transfer the caller copies for another peer delays what it reports
//! for its own by that copy (at most about a millisecond at the default). `poll`, which never
//! waits, copies nothing.
//!
//! ## Options
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `copy_threads` | min(4, cores) | threads copying; one transfer is copied by one thread |
//! | `chunk_bytes` | 262144 | bytes copied between two checks for abort and peer liveness |
//! | `idle_spin_us` | `0` | how long a copy thread that finished a transfer spins for the next before it sleeps ([`blockwire_core::kit::HandOff`]): a submit that comes within it wakes no thread (waking one took 35 to 60 µs on a VM whose idle CPUs halt). Measured there with one transfer of 16 blocks in flight: 100 µs cut the 64 KiB submit from 13 to 2 µs on average, but moved 5 to 10 % less and finished each transfer about 8 µs later (1 MiB: 3 % more), and changed nothing with 4 in flight; it costs a core for that long after each transfer; at most 1,000,000 |
//! | `assist_bytes` | 16777216 | the largest transfer a caller waiting in `poll_wait` copies itself instead of sleeping (see above); `0`: it only sleeps |
//! | `copy_kernel` | `auto` | copies in user space (one process, or a mapped peer region): `stream` (non-temporal stores, x86_64), `plain` (`memmove`); `auto` streams where it can |
//! | `map_peers` | `true` | map a peer process's region when it lives in shared memory; `false`: always `process_vm_*` |
//!
//! ## The copy kernel
//!
//! Block copies write memory this CPU will not read again soon, over working sets larger than
//! its caches. Plain stores read each destination cache line before overwriting it (three
//! memory accesses per line moved); streaming stores write whole lines straight to memory (two),
//! and the C library's `memcpy` uses them only for single copies of several MiB, never for
//! chunks of 256 KiB. So on x86_64 every in-process piece of 16 KiB or more is copied with
//! streaming stores (AVX2 where the CPU has it, SSE2 otherwise), its unaligned head and tail
//! with plain ones, and each chunk ends with an `sfence` before the peer region's pin is
//! released and before completion is published: a close sees every byte of a chunk in flight
//! landed, and a poller that sees a transfer done sees all of its bytes. Overlapping ranges (a
//! transport that is its own peer) and small pieces use `memmove`. Copies into a mapped peer
//! region use the same kernel (the fence comes before the chunk counts out of the lease);
//! `process_vm_*` copies are the kernel's and unaffected.
//!
//! ```
//! use blockwire_core::{Backend, OpenBackend, BackendOptions, Op, RegionSpan, XferState};
//! use blockwire_shm::ShmBackend;
//! use std::ptr::NonNull;
//!
//! let mut a = vec![7u8; 4 * 1024];
//! let mut b = vec![0u8; 4 * 1024];
//! let span = |v: &mut Vec<u8>| RegionSpan::new(NonNull::new(v.as_mut_ptr()).unwrap(), 4, 1024).unwrap();
//! // SAFETY: both vectors outlive both backends and are not accessed while they run.
//! let (ba, bb) = unsafe {
//!     (blockwire_shm::ShmBackend::open(span(&mut a), BackendOptions::new())?,
//!      blockwire_shm::ShmBackend::open(span(&mut b), BackendOptions::new())?)
//! };
//! let desc = blockwire_core::PeerDescriptor::new("shm", bb.address(), b.as_ptr() as u64, 4, 1024, "");
//! let peer = ba.connect(&desc)?;
//! let mut x = ba.post(&peer, Op::Write, &[0], &[3])?;
//! while ba.state(&mut x) == XferState::Running {}
//! assert!(ba.release(x).is_ok());
//! drop((peer, ba, bb));
//! assert_eq!(b[3 * 1024], 7);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod address;
mod chunks;
mod connect;
mod copier;
mod lease;
mod live;
mod mapping;
mod memcopy;
mod notify;
mod open;
mod process;

pub use memcopy::copy_fast;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockwire_core::kit::{Doorbell, Live, LiveCounts};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendStats, BlockIndex, Capabilities, Op,
    PeerDescriptor, RegionSpan, XferState,
};

use address::ShmAddress;
use connect::LiveIdentity;
use copier::{CopyPool, CopyTransfer, Job, Target, Work};
use lease::Lease;
use live::LiveRegion;
use mapping::SharedRegion;
use process::Piece;

/// The backend kind written in descriptors.
///
/// ```
/// assert_eq!(blockwire_shm::KIND, "shm");
/// ```
pub const KIND: &str = "shm";
/// Default of the `chunk_bytes` option.
///
/// ```
/// assert_eq!(blockwire_shm::DEFAULT_CHUNK_BYTES, 256 * 1024);
/// ```
pub const DEFAULT_CHUNK_BYTES: usize = 256 * 1024;
/// Default of the `assist_bytes` option: the largest transfer a caller waiting in
/// `poll_wait` copies itself instead of sleeping (about a millisecond of one thread's copy).
///
/// ```
/// assert_eq!(blockwire_shm::DEFAULT_ASSIST_BYTES, 16 * 1024 * 1024);
/// ```
pub const DEFAULT_ASSIST_BYTES: usize = 16 * 1024 * 1024;
/// Default of the `idle_spin_us` option: how long a copy thread that finished a transfer
/// spins for the next before it sleeps (none: see the option's trade-off in the crate docs).
///
/// ```
/// assert_eq!(blockwire_shm::DEFAULT_IDLE_SPIN, std::time::Duration::ZERO);
/// ```
pub const DEFAULT_IDLE_SPIN: std::time::Duration = std::time::Duration::ZERO;

/// The shared-memory loopback backend (see the crate docs).
///
/// ```
/// use blockwire_core::{Backend, OpenBackend, BackendOptions, RegionSpan};
/// use blockwire_shm::ShmBackend;
/// let mut mem = vec![0u8; 2 * 64];
/// let base = std::ptr::NonNull::new(mem.as_mut_ptr()).expect("a vector is never null");
/// let span = RegionSpan::new(base, 2, 64).expect("a valid shape");
/// // SAFETY: `mem` outlives the backend and is not touched while it runs.
/// let b = unsafe { blockwire_shm::ShmBackend::open(span, BackendOptions::new())? };
/// assert_eq!(b.kind(), blockwire_shm::KIND);
/// let caps = b.capabilities();
/// assert!(caps.read && caps.abort && caps.cross_process);
/// assert_eq!(b.stats().connected_peers, 0);
/// # Ok::<(), blockwire_core::Error>(())
/// ```
pub struct ShmBackend {
    span: RegionSpan,
    live: Arc<LiveRegion>,
    address: ShmAddress,
    counts: LiveCounts,
    /// What a connecting peer in another process reads to check a descriptor (its address is
    /// in the descriptor). Wiped by `revoke`.
    identity: Box<LiveIdentity>,
    /// Peer processes' copies count themselves in here (see the crate docs).
    lease: Lease,
    /// The memfd of a region in shared memory, which peer processes map (kept open for them
    /// to duplicate while the backend lives).
    _shared: Option<SharedRegion>,
    /// Whether this backend maps peers' regions in shared memory (option `map_peers`).
    map_peers: bool,
    /// Receives notifications from other processes; stopped by `revoke`.
    listener: notify::Listener,
    /// Dropped after `Drop::drop` deregistered the region; joins the copy threads.
    pool: CopyPool,
    /// The largest transfer a caller waiting in `poll_wait` copies itself (`assist_bytes`).
    assist_bytes: usize,
    /// Rung by every transfer's cell when it ends.
    doorbell: Doorbell,
}

/// A connected peer.
///
/// ```
/// use blockwire_core::{Backend, OpenBackend, BackendOptions, PeerDescriptor, RegionSpan};
/// use blockwire_shm::{ShmBackend, ShmPeer};
/// let mut mem = vec![0u8; 2 * 64];
/// let base = std::ptr::NonNull::new(mem.as_mut_ptr()).expect("a vector is never null");
/// let span = RegionSpan::new(base, 2, 64).expect("a valid shape");
/// // SAFETY: `mem` outlives the backend and is not touched while it runs.
/// let b = unsafe { blockwire_shm::ShmBackend::open(span, BackendOptions::new())? };
/// let desc = PeerDescriptor::new("shm", b.address(), span.base_addr(), 2, 64, "");
/// let peer: ShmPeer = b.connect(&desc)?; // its own region: a same-process peer
/// assert_eq!(b.stats().connected_peers, 1);
/// b.disconnect(peer);
/// assert_eq!(b.stats().connected_peers, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ShmPeer {
    target: Arc<Target>,
    base: usize,
    num_blocks: u32,
    _live: Live,
}

/// A posted transfer.
///
/// ```
/// use blockwire_core::{Backend, OpenBackend, BackendOptions, Op, PeerDescriptor, RegionSpan, XferState};
/// use blockwire_shm::{ShmBackend, ShmXfer};
/// let mut mem = vec![5u8; 64];
/// mem.resize(2 * 64, 0);
/// let base = std::ptr::NonNull::new(mem.as_mut_ptr()).expect("a vector is never null");
/// let span = RegionSpan::new(base, 2, 64).expect("a valid shape");
/// // SAFETY: `mem` outlives the backend and is not touched while it runs.
/// let b = unsafe { blockwire_shm::ShmBackend::open(span, BackendOptions::new())? };
/// let peer = b.connect(&PeerDescriptor::new("shm", b.address(), span.base_addr(), 2, 64, ""))?;
/// let mut x: ShmXfer = b.post(&peer, Op::Write, &[0], &[1])?; // block 0 to block 1
/// while b.state(&mut x) == XferState::Running {}
/// assert!(b.release(x).is_ok());
/// drop((peer, b));
/// assert_eq!(&mem[64..], &[5u8; 64]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ShmXfer {
    transfer: Arc<CopyTransfer>,
    _live: Live,
}

impl ShmBackend {
    /// Revokes every peer's access (idempotent): see the crate docs.
    fn revoke_access(&self) {
        // Copies from this process wait for a chunk in progress, then fail.
        self.live.deregister();
        // Copies from other processes: none starts once this returns.
        // Past the fence's bound (a peer process stopped inside a chunk) the fence says so
        // at `error` level, and the close goes on.
        let _ = self.lease.revoke();
        // A peer in another process that connects later finds no identity.
        self.identity.magic.store(0, Ordering::SeqCst);
        // And notifications from other processes find no socket.
        self.listener.stop();
    }
}

impl ShmBackend {
    fn submit(&self, op: Op, peer: &ShmPeer, work: Work) -> Result<ShmXfer, BackendError> {
        let transfer = CopyTransfer::new(self.doorbell.clone());
        self.pool.submit(Job {
            transfer: transfer.clone(),
            op,
            target: peer.target.clone(),
            bytes: work.bytes(),
            work,
        })?;
        Ok(ShmXfer {
            transfer,
            _live: self.counts.transfer(),
        })
    }
}

impl Drop for ShmBackend {
    fn drop(&mut self) {
        // Peers copying into this region stop before it can be freed; then `pool` joins the
        // copy threads.
        self.revoke_access();
    }
}

impl Backend for ShmBackend {
    type Peer = ShmPeer;
    type Xfer = ShmXfer;

    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.read = true;
        c.abort = true;
        c.cross_process = true;
        c.remote_disconnect = true;
        // Each peer's copies are this process's own system calls or its own mapping of the
        // peer's region: nothing one peer writes is on another's path.
        c.isolates_peers = true;
        c.revoke = true;
        c.notifications = true;
        // A post only hands a job to the copy threads: it is cheap in the caller's thread.
        c.posts_in_caller = false;
        // Every transfer ends in its cell, which rings.
        c.doorbell = true;
        c
    }

    fn address(&self) -> Vec<u8> {
        self.address.to_bytes()
    }

    fn connect(&self, desc: &PeerDescriptor) -> Result<ShmPeer, BackendError> {
        let addr = ShmAddress::from_bytes(&desc.address)?;
        let bad =
            |what: &str| BackendError::new(BackendErrorKind::MalformedAddress, what.to_owned());
        let region_len = desc
            .region_len()
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| bad("region size overflows"))?;
        let base = usize::try_from(desc.base_addr).map_err(|_| bad("base address overflows"))?;
        base.checked_add(region_len)
            .ok_or_else(|| bad("region end overflows"))?;
        let target = if addr.pid == self.address.pid && addr.start_time == self.address.start_time {
            self.connect_local(desc, addr.token)?
        } else {
            self.connect_remote(desc, addr, region_len)?
        };
        Ok(ShmPeer {
            target: Arc::new(target),
            base,
            num_blocks: desc.num_blocks,
            _live: self.counts.peer(),
        })
    }

    fn disconnect(&self, peer: ShmPeer) {
        drop(peer);
    }

    fn post(
        &self,
        peer: &ShmPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<ShmXfer, BackendError> {
        let local_base = self.span.base().as_ptr() as usize;
        // Blocks adjacent on both sides are one run; the copy thread cuts runs into chunks
        // (which bound each copy, so runs need no bound of their own). The post's cost grows
        // with the runs, never with the bytes.
        let runs = blockwire_core::kit::checked_runs(
            &self.span,
            local,
            remote,
            peer.num_blocks,
            usize::MAX,
        )?;
        // In range of a region whose end was checked to fit at connect.
        let runs: Vec<Piece> = runs
            .map(|run| Piece {
                local: local_base + run.local,
                remote: peer.base + run.remote as usize,
                len: run.len,
            })
            .collect();
        self.submit(op, peer, Work::Copy(runs))
    }

    fn notify(&self, peer: &ShmPeer, frame: &[u8]) -> Result<ShmXfer, BackendError> {
        self.submit(Op::Write, peer, Work::Notify(frame.into()))
    }

    fn state(&self, xfer: &mut ShmXfer) -> XferState {
        xfer.transfer.cell.state()
    }

    fn abort(&self, xfer: &mut ShmXfer) {
        xfer.transfer.abort();
    }

    fn release(&self, xfer: ShmXfer) -> Result<(), ShmXfer> {
        if xfer.transfer.try_stop() {
            Ok(())
        } else {
            Err(xfer)
        }
    }

    fn revoke(&self) {
        self.revoke_access();
    }

    fn assist(&self, budget: std::time::Duration) -> bool {
        // Assume a slow copy (1 GB/s: a byte a nanosecond), so a job fits the budget.
        let fits = usize::try_from(budget.as_nanos()).unwrap_or(usize::MAX);
        self.assist_bytes > 0 && self.pool.assist(fits.min(self.assist_bytes))
    }

    fn stats(&self) -> BackendStats {
        self.counts.stats()
    }
}
