//! Opening the backend: its options, the agent, and the thread that drains notifications.

use std::sync::Arc;

use blockwire_core::kit::LiveCounts;
use blockwire_core::kit::fence::CloseFence;
use blockwire_core::{BackendError, BackendOptions, Error, OpenBackend, RegionSpan};
use parking_lot::Mutex;

use crate::agent::{Inner, agent_name};
use crate::lock::AgentLock;
use crate::{DEFAULT_PROGRESS_DELAY_US, KIND, NixlBackend, address, notify, runtime};

impl OpenBackend for NixlBackend {
    const KIND: &'static str = KIND;

    /// Opens a NIXL agent over `span` with the options in the crate docs, named after the
    /// transport.
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
    /// assert!(b.agent_name().starts_with("bw-")); // no transport named it: unique across hosts
    /// assert!(blockwire_nixl::runtime_loaded());
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    unsafe fn open(span: RegionSpan, mut options: BackendOptions) -> Result<Self, Error> {
        let open_err = Error::opening(KIND);
        let name = agent_name(&options);
        let inbox = options.inbox();
        let plugin = options
            .take::<String>("backend")
            .map_err(open_err)?
            .unwrap_or_else(|| "UCX".into());
        let lib_dir = options.take::<String>("lib_dir").map_err(open_err)?;
        let mut plugin_params = options.take_prefixed("param.");
        if let Some(n) = options.take::<u32>("num_threads").map_err(open_err)? {
            plugin_params.push(("num_threads".into(), n.to_string()));
        }
        let progress_delay_us = options
            .take::<u64>("progress_delay_us")
            .map_err(open_err)?
            .unwrap_or(DEFAULT_PROGRESS_DELAY_US);
        options.finish(KIND).map_err(open_err)?;
        runtime::ensure(&runtime::lib_dir(lib_dir.as_deref())).map_err(open_err)?;
        let mut fence = CloseFence::create().map_err(open_err)?;
        let (inner, address) = Inner::open(
            &span,
            &name,
            &plugin,
            &plugin_params,
            progress_delay_us,
            &fence.reference(),
        )
        .map_err(open_err)?;
        // A peer handed NIXL's own metadata (the Python P2P layer, vLLM's handshake) finds
        // the fence by it: the metadata has no room for its reference.
        match address::decode(&address) {
            Ok(addr) => {
                if let Err(e) = fence.publish(addr.metadata) {
                    tracing::warn!(
                        agent = %name,
                        error = %e,
                        "nixl: the close fence is not published: peers given only NIXL's \
                         metadata post without it"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "nixl: this agent's own address"),
        }
        let inner = Arc::new(AgentLock::new(inner));
        let receiver = Arc::new(notify::Receiver::new(inbox));
        let backend = NixlBackend {
            span,
            inner: inner.clone(),
            name,
            address,
            fence,
            counts: LiveCounts::default(),
            receiver: receiver.clone(),
            receiving: Mutex::new(None),
        };
        // On failure, dropping `backend` revokes (destroys the agent) in order.
        let thread = receiver.spawn(inner).map_err(|e| {
            open_err(BackendError::from_io(
                "spawning the notification thread",
                &e,
            ))
        })?;
        *backend.receiving.lock() = Some(thread);
        tracing::debug!(agent = %backend.name, %plugin, "nixl backend opened");
        Ok(backend)
    }
}
