//! The remote endpoints this backend talks to: one address-vector entry per endpoint name,
//! shared by the connected peers that name it, and the cut that fails them all.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use blockwire_core::kit::ProcessWatch;
use blockwire_core::kit::{CuttableLink, LinkHold};
use blockwire_core::{BackendError, BackendErrorKind, FailureReason};
use libfabric_sys::*;
use parking_lot::Mutex;

use crate::completion::Outstanding;
use crate::completion::Transfer;
use crate::endpoint::Endpoint;
use crate::errors;
use crate::fabric::Fabric;
use crate::guard::{ReadGuard, ReadLock, ReadTarget};
use crate::local;

/// One remote endpoint: its address-vector entry, whether it was cut, and the transfers posted
/// to it since.
pub(crate) struct Link {
    /// Its entry in the backend's address vector; `None` when the peer has an endpoint of its
    /// own (`endpoint_per_peer`), whose own vector holds the entry.
    shared_addr: Option<fi_addr_t>,
    name: Vec<u8>,
    /// Its endpoint, which posts hold shared for their whole duration (so a cut that closes
    /// it never runs under one), the cut's mark (apart: a cut that closes nothing never waits
    /// for a post stuck in the provider, as 1.17's `shm` spins on a lock its peer died
    /// holding), and the transfers posted through it, which the cut fails.
    link: CuttableLink<LinkState, Transfer>,
    /// Connected peers that use this entry.
    peers: AtomicUsize,
    /// The `shm` provider's peer process, when its endpoint name gives the pid.
    process: Option<ProcessWatch>,
    /// The `shm` provider's file of a peer in another process: the provider removes it when
    /// the peer's endpoint closes, after which that peer never serves an operation again.
    shm_file: Option<PathBuf>,
    /// That file, open: READs to the peer hold its shared lock, which the peer's close waits
    /// for (`crate::guard`). `None` with `shm_file` when the file was gone at the connect.
    read_lock: Option<ReadLock>,
    /// Transfers with operations queued for the retry thread to post (`crate::retry`):
    /// later posts queue behind them.
    pub(crate) queued: AtomicUsize,
    /// A peer endpoint of this process: its backend, kept alive (and its region mapped)
    /// until this link, and the endpoint that posts through it, are gone (`crate::local`).
    /// Last, so it is dropped after `state`.
    _peer_fabric: Option<Arc<Fabric>>,
}

pub(crate) struct LinkState {
    /// This peer's own endpoint (`endpoint_per_peer`; closed by a cut on `tcp`), else posts
    /// use the backend's. Enabled in the background after the peer is added, or by its
    /// first post ([`Link::enable_endpoint`]).
    endpoint: Option<Endpoint>,
}

/// A post's hold on a link that is not cut (see [`Link::hold`]).
pub(crate) type Held<'a> = LinkHold<'a, LinkState, Transfer>;

/// Where a post to a peer goes: the endpoint, its outstanding operations, and the peer's
/// address in the endpoint's address vector.
pub(crate) struct Route<'a> {
    pub(crate) ep: *mut fid_ep,
    pub(crate) outstanding: &'a Arc<Outstanding>,
    pub(crate) addr: fi_addr_t,
}

impl Link {
    /// Whether the peer has an endpoint of its own (`endpoint_per_peer`).
    fn own_endpoint(&self) -> bool {
        self.shared_addr.is_none()
    }

    /// Where posts to this peer go, while `held`: its own endpoint, or `main` (the
    /// backend's). An error when its own endpoint is not enabled (a post enables it first,
    /// [`Link::enable_endpoint`]; only a cut takes it away, and a held link is not cut).
    pub(crate) fn route<'a>(
        &self,
        held: &'a Held<'_>,
        main: (*mut fid_ep, &'a Arc<Outstanding>),
    ) -> Result<Route<'a>, BackendError> {
        match (&held.endpoint, self.shared_addr) {
            (_, Some(addr)) => Ok(Route {
                ep: main.0,
                outstanding: main.1,
                addr,
            }),
            (Some(e), None) if e.is_enabled() => Ok(Route {
                ep: e.ep,
                outstanding: &e.outstanding,
                addr: e.addr,
            }),
            (_, None) => Err(BackendError::other(
                "the peer's endpoint is not open (opening it failed)",
            )),
        }
    }

    /// Opens this peer's own endpoint, if it has one and it is not open yet: called by the
    /// opener thread soon after the peer is added (`crate::opener`), and by each post before
    /// it holds the link, so a post never waits for more than the open under way. Nothing to
    /// do once the link is cut (its posts are refused).
    pub(crate) fn enable_endpoint(&self) -> Result<(), BackendError> {
        if !self.own_endpoint() {
            return Ok(());
        }
        if let Ok(held) = self.link.hold() {
            if held.endpoint.as_ref().is_some_and(Endpoint::is_enabled) {
                return Ok(());
            }
        }
        let mut state = self.link.write();
        // A cut marks the link before it takes the state: one marked now finds the endpoint
        // closed or leaves it to this; one marked later waits for this open, then closes it.
        if self.link.why_cut().is_some() {
            return Ok(());
        }
        match state.endpoint.as_mut() {
            Some(e) => e.enable(),
            None => Ok(()),
        }
    }
}

