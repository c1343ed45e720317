//! The remote endpoints this backend talks to: one address-vector entry per endpoint name,
//! shared by the connected peers that name it, and the cut that fails them all.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use blockwire_core::process::PeerProcess;
use blockwire_core::{BackendError, BackendErrorKind, FailureReason, PostedTransfers};
use libfabric_sys::*;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::endpoint::Endpoint;
use crate::errors;
use crate::fabric::{Fabric, Transfer};

/// One remote endpoint: its address-vector entry, whether it was cut, and the transfers posted
/// to it since.
pub(crate) struct Link {
    pub(crate) addr: fi_addr_t,
    name: Vec<u8>,
    /// Whether it was cut, and its endpoint. Posts hold it shared for their whole duration,
    /// so a cut never runs under one.
    state: RwLock<LinkState>,
    /// Connected peers that use this entry.
    peers: AtomicUsize,
    /// Transfers posted through this entry (pruned at each post), for the cut.
    transfers: PostedTransfers<Transfer>,
    /// The `shm` provider's peer process, when its endpoint name gives the pid.
    process: Option<PeerProcess>,
    /// The peer has an endpoint of its own (`endpoint_per_peer`).
    own_endpoint: bool,
}

struct LinkState {
    /// `Some(why)` once cut.
    cut: Option<String>,
    /// This peer's own endpoint (`endpoint_per_peer`; closed by a cut on `tcp`), else posts
    /// use the backend's.
    endpoint: Option<Endpoint>,
}

/// A post's hold on a link that is not cut (see [`Link::hold`]).
pub(crate) struct Held<'a> {
    link: &'a Link,
    guard: RwLockReadGuard<'a, LinkState>,
}

impl Held<'_> {
    /// The endpoint posts to this peer go through.
    pub(crate) fn ep(&self, fabric: &Fabric) -> *mut fid_ep {
        self.guard.endpoint.as_ref().map_or(fabric.ep, |e| e.ep)
    }

    /// Records a transfer posted through the link, for a later cut.
    pub(crate) fn track(&self, transfer: &Arc<Transfer>) {
        self.link.transfers.push(transfer);
    }
}

/// The pid in a `shm` provider endpoint name (`[fi_shm://]<pid>:<uid>:<n>`), if it has one.
fn shm_pid(name: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(name).ok()?;
    let text = text.trim_end_matches('\0');
    let text = text.strip_prefix("fi_shm://").unwrap_or(text);
    let digits: &str = text.split([':', '_']).next()?;
    digits.parse().ok().filter(|&pid| pid > 0)
}

impl Link {
    /// Holds the link for a post: refused once cut, and cut here if its `shm` peer process
    /// has exited (the provider would spin forever on a lock the dead process held).
    pub(crate) fn hold(&self) -> Result<Held<'_>, BackendError> {
        let refused = |why: &str| {
            BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!("the connection to this peer was cut: {why}"),
            )
        };
        {
            let guard = self.state.read();
            if let Some(why) = &guard.cut {
                return Err(refused(why));
            }
            if !self.process.as_ref().is_some_and(PeerProcess::has_exited) {
                return Ok(Held { link: self, guard });
            }
        }
        let why = self.exited();
        self.cut(&why, false);
        Err(refused(&why))
    }

    fn exited(&self) -> String {
        let pid = self.process.as_ref().map_or(0, PeerProcess::pid);
        format!("the peer process {pid} has exited")
    }

    /// Cuts the link if that is safe, which is only when no byte of its transfers can move
    /// any more. Every transfer posted through it then fails, and later posts are refused.
    /// Returns whether the link is cut.
    ///
    /// - `shm`: once the peer process has exited (the provider copies through the target
    ///   process, so a live one could still write).
    /// - `tcp;ofi_rxm` and the like: when the peer has an endpoint of its own, by closing it,
    ///   which closes its connections; data arriving for them is refused by the kernel. Its
    ///   `fi_av_remove` is no cut: in libfabric 1.17 the connection goes on, and READ data
    ///   landed in the local region after it once a cut network link came back
    ///   (`conformance/tests/two_hosts.rs`).
    pub(crate) fn cut_if_safe(&self, fabric: &Fabric) -> bool {
        if self.state.read().cut.is_some() {
            return true;
        }
        if fabric.provider == "shm" {
            match &self.process {
                Some(p) if p.has_exited() => {
                    self.cut(&self.exited(), false);
                    true
                }
                _ => false,
            }
        } else if self.own_endpoint {
            self.cut("its endpoint was closed", true);
            true
        } else {
            false
        }
    }

    /// Marks the link cut, closes its own endpoint if `close` (on `shm` it stays open:
    /// closing may touch the dead peer's region), and fails its transfers. Its address-vector
    /// entry stays (libfabric 1.17's shm provider breaks after `fi_av_remove`, see
    /// `Links::release`; elsewhere it goes with the endpoint, or at the last release).
    fn cut(&self, why: &str, close: bool) {
        let mut state = self.state.write();
        if state.cut.is_none() {
            tracing::warn!(reason = why, "libfabric link cut");
            state.cut = Some(why.to_owned());
            if close {
                // No post runs (the write lock) and none will: the endpoint closes here.
                drop(state.endpoint.take());
            }
        }
        drop(state);
        let reason = FailureReason::RemoteDisconnect(format!("the connection was cut: {why}"));
        for t in self.transfers.take() {
            t.cut(reason.clone());
        }
    }
}

