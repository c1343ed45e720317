//! The UCP context, its one worker, the region's registration, and the progress thread.

use std::ffi::CString;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use blockwire_core::kit::ProgressThread;
use blockwire_core::{BackendError, BackendErrorKind, RegionSpan};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use ucx_sys::*;

use crate::errors::check;
use crate::idle::IdleEndpoints;
use crate::notify::Notifier;

mod teardown;
pub(crate) use teardown::live_here;

/// How the worker makes progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A thread of the backend progresses the worker, so a passive peer that never polls still
    /// receives writes (UCX over TCP, and over shared memory on memory it did not allocate,
    /// emulates RMA with active messages, which the target must progress).
    Thread,
    /// Only `poll` (a state check) progresses the worker: no extra thread, but a peer must keep
    /// polling for writes to reach it.
    Caller,
}

/// The memory a backend registers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Memory {
    /// The caller's region.
    Caller(RegionSpan),
    /// This many bytes, allocated by UCX (`ucp_mem_map` with `UCP_MEM_MAP_ALLOCATE`): on shared
    /// memory, peers then write into it with true one-sided puts instead of active messages.
    Allocate {
        /// Blocks in the region.
        num_blocks: u32,
        /// Bytes per block.
        block_len: usize,
    },
}

/// Settings from the backend options.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) tls: Option<String>,
    pub(crate) net_devices: Option<String>,
    pub(crate) progress: ProgressMode,
    /// Bound on the progress thread's sleep when idle.
    pub(crate) idle_sleep: Duration,
    /// Further `ucp_config_modify` pairs ([`crate::tcp_tuning`]).
    pub(crate) tuning: Vec<(&'static str, String)>,
}

struct WorkerPtr(ucp_worker_h);
// SAFETY: the worker is created with UCS_THREAD_MODE_MULTI, so UCX serializes calls on it from
// any thread; the pointer itself is just an address.
unsafe impl Send for WorkerPtr {}

/// Everything UCX: dropped last, after every peer and transfer (they hold an `Arc` of it).
///
/// The worker can be revoked before that ([`Ucx::revoke`]): destroying it is what stops
/// peers from reaching the region (UCX emulates their puts and gets with active messages that
/// this worker's progress serves, copying to and from whatever address the message names).
pub(crate) struct Ucx {
    pub(crate) context: ucp_context_h,
    worker: ucp_worker_h,
    memh: ucp_mem_h,
    /// UCX allocated the region (`Memory::Allocate`): it stays mapped until drop.
    allocated: bool,
    /// The worker's address, for descriptors.
    pub(crate) worker_address: Vec<u8>,
    /// The packed remote key of the whole region, for descriptors.
    pub(crate) rkey: Vec<u8>,
    progress: Mutex<Option<ProgressThread>>,
    pub(crate) mode: ProgressMode,
    /// `true` while the worker lives. Every call on the worker holds it shared
    /// ([`Ucx::worker`]); `revoke` takes it exclusively and destroys the worker.
    live: RwLock<bool>,
    /// A cut left operations in the worker that UCX will never complete ([`Ucx::abandon`]).
    abandoned: AtomicBool,
    /// A cut left operations in the worker that UCX must never complete ([`Ucx::halt`]):
    /// the worker is never progressed again. Shared with the progress thread.
    halted: Arc<AtomicBool>,
    /// Held shared by each progress call, from its check of `halted` to its return: `halt`
    /// takes it exclusively, so that no call that missed the halt is still running after it.
    progressing: Arc<RwLock<()>>,
    /// The transport is closing (`Backend::stop_connecting`): a connect's identity check
    /// gives up its wait, and a later one fails at once.
    stop_connecting: AtomicBool,
    /// `Backend::cancel_connect` calls: a connect's identity check that started before one
    /// gives up its wait.
    connects_cancelled: AtomicU64,
    /// State callbacks of the worker's endpoints may still use (an endpoint whose close did
    /// not finish): freed once the worker can no longer call back.
    kept: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
    /// What the worker's active-message handlers use (they hold its address): it outlives
    /// the worker, and is leaked with a worker left undestroyed.
    notifier: Arc<Notifier>,
    /// Endpoints of disconnected peers, open for the next connection to their worker.
    pub(crate) idle: IdleEndpoints,
    /// This process's pid and start time (`(0, 0)` if `/proc` would not say), for
    /// descriptors.
    pub(crate) process: (u32, u64),
}

