//! # blockwire-nixl: a NIXL agent through nixl-sys
//!
//! - **Agent**: one NIXL agent per transport, with the `UCX` backend plugin by default (option
//!   `backend`). The whole region is registered once, as DRAM, and a local descriptor list of
//!   one descriptor per block is prepared once.
//! - **Descriptor**: carries the region the agent registered and the agent's metadata.
//!   Connecting checks the region against the descriptor's, loads the metadata
//!   (`load_remote_md`) and prepares the peer's descriptor list, one descriptor per block, so
//!   a transfer is `make_xfer_req` with block indices on both prepared lists, then
//!   `post_xfer_req`.
//! - **State**: `get_xfer_status`; a transfer that finished inside the post is done. A status
//!   check that fails (nixl-sys reports every NIXL error, a failed transfer's included, as a
//!   failed check) is [`FailureReason::StateCheck`], which faults the peer.
//! - **Revocation** (close): the agent is destroyed (its registration released first), which
//!   destroys its UCX workers: nothing serves a peer's put or get afterwards (UCX emulates
//!   them with active messages on memory it did not allocate, copying to whatever address the
//!   message names, so a deregistration alone would not do).
//! - **Release**: nixl-sys releases a request by dropping it and hides a failed release, so a
//!   request is dropped only once NIXL reports it terminal; until then `release` says busy.
//! - **Errors**: nixl-sys collapses NIXL's codes into one; the message is kept.
//! - **Runtime**: `libnixl_capi.so` from the `nixl-cu12==1.5.1` wheel, loaded by absolute path
//!   (see [`DEFAULT_LIB_DIR`] and [`LIB_DIR_ENV`]); opening a transport without it is a clear
//!   error that says how to install it, never the forwarder's abort.
//! - **UCX**: the wheel bundles its own UCX. A process that has initialized Debian's UCX (the
//!   ucx backend) must not load NIXL's: UCX 1.13 aborts with `Assertion
//!   '!ucs_debug_initialized' failed` as the second copy starts, because both export the same
//!   symbols. So the nixl backend runs in its own test binaries and processes.
//!
//! ## Several agents in one process
//!
//! One transport per process is how NIXL is deployed, and what blockwire recommends. Several
//! in one process work (the suite runs two, three at a time), with one exception found here:
//! two pairs of agents busy at once in one process, one of them destroying an agent (a
//! transport closed or dropped) while the other side's transfers to it ran, corrupted the
//! heap inside NIXL 1.5.1's UCX plugin in 2 of 16 runs (a crash in `malloc` on a UCX thread).
//! One pair at a time it did not happen (0 of 12 runs), nor in two processes at once (0 of
//! 20), and serializing every blockwire call into NIXL behind one process-wide lock did not
//! prevent it, so it lies in NIXL's or its UCX's own threads. The nixl suite therefore runs
//! its cases one at a time.
//!
//! ## Options
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `backend` | `UCX` | NIXL backend plugin |
//! | `num_threads` | the plugin's | the plugin's `num_threads` parameter (UCX: progress threads) |
//! | `param.<key>` | | any other plugin parameter, passed as is |
//! | `lib_dir` | [`LIB_DIR_ENV`], else [`DEFAULT_LIB_DIR`] | directory of `libnixl_capi.so` |

mod runtime;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blockwire_core::kit::{Live, LiveCounts};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendOptions, BackendStats, BlockIndex,
    Capabilities, Error, FailureReason, Op, OpenBackend, PeerDescriptor, RegionSpan,
    RegisteredRegion, XferState,
};
use nixl_sys::{
    Agent, MemType, MemoryRegion, NixlDescriptor, RegistrationHandle, XferDescList,
    XferDlistHandle, XferOp, XferRequest, XferStatus,
};
use parking_lot::Mutex;

pub use runtime::{DEFAULT_LIB_DIR, LIB_DIR_ENV};

/// Whether the real NIXL runtime is loaded in this process (opening a backend loads it); never
/// touches nixl-sys's forwarder before that, so it cannot abort.
///
/// ```
/// // Nothing opened yet in this process.
/// assert!(!blockwire_nixl::runtime_loaded());
/// ```
pub fn runtime_loaded() -> bool {
    runtime::is_loaded()
}

