//! Connecting to a peer's agent ([`Inner::connect`]) and letting it go.

use std::sync::Arc;

use blockwire_core::kit::Live;
use blockwire_core::kit::fence::{FenceHold, FenceRef, PeerFence};
use blockwire_core::{BackendError, BackendErrorKind, PeerDescriptor};
use nixl_sys::{MemType, XferDescList, XferDlistHandle};
use parking_lot::Mutex;

use crate::address;
use crate::agent::{Inner, Remote, nixl_error};

/// A connected peer: the remote agent and its prepared descriptor lists.
pub struct NixlPeer {
    pub(crate) remote: String,
    /// Whether NIXL found the peer's region in one registration (connect prepared it as one
    /// descriptor, then released that list: it was only the check); `false` for a peer
    /// registered in pieces, whose `blocks` connect prepared instead.
    whole: bool,
    /// One descriptor per block, for transfers of scattered blocks (`make_xfer_req` with
    /// block indices): prepared by the first such transfer to the peer, on the posting thread
    /// (19,599 descriptors took NIXL 0.7 ms and more: not the add's to pay). Released with the
    /// agent's lock held; never after the agent is gone (the handle does not keep it alive).
    pub(crate) blocks: Mutex<Option<XferDlistHandle>>,
    /// The address of the peer's block 0 in its agent: what its descriptors are built from,
    /// and what notification probes read a byte of.
    pub(crate) base: usize,
    pub(crate) num_blocks: u32,
    pub(crate) block_len: usize,
    /// The peer's close fence, where this process can reach it: on its host, where NIXL's UCX
    /// plugin copies inside this side's post (`blockwire_core::kit::fence`).
    fence: Option<Arc<PeerFence>>,
    _live: Live,
}

// SAFETY: the prepared lists are only used, and released, under the backend's mutex.
unsafe impl Send for NixlPeer {}
// SAFETY: as for `Send`.
unsafe impl Sync for NixlPeer {}

impl NixlPeer {
    /// Holds the peer's close fence for a post: refused (a remote disconnect) once the peer
    /// closed or while it closes. `None` for a peer without one here.
    pub(crate) fn hold_fence(&self) -> Result<Option<FenceHold>, BackendError> {
        self.fence
            .as_ref()
            .map(|f| f.hold())
            .transpose()
            .map_err(|why| BackendError::new(BackendErrorKind::RemoteDisconnect, why))
    }

    /// Whether NIXL found the peer's region in one registration: only then may a run of
    /// adjacent blocks be one descriptor (in a peer registered in pieces, a run across two
    /// lies in no one registration, and NIXL refuses the transfer).
    pub(crate) fn registered_whole(&self) -> bool {
        self.whole
    }

    /// What is left to release of a peer let go: its list and its agent's name. The peer no
    /// longer counts as connected from here on.
    pub(crate) fn depart(self) -> Departing {
        let NixlPeer { remote, blocks, .. } = self;
        Departing {
            remote,
            blocks: blocks.into_inner(),
        }
    }
}

/// A peer let go ([`NixlPeer::depart`]), released under the agent's lock
/// ([`Inner::disconnect`]), or parked for its next holder ([`crate::lock::AgentLock`]).
pub(crate) struct Departing {
    remote: String,
    blocks: Option<XferDlistHandle>,
}

// SAFETY: as for `NixlPeer`: its list is released only under the agent's lock.
unsafe impl Send for Departing {}

impl Departing {
    /// For a peer let go after the agent is gone: releasing its list would reach freed
    /// memory, so it is leaked.
    pub(crate) fn forget(self) {
        std::mem::forget(self.blocks);
    }
}

/// Why `connect` refuses a peer whose agent is named `agent`, like this one (`own`: it is
/// this transport's own descriptor) or like another connected peer (`None`).
fn namesake(agent: &str, own: Option<bool>) -> BackendError {
    let why = match own {
        Some(true) => "it is this transport itself: NIXL does not load an agent's own metadata",
        Some(false) => "that is this transport's name",
        None => {
            "another connected peer has that name, with other metadata (a peer restarted under \
             the same name is added again once its former registration is removed)"
        }
    };
    tracing::warn!(
        agent,
        why,
        "nixl peer refused: its agent name is in use here"
    );
    BackendError::new(
        BackendErrorKind::NameInUse,
        format!(
            "the peer's NIXL agent is named {agent:?} and {why}; NIXL tells agents apart by \
             name only, so connected transports need distinct names"
        ),
    )
}