/// The worker, held alive (not revoked) for as long as the guard lives.
pub(crate) struct Worker<'a> {
    _live: RwLockReadGuard<'a, bool>,
    raw: ucp_worker_h,
    halted: &'a AtomicBool,
    progressing: &'a RwLock<()>,
}

impl Worker<'_> {
    /// The worker handle; valid while the guard lives.
    pub(crate) fn raw(&self) -> ucp_worker_h {
        self.raw
    }

    /// Progresses the worker once; nothing once it was halted ([`Ucx::halt`]).
    pub(crate) fn progress(&self) -> u32 {
        let _progressing = self.progressing.read();
        if self.halted.load(Ordering::Acquire) {
            return 0;
        }
        // SAFETY: a live, thread-safe worker (the guard keeps revoke out).
        unsafe { ucp_worker_progress(self.raw) }
    }
}

// SAFETY: the context is used only for rkey packing at open and cleanup at drop; the worker is
// thread-safe (UCS_THREAD_MODE_MULTI); `memh` is only unmapped at drop.
unsafe impl Send for Ucx {}
// SAFETY: as for `Send`.
unsafe impl Sync for Ucx {}

fn config_set(config: *mut ucp_config_t, name: &str, value: &str) -> Result<(), BackendError> {
    let bad = |_| BackendError::new(BackendErrorKind::InvalidOption, format!("{name}={value:?}"));
    let (n, v) = (
        CString::new(name).map_err(bad)?,
        CString::new(value).map_err(bad)?,
    );
    // SAFETY: `config` came from ucp_config_read; both strings are NUL-terminated and live.
    let status = unsafe { ucp_config_modify(config, n.as_ptr(), v.as_ptr()) };
    check(&format!("setting UCX {name}={value}"), status)
        .map_err(|e| BackendError::new(BackendErrorKind::InvalidOption, e.message().to_owned()))
}

/// Reads UCX's configuration (defaults and `UCX_*` variables), applies the settings'
/// transports, devices and tuning, and creates an RMA context.
fn init_context(settings: &Settings) -> Result<ucp_context_h, BackendError> {
    let mut config: *mut ucp_config_t = ptr::null_mut();
    // SAFETY: null prefix and file mean the defaults plus UCX_* environment variables.
    check("reading UCX config", unsafe {
        ucp_config_read(ptr::null(), ptr::null(), &mut config)
    })?;
    let configured = (|| {
        if let Some(tls) = &settings.tls {
            config_set(config, "TLS", tls)?;
        }
        if let Some(dev) = &settings.net_devices {
            config_set(config, "NET_DEVICES", dev)?;
        }
        for (key, value) in &settings.tuning {
            config_set(config, key, value)?;
        }
        Ok::<(), BackendError>(())
    })();
    let mut context: ucp_context_h = ptr::null_mut();
    let init = configured.and_then(|()| {
        let params = ucp_params_t {
            field_mask: UCP_PARAM_FIELD_FEATURES as u64,
            features: (UCP_FEATURE_RMA | UCP_FEATURE_AM) as u64,
            ..Default::default()
        };
        // SAFETY: valid params and config, a writable handle.
        check("ucp_init", unsafe {
            ucp_init(&params, config, &mut context)
        })
    });
    // SAFETY: `config` came from ucp_config_read and is not used after this.
    unsafe { ucp_config_release(config) };
    init.map(|()| context)
}

impl Ucx {
    /// Creates the context and worker and registers the region (one registration for all of
    /// it): the caller's memory, or `len` bytes UCX allocates (returned as the base address).
    /// Named steps; on an error, `Drop` releases what was made.
    pub(crate) fn open(
        memory: Memory,
        settings: &Settings,
        notifier: Arc<Notifier>,
    ) -> Result<(Arc<Ucx>, *mut u8), BackendError> {
        let mut ucx = Ucx {
            context: init_context(settings)?,
            worker: ptr::null_mut(),
            memh: ptr::null_mut(),
            allocated: matches!(memory, Memory::Allocate { .. }),
            worker_address: Vec::new(),
            rkey: Vec::new(),
            progress: Mutex::new(None),
            mode: settings.progress,
            live: RwLock::new(true),
            abandoned: AtomicBool::new(false),
            halted: Arc::new(AtomicBool::new(false)),
            progressing: Arc::new(RwLock::new(())),
            stop_connecting: AtomicBool::new(false),
            connects_cancelled: AtomicU64::new(0),
            kept: Mutex::new(Vec::new()),
            notifier,
            idle: IdleEndpoints::default(),
            process: blockwire_core::kit::process::current().unwrap_or((0, 0)),
        };
        ucx.create_worker()?;
        teardown::register_live(ucx.notifier.identity());
        let base = ucx.map_memory(memory)?;
        if settings.progress == ProgressMode::Thread {
            ucx.start_progress(settings.idle_sleep)?;
        }
        Ok((Arc::new(ucx), base))
    }