/// Loads the NIXL runtime into this process, from `lib_dir` or the default place (opening a
/// backend does this too), for code that calls nixl-sys directly beside blockwire, such as the
/// bench's raw NIXL baseline. Fails as [`BackendErrorKind::Unsupported`] when the runtime is
/// missing or this process already runs the system UCX.
///
/// ```
/// // Needs the runtime (scripts/setup-backends.sh).
/// blockwire_nixl::load_runtime(None)?;
/// assert!(blockwire_nixl::runtime_loaded());
/// # Ok::<(), blockwire_core::BackendError>(())
/// ```
pub fn load_runtime(lib_dir: Option<&str>) -> Result<(), BackendError> {
    runtime::ensure(&runtime::lib_dir(lib_dir))
}

/// The backend kind written in descriptors.
///
/// ```
/// assert_eq!(blockwire_nixl::KIND, "nixl");
/// ```
pub const KIND: &str = "nixl";

static NEXT_AGENT: AtomicU64 = AtomicU64::new(0);

/// A range of host memory as NIXL registers it (`MemType::Dram`, device 0): what the backend
/// registers for its region, and what code calling nixl-sys directly beside blockwire (the
/// bench's raw NIXL baseline) can register too.
///
/// ```
/// use nixl_sys::{MemoryRegion, NixlDescriptor, MemType};
/// let mem = vec![0u8; 4096];
/// let d = blockwire_nixl::Dram::new(mem.as_ptr() as usize, mem.len());
/// assert_eq!(d.size(), 4096);
/// assert!(matches!(d.mem_type(), MemType::Dram));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Dram {
    addr: usize,
    len: usize,
}

impl Dram {
    /// The `len` bytes at address `addr`. Describing memory is safe; registering it with NIXL
    /// lets peers reach it, so it must stay allocated while registered.
    pub fn new(addr: usize, len: usize) -> Self {
        Dram { addr, len }
    }
}

impl MemoryRegion for Dram {
    unsafe fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }

    fn size(&self) -> usize {
        self.len
    }
}

impl NixlDescriptor for Dram {
    fn mem_type(&self) -> MemType {
        MemType::Dram
    }

    fn device_id(&self) -> u64 {
        0
    }
}

/// The address bytes: magic, the region registered, then the agent's metadata.
const ADDRESS_MAGIC: &[u8; 4] = b"NXL1";

/// NIXL objects, behind one lock: NIXL's thread safety is undocumented (NIXL issue #1653), so
/// every call is serialized. `None` once revoked.
struct Inner {
    agent: Agent,
    name: String,
    local: XferDlistHandle,
    _registration: RegistrationHandle,
    /// How many connected peers use each remote agent's metadata.
    remotes: std::collections::HashMap<String, usize>,
}

// SAFETY: the NIXL handles are only used under the backend's mutex, one call at a time.
unsafe impl Send for Inner {}

/// The NIXL backend (see the crate docs and [`NixlBackend::open`]).
pub struct NixlBackend {
    span: RegionSpan,
    inner: Arc<Mutex<Option<Inner>>>,
    /// The address bytes (see [`ADDRESS_MAGIC`]).
    address: Vec<u8>,
    counts: LiveCounts,
}

/// A connected peer: the remote agent and its prepared descriptor list.
pub struct NixlPeer {
    remote: String,
    /// Released with the agent's lock held; never after the agent is gone (the handle does
    /// not keep it alive).
    list: Option<XferDlistHandle>,
    num_blocks: u32,
    _live: Live,
}

// SAFETY: the prepared list is only used under the backend's mutex.
unsafe impl Send for NixlPeer {}
// SAFETY: as for `Send`.
unsafe impl Sync for NixlPeer {}

/// A posted transfer.
pub struct NixlXfer {
    request: Option<XferRequest>,
    outcome: Option<XferState>,
    _live: Live,
}

fn nixl_error(context: &str, e: nixl_sys::NixlError) -> BackendError {
    BackendError::new(BackendErrorKind::Other, format!("{context}: {e}"))
}

impl OpenBackend for NixlBackend {
    const KIND: &'static str = KIND;