/// Every link by endpoint name.
#[derive(Default)]
pub(crate) struct Links {
    by_name: Mutex<HashMap<Vec<u8>, Arc<Link>>>,
}

impl Links {
    /// The link to endpoint `name`, shared with other peers that name it, or a new one (a cut
    /// link is never reused).
    pub(crate) fn acquire(
        &self,
        fabric: &Arc<Fabric>,
        name: &[u8],
    ) -> Result<Arc<Link>, BackendError> {
        let bad = |why: String| BackendError::new(BackendErrorKind::MalformedAddress, why);
        let shm = fabric.provider == "shm";
        let mut by_name = self.by_name.lock();
        let previous = by_name.get(name).cloned();
        if let Some(link) = &previous {
            if link.state.read().cut.is_none() {
                link.peers.fetch_add(1, Ordering::AcqRel);
                return Ok(link.clone());
            }
        }
        let process = if shm {
            match shm_pid(name) {
                // A peer whose process is gone is refused here (RemoteDisconnect).
                Some(pid) => Some(PeerProcess::open(pid, None)?),
                None => None,
            }
        } else {
            None
        };
        let endpoint = match fabric.endpoint_per_peer {
            true => Some(Endpoint::open(fabric)?),
            false => None,
        };
        let own_endpoint = endpoint.is_some();
        let insert = |av: *mut fid_av| {
            let mut addr: fi_addr_t = 0;
            // SAFETY: a live address vector; `name` holds one address of the provider's
            // length.
            let n = unsafe {
                fi_av_insert(
                    av,
                    name.as_ptr().cast(),
                    1,
                    &mut addr,
                    0,
                    std::ptr::null_mut(),
                )
            };
            match n {
                1 => Ok(addr),
                n => Err(bad(format!("fi_av_insert accepted {n} of 1 addresses"))),
            }
        };
        let addr = match (&endpoint, previous) {
            // The peer's own address vector, closed with its endpoint.
            (Some(endpoint), _) => insert(endpoint.av)?,
            // shm keeps entries in the shared vector (see `release`): the cut one's is reused.
            (None, Some(cut)) if shm => cut.addr,
            (None, _) => insert(fabric.av)?,
        };
        let link = Arc::new(Link {
            addr,
            name: name.to_vec(),
            state: RwLock::new(LinkState {
                cut: None,
                endpoint,
            }),
            peers: AtomicUsize::new(1),
            transfers: PostedTransfers::default(),
            process,
            own_endpoint,
        });
        by_name.insert(name.to_vec(), link.clone());
        Ok(link)
    }

    /// A peer no longer uses `link`: the last one forgets it. A peer's own endpoint and
    /// address vector close with the link, once the last peer drops it; an entry in the
    /// backend's address vector is removed, except on `shm`.
    pub(crate) fn release(&self, fabric: &Fabric, link: &Arc<Link>) {
        let mut by_name = self.by_name.lock();
        if link.peers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if fabric.provider == "shm" && !link.own_endpoint {
            // libfabric 1.17's shm provider breaks after fi_av_remove (a later connection
            // crashes in fi_cq_read or fi_av_insert, or its writes are never completed; found
            // by the model-based test), so entries of the backend's vector stay until the
            // backend closes, for reuse.
            return;
        }
        if by_name
            .get(&link.name)
            .is_some_and(|l| Arc::ptr_eq(l, link))
        {
            by_name.remove(&link.name);
        }
        if link.own_endpoint {
            return;
        }
        let mut addr = link.addr;
        // SAFETY: a live address vector and an entry no connected peer uses, removed once
        // (a link is cut only on shm or with its own endpoint, and neither gets here); no
        // transfer to it is held (the generic layer disconnects only after every one is
        // released).
        let ret = unsafe { fi_av_remove(fabric.av, &mut addr, 1, 0) };
        if ret != 0 {
            tracing::debug!(error = %errors::error("fi_av_remove", ret as isize), "disconnect");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shm_pid;

    #[test]
    fn shm_names_give_their_pid() {
        assert_eq!(shm_pid(b"31901:1000:0"), Some(31901));
        assert_eq!(shm_pid(b"fi_shm://42:0:1\0"), Some(42));
        assert_eq!(shm_pid(b"my-endpoint"), None);
        assert_eq!(shm_pid(b"0:0:0"), None);
        assert_eq!(shm_pid(&[0xff, 0xfe]), None);
    }
}
