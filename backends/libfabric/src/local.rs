//! The `shm` provider's endpoints of this process, so that a peer in the same process can be
//! told apart from one in another, and can close without crashing those that write to it.
//!
//! libfabric 1.17's `shm` provider maps a peer's region once per process: an endpoint that
//! adds a peer of its own process to its address vector uses that peer's own mapping (found
//! by name in a process-wide list). When the peer's endpoint closes, its region is unmapped,
//! and every later post to it, or completion read that touches it, dereferences unmapped
//! memory (a crash, or worse once the range is mapped again). So here:
//!
//! - each backend registers its receiving endpoint by name ([`register`]);
//! - a link to an endpoint of this process holds that backend's [`Fabric`] alive (its
//!   endpoint, and so its region, stay mapped) until the link is dropped ([`attach`]);
//! - a backend that revokes access ([`revoke`]) cuts every such link first, which closes the
//!   linking endpoint (its transfers fail as a remote disconnect), and refuses new ones.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

use blockwire_core::{BackendError, BackendErrorKind};
use parking_lot::Mutex;

use crate::fabric::Fabric;
use crate::link::Link;

struct Entry {
    fabric: Weak<Fabric>,
    revoked: bool,
    /// Links of this process's other endpoints to it.
    links: Vec<Weak<Link>>,
}

static ENDPOINTS: LazyLock<Mutex<HashMap<Vec<u8>, Entry>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Registers `fabric`'s receiving endpoint (named `name`) as one of this process.
pub(crate) fn register(name: &[u8], fabric: &Arc<Fabric>) {
    ENDPOINTS.lock().insert(
        name.to_vec(),
        Entry {
            fabric: Arc::downgrade(fabric),
            revoked: false,
            links: Vec::new(),
        },
    );
}

/// Forgets `name` (its backend is gone).
pub(crate) fn unregister(name: &[u8]) {
    ENDPOINTS.lock().remove(name);
}

/// Makes `make` a link to endpoint `name` of this process, holding that endpoint's backend
/// alive for the link's lifetime (`make` gets it). Refused once that backend revoked access or
/// is gone. Runs `make` under the registry's lock, so a revoke either sees the link or comes
/// first.
pub(crate) fn attach(
    name: &[u8],
    make: impl FnOnce(Arc<Fabric>) -> Result<Arc<Link>, BackendError>,
) -> Result<Arc<Link>, BackendError> {
    let gone = || {
        BackendError::new(
            BackendErrorKind::RemoteDisconnect,
            "the peer is an endpoint of this process that closed",
        )
    };
    // The backend is dropped outside the lock if this turns out to be its last holder (its
    // drop unregisters it).
    let (made, _fabric) = {
        let mut endpoints = ENDPOINTS.lock();
        let entry = endpoints.get_mut(name).ok_or_else(gone)?;
        if entry.revoked {
            return Err(gone());
        }
        let fabric = entry.fabric.upgrade().ok_or_else(gone)?;
        let made = make(fabric.clone());
        if let Ok(link) = &made {
            entry.links.retain(|l| l.strong_count() > 0);
            entry.links.push(Arc::downgrade(link));
        }
        (made, fabric)
    };
    made
}

/// Refuses new links to endpoint `name` and returns the live ones, for the caller to cut.
pub(crate) fn revoke(name: &[u8]) -> Vec<Arc<Link>> {
    let mut endpoints = ENDPOINTS.lock();
    match endpoints.get_mut(name) {
        Some(entry) => {
            entry.revoked = true;
            std::mem::take(&mut entry.links)
                .iter()
                .filter_map(Weak::upgrade)
                .collect()
        }
        None => Vec::new(),
    }
}