    /// Opens a NIXL agent over `span` with the options in the crate docs.
    ///
    /// # Safety
    ///
    /// The memory `span` describes must stay allocated until this backend, and every peer and
    /// transfer it made, has been dropped.
    ///
    /// ```
    /// use blockwire_core::{Backend, OpenBackend, BackendOptions, RegionSpan};
    /// let mut mem = vec![0u8; 2 * 4096];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 2, 4096).unwrap();
    /// // SAFETY: `mem` outlives the backend. Needs the runtime (scripts/setup-backends.sh).
    /// let b = unsafe { blockwire_nixl::NixlBackend::open(span, BackendOptions::new())? };
    /// assert_eq!(b.kind(), "nixl");
    /// assert!(blockwire_nixl::runtime_loaded());
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    unsafe fn open(span: RegionSpan, mut options: BackendOptions) -> Result<Self, Error> {
        let open_err = Error::opening(KIND);
        let plugin = options
            .take::<String>("backend")
            .map_err(open_err)?
            .unwrap_or_else(|| "UCX".into());
        let lib_dir = options.take::<String>("lib_dir").map_err(open_err)?;
        let mut plugin_params = options.take_prefixed("param.");
        if let Some(n) = options.take::<u32>("num_threads").map_err(open_err)? {
            plugin_params.push(("num_threads".into(), n.to_string()));
        }
        options.finish(KIND).map_err(open_err)?;
        runtime::ensure(&runtime::lib_dir(lib_dir.as_deref())).map_err(open_err)?;
        let name = format!(
            "blockwire-{}-{}",
            std::process::id(),
            NEXT_AGENT.fetch_add(1, Ordering::Relaxed)
        );
        let fail = |what: &str, e| open_err(nixl_error(what, e));
        let agent = Agent::new(&name).map_err(|e| fail("creating the agent", e))?;
        let (_mems, mut params) = agent
            .get_plugin_params(&plugin)
            .map_err(|e| fail("reading the plugin's parameters", e))?;
        for (key, value) in &plugin_params {
            params
                .set(key, value)
                .map_err(|e| fail(&format!("setting plugin parameter {key}={value}"), e))?;
        }
        agent
            .create_backend(&plugin, &params)
            .map_err(|e| fail("creating the backend", e))?;
        let dram = Dram {
            addr: span.base().as_ptr() as usize,
            len: span.len(),
        };
        let registration = agent
            .register_memory(&dram, None)
            .map_err(|e| fail("registering the region", e))?;
        let mut blocks =
            XferDescList::new(MemType::Dram).map_err(|e| fail("descriptor list", e))?;
        for i in 0..span.num_blocks() {
            let off = span.block_offset(i).unwrap_or(0);
            blocks.add_desc(dram.addr + off, span.block_len(), 0);
        }
        let local = agent
            .prepare_xfer_dlist("", &blocks, None) // NIXL_INIT_AGENT: the local agent
            .map_err(|e| fail("preparing the local descriptor list", e))?;
        let metadata = agent
            .get_local_md()
            .map_err(|e| fail("reading the agent metadata", e))?;
        let mut address = ADDRESS_MAGIC.to_vec();
        RegisteredRegion::of(&span).encode(&mut address);
        address.extend_from_slice(&metadata);
        tracing::debug!(agent = %name, %plugin, "nixl backend opened");
        Ok(NixlBackend {
            span,
            inner: Arc::new(Mutex::new(Some(Inner {
                agent,
                name,
                local,
                _registration: registration,
                remotes: Default::default(),
            }))),
            address,
            counts: LiveCounts::default(),
        })
    }
}

impl NixlBackend {}

