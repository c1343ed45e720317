//! The thread that opens the peers' own endpoints (`crate::endpoint`) in the background.
//!
//! Adding a peer with an endpoint of its own opens only that endpoint's address vector, with
//! the peer's name in it. The endpoint itself takes 7 to 50 ms to open on `tcp;ofi_rxm` (its
//! `fi_enable` preposts 4,096 receive buffers of 16 KiB) and about 20 us on `shm`; this thread
//! opens them, one peer after another, so adding a peer costs the caller microseconds. A post
//! that comes first opens the endpoint itself, or waits for the open under way
//! ([`Link::enable_endpoint`]): on the transport's posting thread (the backend says
//! `posts_in_caller`), never in the caller's.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use blockwire_core::BackendError;
use blockwire_core::kit::ProgressThread;
use parking_lot::Mutex;

use crate::fabric::Fabric;
use crate::link::Link;

/// Links whose endpoint is to be opened, and the thread that opens them (stopped and joined
/// on drop, after the open under way).
pub(crate) struct Opener {
    queue: Arc<Mutex<VecDeque<Weak<Link>>>>,
    thread: ProgressThread,
}

impl Opener {
    /// Starts the thread for the backend whose fabric is `fabric`.
    pub(crate) fn start(fabric: &Arc<Fabric>) -> Result<Self, BackendError> {
        let queue: Arc<Mutex<VecDeque<Weak<Link>>>> = Arc::default();
        let (work, pending) = (queue.clone(), queue.clone());
        // Weak: the fabric closes with its backend, whether or not this thread still runs.
        let fabric = Arc::downgrade(fabric);
        let thread = ProgressThread::spawn_on_demand(
            "ofi-open",
            Duration::ZERO,
            move || {
                let Some(next) = work.lock().pop_front() else {
                    return 0;
                };
                // A link already released, or a backend closed (its posts are refused): none
                // to open.
                let live = fabric.upgrade().is_some_and(|f| !f.is_revoked());
                if let (true, Some(link)) = (live, next.upgrade()) {
                    if let Err(e) = link.enable_endpoint() {
                        // Its first post tries again, and fails with this if it fails again.
                        tracing::warn!(error = %e, "libfabric: opening a peer's endpoint");
                    }
                }
                1
            },
            move || !pending.lock().is_empty(),
        )
        .map_err(|e| BackendError::other(format!("spawning the endpoint opener: {e}")))?;
        Ok(Opener { queue, thread })
    }

    /// Opens `link`'s own endpoint soon (nothing to do for one without, or already open).
    pub(crate) fn open_soon(&self, link: &Arc<Link>) {
        self.queue.lock().push_back(Arc::downgrade(link));
        self.thread.kick();
    }
}
