//! Opening a [`BlockTransport`]: its shared state, the registration worker and, for a backend
//! that posts in the caller's thread, the posting thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

use blockwire_core::kit::{Doorbell, Inbox};
use blockwire_core::{Backend, Error, OpenBackend, RegionSpan, Result};
use parking_lot::{Mutex, RwLock};

use super::inflight::Inflight;
use super::peers::PeerTable;
use super::{BlockTransport, Shared, posting, worker};
use crate::telemetry::Telemetry;
use crate::{Region, TransportOptions};

impl<B: OpenBackend> BlockTransport<B> {
    /// Opens a transport over `region` with backend `B` ([`OpenBackend::open`] over the
    /// region's span and `options.backend`).
    ///
    /// ```
    /// use blockwire::{BlockTransport, Region, Transport, TransportOptions};
    /// use blockwire_shm::ShmBackend;
    /// let t = BlockTransport::<ShmBackend>::open(Region::new(4, 4096)?, TransportOptions::default())?;
    /// assert_eq!(t.backend_kind(), "shm");
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn open(region: Region, options: TransportOptions) -> Result<Self> {
        Self::open_with(region, options, |span, backend_options| {
            // SAFETY: `open_with` passes the span of `region`, which the transport owns from
            // then on: `Shared` declares the backend before the region, so the backend (with
            // its threads, peers and transfers) is dropped first, and a forced close's reaper
            // keeps `Shared`, region included, until the last transfer is released. The
            // region's memory is on the heap (or the caller's, under `Region::from_raw_parts`'s
            // contract), so moving `Region` into `Shared` does not move it.
            unsafe { B::open(span, backend_options) }
        })
    }
}

impl<B: Backend> BlockTransport<B> {
    /// Opens a transport over `region` with the backend `make` builds from the region's span
    /// and the backend options: for a backend that needs more than [`OpenBackend::open`] (one
    /// that wraps another, or one whose memory it allocated itself).
    ///
    /// ```
    /// use blockwire::{BlockTransport, Region, Transport, TransportOptions};
    /// use blockwire_shm::ShmBackend;
    /// use blockwire_core::OpenBackend;
    /// let opts = TransportOptions::default().with_backend_option("copy_threads", "1");
    /// let t = BlockTransport::open_with(Region::new(2, 512)?, opts, |span, o| {
    ///     // SAFETY: `span` is the region the transport owns; it outlives the backend.
    ///     unsafe { ShmBackend::open(span, o) }
    /// })?;
    /// assert_eq!(t.num_blocks(), 2);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn open_with(
        region: Region,
        options: TransportOptions,
        make: impl FnOnce(RegionSpan, blockwire_core::BackendOptions) -> Result<B>,
    ) -> Result<Self> {
        let name = match options.name {
            Some(name) => {
                if let Some(problem) = blockwire_core::name_problem(&name) {
                    return Err(Error::BadName(problem));
                }
                name
            }
            None => blockwire_core::unique_name(),
        };
        let inbox = Inbox::new(options.notification_capacity);
        let doorbell = Doorbell::new();
        let backend_options = options
            .backend
            .with_stall_timeout(options.stall_timeout)
            .with_identity(name.clone(), inbox.clone())
            .with_doorbell(doorbell.clone());
        let backend = Arc::new(make(region.span(), backend_options)?);
        let telemetry = options
            .telemetry
            .then(|| Arc::new(Telemetry::new(backend.kind())));
        let fingerprint = crate::fingerprint::fingerprint(options.config_fields.as_ref());
        let shared = Arc::new(Shared {
            gate: RwLock::new(()),
            closed: AtomicBool::new(false),
            in_post: AtomicUsize::new(0),
            peers: Mutex::new(PeerTable::new()),
            connecting: Mutex::new(None),
            inflight: Inflight::new(options.stall_timeout, options.clock, telemetry.clone()),
            next_id: AtomicU64::new(1),
            fingerprint,
            name,
            inbox,
            doorbell,
            telemetry,
            close_timeout: options.close_timeout,
            max_failures: options.max_consecutive_failures,
            backend,
            region,
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let worker_shared = shared.clone();
        let worker_rx = rx.clone();
        let worker = blockwire_core::kit::spawn(
            format!("blockwire-{}-reg", shared.backend.kind()),
            move || worker::run(worker_shared, worker_rx),
        )
        .map_err(|e| Error::Os {
            what: "spawning the registration worker",
            source: e.into(),
        })?;
        let (posts, poster) = if shared.backend.capabilities().posts_in_caller {
            let (tx, rx) = crossbeam_channel::unbounded();
            let poster_shared = shared.clone();
            // It holds the shared state (backend and region), so neither is freed while a post
            // runs; close stops it.
            let poster = blockwire_core::kit::spawn(
                format!("blockwire-{}-post", shared.backend.kind()),
                move || {
                    posting::run(
                        &*poster_shared.backend,
                        &rx,
                        &poster_shared.closed,
                        &poster_shared.in_post,
                        &poster_shared.doorbell,
                    );
                },
            )
            .map_err(|e| Error::Os {
                what: "spawning the posting thread",
                source: e.into(),
            })?;
            (Some(tx), Some(poster))
        } else {
            (None, None)
        };
        tracing::debug!(
            backend = shared.backend.kind(),
            name = %shared.name,
            num_blocks = shared.region.num_blocks(),
            block_len = shared.region.block_len(),
            "transport opened"
        );
        Ok(BlockTransport {
            shared,
            jobs: Mutex::new(Some(tx)),
            queued: rx,
            worker: Mutex::new(Some(worker)),
            posts,
            poster: Mutex::new(poster),
        })
    }

    /// The backend, for backend-specific calls.
    ///
    /// ```
    /// use blockwire::{BlockTransport, Region, TransportOptions};
    /// use blockwire_core::Backend;
    /// let t = BlockTransport::<blockwire_shm::ShmBackend>::open(
    ///     Region::new(2, 512)?,
    ///     TransportOptions::default(),
    /// )?;
    /// assert_eq!(t.backend().kind(), "shm");
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }
}