    /// Creates the thread-safe worker, installs its notification handlers and reads its
    /// address.
    fn create_worker(&mut self) -> Result<(), BackendError> {
        let wparams = ucp_worker_params_t {
            field_mask: UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64,
            thread_mode: UCS_THREAD_MODE_MULTI,
            ..Default::default()
        };
        // SAFETY: a live context, valid params, a writable handle.
        check("ucp_worker_create", unsafe {
            ucp_worker_create(self.context, &wparams, &mut self.worker)
        })?;
        // SAFETY: a live worker; the notifier outlives it (`Drop` destroys the worker before
        // the fields drop, and leaks the notifier with a worker left undestroyed).
        unsafe { self.notifier.register(self.worker) }?;
        let mut addr: *mut ucp_address_t = ptr::null_mut();
        let mut addr_len: usize = 0;
        // SAFETY: a live worker; UCX allocates the address, released below.
        check("ucp_worker_get_address", unsafe {
            ucp_worker_get_address(self.worker, &mut addr, &mut addr_len)
        })?;
        // SAFETY: UCX returned `addr_len` readable bytes at `addr`.
        self.worker_address =
            unsafe { std::slice::from_raw_parts(addr as *const u8, addr_len) }.to_vec();
        // SAFETY: `addr` came from ucp_worker_get_address on this worker.
        unsafe { ucp_worker_release_address(self.worker, addr) };
        Ok(())
    }

    /// Maps the region (the caller's memory, or memory UCX allocates) and packs its remote
    /// key; returns the region's base address.
    fn map_memory(&mut self, memory: Memory) -> Result<*mut u8, BackendError> {
        let mparams = match memory {
            Memory::Caller(span) => ucp_mem_map_params_t {
                field_mask: (UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH)
                    as u64,
                address: span.base().as_ptr().cast(),
                length: span.len(),
                ..Default::default()
            },
            Memory::Allocate {
                num_blocks,
                block_len,
            } => ucp_mem_map_params_t {
                field_mask: (UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                    | UCP_MEM_MAP_PARAM_FIELD_LENGTH
                    | UCP_MEM_MAP_PARAM_FIELD_FLAGS) as u64,
                address: ptr::null_mut(),
                length: (num_blocks as usize).saturating_mul(block_len),
                flags: UCP_MEM_MAP_ALLOCATE,
                ..Default::default()
            },
        };
        // SAFETY: caller memory is valid for its length until the backend is dropped (the
        // caller's contract) and is unmapped in Drop before that; allocated memory is UCX's.
        check("ucp_mem_map", unsafe {
            ucp_mem_map(self.context, &mparams, &mut self.memh)
        })?;
        let mut attr = ucp_mem_attr_t {
            field_mask: UCP_MEM_ATTR_FIELD_ADDRESS as u64,
            ..Default::default()
        };
        // SAFETY: a live memh and a writable attribute struct.
        check("ucp_mem_query", unsafe {
            ucp_mem_query(self.memh, &mut attr)
        })?;
        let mut rkey: *mut std::ffi::c_void = ptr::null_mut();
        let mut rkey_len: usize = 0;
        // SAFETY: live context and memh; UCX allocates the buffer, released below.
        check("ucp_rkey_pack", unsafe {
            ucp_rkey_pack(self.context, self.memh, &mut rkey, &mut rkey_len)
        })?;
        // SAFETY: UCX returned `rkey_len` readable bytes at `rkey`.
        self.rkey = unsafe { std::slice::from_raw_parts(rkey as *const u8, rkey_len) }.to_vec();
        // SAFETY: `rkey` came from ucp_rkey_pack.
        unsafe { ucp_rkey_buffer_release(rkey) };
        Ok(attr.address.cast::<u8>())
    }