impl Inner {
    /// Loads the peer's metadata (once per remote agent) and prepares its descriptor list.
    /// `own` is this backend's address (to tell its own descriptor from a namesake's).
    pub(crate) fn connect(
        &mut self,
        desc: &PeerDescriptor,
        own: &[u8],
        live: Live,
    ) -> Result<NixlPeer, BackendError> {
        let addr = address::decode(&desc.address)?;
        addr.region.check(desc)?;
        if addr.agent == self.name {
            return Err(namesake(addr.agent, Some(desc.address == own)));
        }
        let fresh = match self.remotes.get(addr.agent) {
            Some(r) if r.metadata != addr.metadata && r.peers > 0 => {
                return Err(namesake(addr.agent, None));
            }
            Some(r) if r.metadata != addr.metadata => {
                // Idle, from an agent of that name before (restarted): unloaded for this one.
                self.unload(addr.agent);
                self.load(addr.agent, addr.metadata)?;
                true
            }
            Some(_) => false,
            None => {
                self.load(addr.agent, addr.metadata)?;
                true
            }
        };
        let base = desc.base_addr as usize;
        let block_len = desc.block_len as usize;
        // The region as one descriptor: NIXL checks it lies in the peer's registrations. A
        // peer that registered it in pieces (a plain agent may) gets the per-block list now.
        let whole = (block_len.checked_mul(desc.num_blocks as usize))
            .ok_or_else(|| BackendError::new(BackendErrorKind::Other, "region size overflows"))
            .and_then(|len| region_list(base, len))
            .and_then(|l| {
                self.agent
                    .prepare_xfer_dlist(addr.agent, &l, None)
                    .map_err(|e| nixl_error("preparing the peer's region", e))
            });
        let (whole, blocks) = match whole {
            Ok(region) => {
                // Released here, under the agent's lock: the check was all it was for.
                drop(region);
                (true, None)
            }
            Err(_) => match self.prepare_blocks(addr.agent, base, desc.num_blocks, block_len) {
                Ok(blocks) => (false, Some(blocks)),
                Err(e) => {
                    if fresh {
                        let _ = self.agent.invalidate_remote_md(addr.agent);
                    }
                    return Err(e);
                }
            },
        };
        self.remotes
            .entry(addr.agent.to_owned())
            .or_insert_with(|| Remote {
                peers: 0,
                metadata: addr.metadata.to_vec(),
            })
            .peers += 1;
        // No longer idle (if it was).
        self.idle.retain(|name| name != addr.agent);
        Ok(NixlPeer {
            remote: addr.agent.to_owned(),
            whole,
            blocks: Mutex::new(blocks),
            base,
            num_blocks: desc.num_blocks,
            block_len,
            // A descriptor from NIXL's own metadata names no fence: a blockwire target of
            // this host published it under that metadata.
            fence: addr
                .fence
                .or_else(|| FenceRef::published(addr.metadata))
                .as_ref()
                .and_then(PeerFence::open),
            _live: live,
        })
    }

    /// Prepares the list of one descriptor per block of agent `agent`'s region (`num_blocks`
    /// of `block_len` bytes at `base`), which `make_xfer_req` takes block indices into.
    pub(crate) fn prepare_blocks(
        &self,
        agent: &str,
        base: usize,
        num_blocks: u32,
        block_len: usize,
    ) -> Result<XferDlistHandle, BackendError> {
        let mut blocks =
            XferDescList::new(MemType::Dram).map_err(|e| nixl_error("descriptors", e))?;
        for i in 0..num_blocks {
            blocks.add_desc(base + i as usize * block_len, block_len, 0);
        }
        self.agent
            .prepare_xfer_dlist(agent, &blocks, None)
            .map_err(|e| {
                nixl_error(
                    &format!(
                        "preparing the peer's descriptor list ({num_blocks} blocks of \
                         {block_len} bytes at {base:#x}: NIXL finds them in no memory the \
                         agent {agent:?} registered unless that geometry is what it \
                         registered)"
                    ),
                    e,
                )
            })
    }

    /// `load_remote_md`, checking that the metadata is the agent's the address names.
    fn load(&mut self, agent: &str, metadata: &[u8]) -> Result<(), BackendError> {
        let loaded = self.agent.load_remote_md(metadata).map_err(|e| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("loading the peer's agent metadata: {e}"),
            )
        })?;
        if loaded == agent {
            return Ok(());
        }
        // The address lies about its agent: unload what it made NIXL load (unless a connected
        // peer's agent is the one its metadata names).
        if !self.remotes.contains_key(&loaded) {
            let _ = self.agent.invalidate_remote_md(&loaded);
        }
        Err(BackendError::new(
            BackendErrorKind::MalformedAddress,
            format!("nixl address: names agent {agent:?}, its metadata {loaded:?}"),
        ))
    }

    /// Releases the peer's list. The agent's metadata stays loaded when its last peer goes,
    /// idle, for the next connection to it: NIXL's UCX plugin closes an agent's endpoints
    /// when its metadata is unloaded, and UCX 1.13 destroys an endpoint closed that way only
    /// with its worker while the agent lives (see the ucx backend's `idle` module), so every
    /// add and remove of a live agent left two file descriptors behind (found by
    /// `blockwire_conformance::churn`; NIXL's issue 2025 is the same leak). At most
    /// [`MAX_IDLE_AGENTS`] stay idle: the oldest beyond that is unloaded.
    pub(crate) fn disconnect(&mut self, peer: Departing) {
        let Departing { remote, blocks } = peer;
        drop(blocks);
        let Some(r) = self.remotes.get_mut(&remote) else {
            return;
        };
        r.peers = r.peers.saturating_sub(1);
        if r.peers > 0 {
            return;
        }
        self.idle.push_back(remote);
        while self.idle.len() > MAX_IDLE_AGENTS {
            if let Some(oldest) = self.idle.pop_front() {
                self.unload(&oldest);
            }
        }
    }

    /// Forgets agent `remote` and unloads its metadata.
    fn unload(&mut self, remote: &str) {
        self.remotes.remove(remote);
        self.idle.retain(|name| name != remote);
        if let Err(e) = self.agent.invalidate_remote_md(remote) {
            tracing::debug!(%remote, error = %e, "unloading remote agent metadata");
        }
    }
}

/// How many loaded agents no peer uses stay loaded (see [`Inner::disconnect`]).
pub(crate) const MAX_IDLE_AGENTS: usize = 64;

/// One descriptor over `len` bytes at `base`.
fn region_list(base: usize, len: usize) -> Result<XferDescList<'static>, BackendError> {
    let mut list = XferDescList::new(MemType::Dram).map_err(|e| nixl_error("descriptors", e))?;
    list.add_desc(base, len, 0);
    Ok(list)
}
