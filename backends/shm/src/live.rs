//! Regions registered by shm backends of this process, so an in-process peer is reached by a
//! direct copy and a deregistered region is detected (like an invalidated remote key) instead
//! of written after it was freed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use blockwire_core::RegionSpan;
use blockwire_core::kit::Inbox;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

static REGISTRY: LazyLock<Mutex<HashMap<u64, Weak<LiveRegion>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A registered region of this process. Copies into or out of it hold `alive` shared for one
/// chunk; deregistration takes it exclusively, so it waits for the chunk in progress and every
/// later chunk sees the region gone.
pub(crate) struct LiveRegion {
    pub(crate) span: RegionSpan,
    pub(crate) token: u64,
    /// Its transport's notifications, for same-process senders.
    pub(crate) inbox: Inbox,
    alive: RwLock<bool>,
}

impl LiveRegion {
    /// Registers `span` and returns its handle.
    pub(crate) fn register(span: RegionSpan, inbox: Inbox) -> Arc<LiveRegion> {
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let live = Arc::new(LiveRegion {
            span,
            token,
            inbox,
            alive: RwLock::new(true),
        });
        REGISTRY.lock().insert(token, Arc::downgrade(&live));
        live
    }

    /// The registered region with `token`, if it is still registered.
    pub(crate) fn lookup(token: u64) -> Option<Arc<LiveRegion>> {
        let live = REGISTRY.lock().get(&token)?.upgrade()?;
        live.is_alive().then_some(live)
    }

    fn is_alive(&self) -> bool {
        *self.alive.read()
    }

    /// Holds the region registered for the duration of one chunk; `None` once deregistered.
    pub(crate) fn pin(&self) -> Option<RwLockReadGuard<'_, bool>> {
        // A fair read: once `deregister` waits, no new chunk starts.
        let guard = self.alive.read();
        (*guard).then_some(guard)
    }

    /// Deregisters: waits for the chunk in progress, then every copy fails.
    pub(crate) fn deregister(&self) {
        *self.alive.write() = false;
        REGISTRY.lock().remove(&self.token);
    }
}