impl Backend for NixlBackend {
    type Peer = NixlPeer;
    type Xfer = NixlXfer;

    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.read = true;
        c.cross_process = true;
        c.revoke = true;
        c
    }

    fn address(&self) -> Vec<u8> {
        self.address.clone()
    }

    fn connect(&self, desc: &PeerDescriptor) -> Result<NixlPeer, BackendError> {
        let malformed = |why: &str| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("nixl address: {why}"),
            )
        };
        let rest = desc
            .address
            .strip_prefix(ADDRESS_MAGIC)
            .ok_or_else(|| malformed("bad magic"))?;
        let (region, metadata) = RegisteredRegion::decode(rest)?;
        region.check(desc)?;
        if metadata.is_empty() {
            return Err(malformed("empty NIXL agent metadata"));
        }
        let mut guard = self.inner.lock();
        let inner = guard.as_mut().ok_or_else(revoked)?;
        let remote = inner.agent.load_remote_md(metadata).map_err(|e| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("loading the peer's agent metadata: {e}"),
            )
        })?;
        let mut blocks =
            XferDescList::new(MemType::Dram).map_err(|e| nixl_error("descriptors", e))?;
        let block_len = desc.block_len as usize;
        for i in 0..desc.num_blocks {
            let addr = desc.base_addr as usize + i as usize * block_len;
            blocks.add_desc(addr, block_len, 0);
        }
        let list = inner
            .agent
            .prepare_xfer_dlist(&remote, &blocks, None)
            .map_err(|e| nixl_error("preparing the peer's descriptor list", e))?;
        *inner.remotes.entry(remote.clone()).or_default() += 1;
        Ok(NixlPeer {
            remote,
            list: Some(list),
            num_blocks: desc.num_blocks,
            _live: self.counts.peer(),
        })
    }

    fn disconnect(&self, mut peer: NixlPeer) {
        let mut guard = self.inner.lock();
        let Some(inner) = guard.as_mut() else {
            // The agent is gone (revoked): releasing the list would reach freed memory.
            std::mem::forget(peer.list.take());
            return;
        };
        let NixlPeer { remote, list, .. } = peer;
        drop(list);
        let last = match inner.remotes.get_mut(&remote) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => true,
        };
        if last {
            inner.remotes.remove(&remote);
            if remote != inner.name {
                if let Err(e) = inner.agent.invalidate_remote_md(&remote) {
                    tracing::debug!(%remote, error = %e, "unloading remote agent metadata");
                }
            }
        }
    }

    fn post(
        &self,
        peer: &NixlPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<NixlXfer, BackendError> {
        self.span.block_pairs(local, remote, peer.num_blocks)?;
        let to_i32 = |v: &[BlockIndex]| {
            v.iter()
                .map(|&i| {
                    i32::try_from(i).map_err(|_| {
                        BackendError::new(BackendErrorKind::Other, format!("block {i} too large"))
                    })
                })
                .collect::<Result<Vec<i32>, _>>()
        };
        let (l, r) = (to_i32(local)?, to_i32(remote)?);
        let xop = match op {
            Op::Write => XferOp::Write,
            Op::Read => XferOp::Read,
        };
        let guard = self.inner.lock();
        let inner = guard.as_ref().ok_or_else(revoked)?;
        let list = peer.list.as_ref().ok_or_else(revoked)?;
        let request = inner
            .agent
            .make_xfer_req(xop, &inner.local, &l, list, &r, None)
            .map_err(|e| nixl_error("make_xfer_req", e))?;
        let running = inner
            .agent
            .post_xfer_req(&request, None)
            .map_err(|e| nixl_error("post_xfer_req", e))?;
        drop(guard);
        Ok(NixlXfer {
            request: Some(request),
            outcome: (!running).then_some(XferState::Done),
            _live: self.counts.transfer(),
        })
    }

    fn state(&self, xfer: &mut NixlXfer) -> XferState {
        if let Some(done) = &xfer.outcome {
            return done.clone();
        }
        let Some(request) = &xfer.request else {
            return XferState::Done;
        };
        let status = match self.inner.lock().as_ref() {
            Some(inner) => inner.agent.get_xfer_status(request),
            // Never: transfers are released before revoke.
            None => return XferState::Running,
        };
        let state = match status {
            Ok(XferStatus::InProgress) => return XferState::Running,
            Ok(XferStatus::Success) => XferState::Done,
            Err(e) => XferState::Failed(FailureReason::StateCheck(format!("get_xfer_status: {e}"))),
        };
        xfer.outcome = Some(state.clone());
        state
    }

    fn release(&self, mut xfer: NixlXfer) -> Result<(), NixlXfer> {
        // Only a request NIXL reported terminal is dropped (dropping is nixl-sys's release,
        // and it hides a failed one).
        if self.state(&mut xfer) == XferState::Running {
            return Err(xfer);
        }
        let request = xfer.request.take();
        let _inner = self.inner.lock();
        drop(request);
        Ok(())
    }

    fn revoke(&self) {
        let taken = self.inner.lock().take();
        if let Some(Inner {
            agent,
            local,
            _registration,
            ..
        }) = taken
        {
            // Handles first (they point into the agent), then the registration, then the
            // agent (whose drop destroys it once no request holds it: none is, at revoke).
            drop(local);
            drop(_registration);
            drop(agent);
        }
    }

    fn stats(&self) -> BackendStats {
        self.counts.stats()
    }
}

/// Why a call finds the agent gone.
fn revoked() -> BackendError {
    BackendError::new(
        BackendErrorKind::Unsupported,
        "the transport closed: its NIXL agent was destroyed",
    )
}

impl Drop for NixlBackend {
    fn drop(&mut self) {
        // The same order as revoke (a backend dropped without it).
        self.revoke();
    }
}