    /// Starts the thread that progresses the worker while nobody polls.
    fn start_progress(&mut self, idle_sleep: Duration) -> Result<(), BackendError> {
        let worker = WorkerPtr(self.worker);
        let halted = self.halted.clone();
        let progressing = self.progressing.clone();
        let thread = ProgressThread::spawn("ucx", idle_sleep, move || {
            let worker = &worker;
            let _progressing = progressing.read();
            if halted.load(Ordering::Acquire) {
                return 0;
            }
            // SAFETY: the worker outlives this thread: `Ucx::revoke` and `Ucx::drop` stop and
            // join it before they destroy the worker.
            unsafe { ucp_worker_progress(worker.0) as usize }
        })
        .map_err(|e| BackendError::other(format!("spawning the progress thread: {e}")))?;
        *self.progress.get_mut() = Some(thread);
        Ok(())
    }

    /// The notification state the worker's handlers use.
    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// The worker, unless it was revoked.
    pub(crate) fn worker(&self) -> Option<Worker<'_>> {
        let live = self.live.read();
        (*live).then(|| Worker {
            _live: live,
            raw: self.worker,
            halted: &self.halted,
            progressing: &self.progressing,
        })
    }

    /// Wakes the progress thread (after a post, so it spins instead of sleeping).
    pub(crate) fn kick(&self) {
        if let Some(t) = &*self.progress.lock() {
            t.kick();
        }
    }

    /// Progresses the worker once from the calling thread (nothing once revoked).
    pub(crate) fn progress_once(&self) -> u32 {
        self.worker().map_or(0, |w| w.progress())
    }

    /// Makes connects waiting for a peer give up (the transport is closing).
    pub(crate) fn stop_connecting(&self) {
        self.stop_connecting.store(true, Ordering::Release);
    }

    /// Makes the connect in flight give up waiting for its peer (its registration was
    /// superseded); later ones are not affected ([`Ucx::connects_cancelled`]).
    pub(crate) fn cancel_connect(&self) {
        self.connects_cancelled.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times [`Ucx::cancel_connect`] was called: a connect reads it when it starts,
    /// and gives up its wait once it changed.
    pub(crate) fn connects_cancelled(&self) -> u64 {
        self.connects_cancelled.load(Ordering::Acquire)
    }

    /// Whether connects should give up waiting for a peer ([`Ucx::stop_connecting`]).
    pub(crate) fn connecting_stopped(&self) -> bool {
        self.stop_connecting.load(Ordering::Acquire)
    }

    /// Records that operations were abandoned in the worker (a cut endpoint UCX could not
    /// close): UCX 1.13 crashes destroying a worker that holds such operations, so this one
    /// is left undestroyed (and, once revoked, never progressed again), with its context.
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }

    /// Stops the worker for good, and abandons it ([`Ucx::abandon`]): a cut endpoint UCX
    /// could not close holds operations whose transfers were reported failed, and whose peer
    /// may still answer them (a stopped process that resumes: UCX would copy a READ's data
    /// into the region inside a progress call, after the caller was told the READ failed).
    /// So the worker is never progressed again, and the backend refuses new work
    /// ([`Ucx::usable`]). Waits for a progress call in flight; never called from inside one
    /// (the stall watchdog's cut runs in a caller's `poll` or `cancel`).
    pub(crate) fn halt(&self) {
        self.halted.store(true, Ordering::Release);
        // Waits for the progress calls that checked before the store: once this returns, no
        // progress call runs or will.
        drop(self.progressing.write());
        self.abandon();
    }

    /// Whether the worker was halted ([`Ucx::halt`]).
    pub(crate) fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    /// `Err` once the worker was halted ([`Ucx::halt`]): nothing posted on it would complete.
    pub(crate) fn usable(&self) -> Result<(), BackendError> {
        if self.is_halted() {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                "the transport's UCX worker stopped: a peer without peer error handling \
                 (peer_errors=false), still running or of unknown state, stalled and was cut, \
                 and UCX could still complete its operations into the region, so the worker \
                 is never progressed again; reopen the transport",
            ));
        }
        Ok(())
    }

    /// Keeps `state` until the worker can no longer call back into it (destroyed, or never
    /// progressed again).
    pub(crate) fn keep(&self, state: Box<dyn std::any::Any + Send>) {
        self.kept.lock().push(state);
    }
}
