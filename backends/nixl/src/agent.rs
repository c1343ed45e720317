//! The NIXL agent of a backend ([`Inner`]): its name, how it is set up and torn down.

use std::collections::{HashMap, VecDeque};

use blockwire_core::kit::fence::FenceRef;
use blockwire_core::{
    BackendError, BackendErrorKind, BackendOptions, RegionSpan, RegisteredRegion,
};
use nixl_sys::{Agent, MemType, RegistrationHandle, XferDescList, XferDlistHandle};

use crate::{Dram, address, notify};

/// The agent's name: the transport's, or for a backend opened without a transport, one
/// unique across hosts ([`blockwire_core::unique_name`]).
pub(crate) fn agent_name(options: &BackendOptions) -> String {
    match options.name() {
        Some(name) => name.to_owned(),
        None => blockwire_core::unique_name(),
    }
}

pub(crate) fn nixl_error(context: &str, e: nixl_sys::NixlError) -> BackendError {
    BackendError::new(BackendErrorKind::Other, format!("{context}: {e}"))
}

/// NIXL objects, behind one lock: NIXL's thread safety is undocumented (NIXL issue #1653), so
/// every call is serialized ([`crate::lock::AgentLock`]). A call made for the caller's `poll`
/// (a transfer's status, its release, letting its peer go) only tries the lock and does
/// without when another thread holds it: the posting thread's post may copy the data inside
/// NIXL for milliseconds. The backend holds `None` once revoked.
///
/// The fields drop in the order they are declared, which is the order NIXL needs: handles
/// first (they point into the agent), then the registrations, then the agent (whose drop
/// destroys it once no request holds it: none is, at revoke), then the scratch no probe can
/// write into any more.
pub(crate) struct Inner {
    pub(crate) local: XferDlistHandle,
    _registration: RegistrationHandle,
    _scratch_registration: RegistrationHandle,
    pub(crate) agent: Agent,
    /// What notification probes read into (registered above).
    pub(crate) scratch: notify::Scratch,
    pub(crate) name: String,
    /// The remote agents whose metadata is loaded, by name.
    pub(crate) remotes: HashMap<String, Remote>,
    /// The loaded agents no connected peer uses, oldest first (see `Inner::disconnect`).
    pub(crate) idle: VecDeque<String>,
}

/// A remote agent whose metadata is loaded.
pub(crate) struct Remote {
    /// How many connected peers use it (none: it is idle, see `Inner::disconnect`).
    pub(crate) peers: usize,
    /// The metadata loaded: another with the same name is refused while this one is in use.
    pub(crate) metadata: Vec<u8>,
}

// SAFETY: the NIXL handles are only used under the backend's mutex, one call at a time; the
// scratch is only written by NIXL.
unsafe impl Send for Inner {}

impl Inner {
    /// Creates the agent `name` with `plugin`, registers the region and the scratch, prepares
    /// the local descriptor list; the agent and its address bytes (naming `fence`).
    pub(crate) fn open(
        span: &RegionSpan,
        name: &str,
        plugin: &str,
        plugin_params: &[(String, String)],
        progress_delay_us: u64,
        fence: &FenceRef,
    ) -> Result<(Inner, Vec<u8>), BackendError> {
        let agent = Agent::new_configured(name, &agent_config(progress_delay_us))
            .map_err(|e| nixl_error("creating the agent", e))?;
        let (_mems, mut params) = agent
            .get_plugin_params(plugin)
            .map_err(|e| nixl_error("reading the plugin's parameters", e))?;
        for (key, value) in plugin_params {
            params
                .set(key, value)
                .map_err(|e| nixl_error(&format!("setting plugin parameter {key}={value}"), e))?;
        }
        agent
            .create_backend(plugin, &params)
            .map_err(|e| nixl_error("creating the backend", e))?;
        let dram = Dram::new(span.base().as_ptr() as usize, span.len());
        let registration = agent
            .register_memory(&dram, None)
            .map_err(|e| nixl_error("registering the region", e))?;
        let scratch = notify::Scratch::new();
        let scratch_registration = agent
            .register_memory(&scratch.dram(), None)
            .map_err(|e| nixl_error("registering the notification scratch", e))?;
        let mut blocks =
            XferDescList::new(MemType::Dram).map_err(|e| nixl_error("descriptor list", e))?;
        for i in 0..span.num_blocks() {
            let off = span.block_offset(i).unwrap_or(0);
            blocks.add_desc(dram.addr + off, span.block_len(), 0);
        }
        let local = agent
            .prepare_xfer_dlist("", &blocks, None) // NIXL_INIT_AGENT: the local agent
            .map_err(|e| nixl_error("preparing the local descriptor list", e))?;
        let metadata = agent
            .get_local_md()
            .map_err(|e| nixl_error("reading the agent metadata", e))?;
        let address = address::encode(name, &RegisteredRegion::of(span), Some(fence), &metadata);
        let inner = Inner {
            agent,
            name: name.to_owned(),
            local,
            _registration: registration,
            scratch,
            _scratch_registration: scratch_registration,
            remotes: HashMap::new(),
            idle: VecDeque::new(),
        };
        Ok((inner, address))
    }

    /// Destroys the agent (in the fields' order, see [`Inner`]).
    pub(crate) fn destroy(self) {
        drop(self);
    }
}

/// How often, at least, the agent's progress thread sweeps its workers (µs; option
/// `progress_delay_us`). Between sweeps it sleeps in `poll` until a worker has an event, so
/// this bounds only the progress of an event UCX fails to signal (NIXL keeps the sweep as a
/// workaround for that). nixl-sys's `Agent::new` and NIXL's Python `nixl_agent` pass 0, with
/// which the thread never sleeps: measured here, an idle agent then took a whole core (1.0 of
/// one, against 0.04 with 100 µs, which NIXL rounds up to 1 ms).
///
/// ```
/// assert_eq!(blockwire_nixl::DEFAULT_PROGRESS_DELAY_US, 1_000);
/// ```
pub const DEFAULT_PROGRESS_DELAY_US: u64 = 1_000;

/// The configuration this backend makes its agent with: as nixl-sys's `Agent::new` makes one
/// (a progress thread, NIXL's default thread sync), but with the progress thread sweeping
/// every `progress_delay_us` instead of spinning (see [`DEFAULT_PROGRESS_DELAY_US`]). For a
/// program that drives NIXL itself alongside, as the bench's raw baseline does.
///
/// ```
/// let config = blockwire_nixl::agent_config(blockwire_nixl::DEFAULT_PROGRESS_DELAY_US);
/// assert!(config.enable_prog_thread);
/// assert_eq!(config.pthr_delay_us, 1_000);
/// ```
pub fn agent_config(progress_delay_us: u64) -> nixl_sys::AgentConfig {
    nixl_sys::AgentConfig {
        enable_prog_thread: true,
        thread_sync: nixl_sys::ThreadSync::Default,
        pthr_delay_us: progress_delay_us,
        ..nixl_sys::AgentConfig::default()
    }
}