/// A `shm` provider endpoint name without its prefix and padding (`<pid>:<uid>:<n>`): the
/// name of its file in `/dev/shm`.
pub(crate) fn shm_file_name(name: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(name).ok()?;
    let text = text.trim_end_matches('\0');
    Some(text.strip_prefix("fi_shm://").unwrap_or(text))
}

/// The pid in a `shm` provider endpoint name (`[fi_shm://]<pid>:<uid>:<n>`, exactly: see
/// `crate::reap`), if it has one.
fn shm_pid(name: &[u8]) -> Option<u32> {
    crate::reap::parse_name(shm_file_name(name)?)
        .filter(|n| !n.message)
        .map(|n| n.pid)
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
            let held = self.link.hold().map_err(|why| refused(&why))?;
            if self.gone().is_none() {
                return Ok(held);
            }
        }
        let why = self.gone().unwrap_or_default();
        self.cut(&why, false);
        Err(refused(&why))
    }

    /// [`Link::hold`] for a post of the retry thread, which come while the peer
    /// refuses operations, as a dying one does: refused, and the link cut, also while the
    /// `shm` peer process has a `SIGKILL` pending (between the kill and its exit the
    /// provider would post into it, and spin forever if it died holding its region's lock).
    pub(crate) fn hold_for_retry(&self) -> Result<Held<'_>, BackendError> {
        if let Some(p) = self.process.as_ref().filter(|p| p.is_dying()) {
            let why = format!("the peer process {} is being killed", p.pid());
            self.cut(&why, false);
        }
        self.hold()
    }

    /// A post's guard against the peer's close for its READs (`crate::guard`).
    pub(crate) fn read_guard(&self) -> ReadGuard<'_> {
        ReadGuard::new(self, self.read_lock.as_ref())
    }

    /// Cuts the link after a post found its `shm` peer closed or closing (`why`), once the
    /// post let go of the link.
    pub(crate) fn cut_closed(&self, why: &str) {
        self.cut(why, false);
    }

    /// Why the `shm` peer in another process will never serve an operation again: its
    /// process exited, or its endpoint closed (the peer removed its file). `None` while it
    /// may.
    fn gone(&self) -> Option<String> {
        let process = self.process.as_ref()?;
        if process.has_exited() {
            return Some(format!("the peer process {} has exited", process.pid()));
        }
        let file = self.shm_file.as_ref()?;
        (!file.exists()).then(|| format!("{} closed ({} is gone)", self.describe(), file.display()))
    }

    /// Removes the region file of a `shm` peer whose process exited: the provider removes it
    /// when its endpoint closes, so a killed peer leaves it behind (16 MiB in `/dev/shm`),
    /// and nothing will open it again. This process's mappings of it stay valid. The name
    /// comes from the peer's descriptor, untrusted: the file goes only if the reaper's rules
    /// (`crate::reap`: the provider's naming, this user's file, its header naming that dead
    /// pid) say it is stale.
    fn remove_dead_peer_file(&self) {
        let (Some(process), Some(file)) = (&self.process, &self.shm_file) else {
            return;
        };
        if process.has_exited() {
            crate::reap::reap_one(file);
        }
    }

    /// Cuts the link because its peer, an endpoint of this process, revoked access: the
    /// peer's region stays mapped (this link holds its backend) until this link's own
    /// endpoint, closed here, can no longer touch it.
    pub(crate) fn cut_local_peer(&self) {
        self.cut(
            "the peer transport in this process closed",
            self.own_endpoint(),
        );
    }

    /// Cuts the link if that is safe, which is only when no byte of its transfers can move
    /// any more. Every transfer posted through it then fails, and later posts are refused.
    /// Returns whether the link is cut.
    ///
    /// - `shm`: once the peer process has exited or its endpoint closed (the provider copies
    ///   through the target's progress, so a live one could still write). A peer of this
    ///   process is cut when it revokes access ([`Link::cut_local_peer`]).
    /// - `tcp;ofi_rxm` and the like: when the peer has an endpoint of its own, by closing it,
    ///   which closes its connections; data arriving for them is refused by the kernel. Its
    ///   `fi_av_remove` is no cut: in libfabric 1.17 the connection goes on, and READ data
    ///   landed in the local region after it once a cut network link came back
    ///   (`conformance/tests/two_hosts.rs`).
    pub(crate) fn cut_if_safe(&self, fabric: &Fabric) -> bool {
        if self.link.why_cut().is_some() {
            return true;
        }
        if fabric.provider == "shm" {
            match self.gone() {
                Some(why) => {
                    self.cut(&why, false);
                    true
                }
                None => false,
            }
        } else if self.own_endpoint() {
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
        if !self.link.mark_cut(why) {
            return;
        }
        if close {
            // No post runs (the write lock) and none will (the cut): the endpoint closes.
            drop(self.link.write().endpoint.take());
        }
        self.link
            .fail_posted(FailureReason::RemoteDisconnect(format!(
                "the connection was cut: {why}"
            )));
    }
}

impl ReadTarget for Link {
    fn gone(&self) -> Option<String> {
        Link::gone(self)
    }

    /// `the peer's endpoint in process <pid>`.
    fn describe(&self) -> String {
        match &self.process {
            Some(p) => format!("the peer's endpoint in process {}", p.pid()),
            None => "the peer's endpoint".to_owned(),
        }
    }
}

/// On the `shm` provider, how many endpoints of removed peers a backend keeps open, idle, for
/// the next connection to the same peer (see the crate docs' **Endpoints**).
///
/// ```
/// assert_eq!(blockwire_libfabric::MAX_IDLE_ENDPOINTS, 16);
/// ```
pub const MAX_IDLE_ENDPOINTS: usize = 16;

/// Closes the idle peer endpoints (no peer uses them) whose peer is gone or whose link was
/// cut, then as many more as exceed [`MAX_IDLE_ENDPOINTS`].
fn trim_idle(by_name: &mut HashMap<Vec<u8>, Arc<Link>>) {
    let idle: Vec<(Vec<u8>, bool)> = by_name
        .iter()
        .filter(|(_, l)| l.own_endpoint() && l.peers.load(Ordering::Acquire) == 0)
        .map(|(name, l)| {
            let stale = l.link.why_cut().is_some() || l.gone().is_some();
            (name.clone(), stale)
        })
        .collect();
    let (stale, live): (Vec<_>, Vec<_>) = idle.into_iter().partition(|(_, stale)| *stale);
    let extra = live.len().saturating_sub(MAX_IDLE_ENDPOINTS);
    for (name, _) in stale.iter().chain(live.iter().take(extra)) {
        by_name.remove(name);
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
        let shm = fabric.provider == "shm";
        let mut by_name = self.by_name.lock();
        let previous = by_name.get(name).cloned();
        if let Some(link) = &previous {
            // An idle one (kept on `shm`, see `release`) whose peer went away meanwhile is
            // replaced: a new link refuses a peer that is gone.
            let idle_and_gone = || link.peers.load(Ordering::Acquire) == 0 && link.gone().is_some();
            if link.link.why_cut().is_none() && !idle_and_gone() {
                link.peers.fetch_add(1, Ordering::AcqRel);
                return Ok(link.clone());
            }
        }
        let pid = if shm { shm_pid(name) } else { None };
        let link = if pid == Some(std::process::id()) {
            // A peer endpoint of this process: its backend stays alive while this link is. One
            // that closed is refused: the provider would reach it through a stale mapping.
            local::attach(name, |peer_fabric| {
                Self::make_link(fabric, name, previous.as_ref(), None, Some(peer_fabric))
            })?
        } else {
            // A peer whose process is gone is refused here (RemoteDisconnect).
            let process = pid.map(|pid| ProcessWatch::open(pid, None)).transpose()?;
            Self::make_link(fabric, name, previous.as_ref(), process, None)?
        };
        by_name.insert(name.to_vec(), link.clone());
        Ok(link)
    }

    /// A new link to endpoint `name` (replacing the cut `previous`, if any).
    fn make_link(
        fabric: &Arc<Fabric>,
        name: &[u8],
        previous: Option<&Arc<Link>>,
        process: Option<ProcessWatch>,
        peer_fabric: Option<Arc<Fabric>>,
    ) -> Result<Arc<Link>, BackendError> {
        let bad = |why: String| BackendError::new(BackendErrorKind::MalformedAddress, why);
        let shm = fabric.provider == "shm";
        // Only its address vector for now: the endpoint opens in the background
        // (`crate::opener`).
        let endpoint = match fabric.endpoint_per_peer {
            true => Some(Endpoint::new(fabric, name)?),
            false => None,
        };
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
        let shared_addr = match (&endpoint, previous) {
            // The entry is in the peer's own address vector (`Endpoint::new`).
            (Some(_), _) => None,
            // shm keeps entries in the shared vector (see `release`): the cut one's is reused.
            (None, Some(cut)) if shm && cut.shared_addr.is_some() => cut.shared_addr,
            (None, _) => Some(insert(fabric.av)?),
        };
        // `process` is set only for a name of the provider's exact form (`shm_pid`), which
        // holds no '/': the file is in /dev/shm.
        let shm_file = match (&process, shm_file_name(name)) {
            (Some(_), Some(file)) => Some(PathBuf::from(crate::reap::SHM_DIR).join(file)),
            _ => None,
        };
        let read_lock = match &shm_file {
            Some(file) => ReadLock::open(file).map_err(|e| {
                BackendError::other(format!(
                    "opening the peer's endpoint file {}: {e}",
                    file.display()
                ))
            })?,
            None => None,
        };
        Ok(Arc::new(Link {
            shared_addr,
            name: name.to_vec(),
            link: CuttableLink::new(LinkState { endpoint }),
            peers: AtomicUsize::new(1),
            process,
            shm_file,
            read_lock,
            queued: AtomicUsize::new(0),
            _peer_fabric: peer_fabric,
        }))
    }

    /// Closes every idle peer endpoint (the backend is closing: no peer will take one again).
    pub(crate) fn close_idle(&self) {
        self.by_name
            .lock()
            .retain(|_, l| !(l.own_endpoint() && l.peers.load(Ordering::Acquire) == 0));
    }

    /// A peer no longer uses `link`: the last one forgets it. A peer's own endpoint and
    /// address vector close with the link, once the last peer drops it; an entry in the
    /// backend's address vector is removed, except on `shm`.
    pub(crate) fn release(&self, fabric: &Fabric, link: &Arc<Link>) {
        let mut by_name = self.by_name.lock();
        if link.peers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        link.remove_dead_peer_file();
        if fabric.provider == "shm" {
            // libfabric 1.17's shm provider breaks after fi_av_remove (a later connection
            // crashes in fi_cq_read or fi_av_insert, or its writes are never completed; found
            // by the model-based test), so entries of the backend's vector stay until the
            // backend closes, for reuse. So does a peer's own endpoint, idle, for the next
            // connection to the same name: the peer's region keeps a slot for every endpoint
            // that ever reached it, 256 at most, so with a new endpoint per add, a peer
            // removed and added back 256 times could no longer be reached (found by
            // `blockwire_conformance::churn`). Idle endpoints of peers that are gone, or
            // beyond [`MAX_IDLE_ENDPOINTS`], close (each keeps a 16 MiB file in /dev/shm).
            if !link.own_endpoint() {
                return;
            }
            if fabric.is_revoked() {
                // Closed: no peer will take it again (see `close_idle`).
                if by_name
                    .get(&link.name)
                    .is_some_and(|l| Arc::ptr_eq(l, link))
                {
                    by_name.remove(&link.name);
                }
            } else {
                trim_idle(&mut by_name);
            }
            return;
        }
        if by_name
            .get(&link.name)
            .is_some_and(|l| Arc::ptr_eq(l, link))
        {
            by_name.remove(&link.name);
        }
        let Some(mut addr) = link.shared_addr else {
            return;
        };
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
