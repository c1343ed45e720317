//! Connecting to a peer's agent ([`Inner::connect`]) and letting it go.

use blockwire_core::kit::Live;
use blockwire_core::{BackendError, BackendErrorKind, PeerDescriptor};
use nixl_sys::{MemType, XferDescList, XferDlistHandle};

use crate::address;
use crate::agent::{Inner, Remote, nixl_error};

/// A connected peer: the remote agent and its prepared descriptor list.
pub struct NixlPeer {
    pub(crate) remote: String,
    /// Released with the agent's lock held; never after the agent is gone (the handle does
    /// not keep it alive).
    pub(crate) list: Option<XferDlistHandle>,
    pub(crate) num_blocks: u32,
    /// The peer's block 0, which notification probes read a byte of.
    pub(crate) probe_addr: usize,
    _live: Live,
}

// SAFETY: the prepared list is only used under the backend's mutex.
unsafe impl Send for NixlPeer {}
// SAFETY: as for `Send`.
unsafe impl Sync for NixlPeer {}

impl NixlPeer {
    /// For a peer let go after the agent is gone: releasing its list would reach freed
    /// memory, so it is leaked.
    pub(crate) fn forget_list(mut self) {
        std::mem::forget(self.list.take());
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
            Some(r) if r.metadata != addr.metadata => return Err(namesake(addr.agent, None)),
            Some(_) => false,
            None => {
                self.load(addr.agent, addr.metadata)?;
                true
            }
        };
        let mut blocks =
            XferDescList::new(MemType::Dram).map_err(|e| nixl_error("descriptors", e))?;
        let block_len = desc.block_len as usize;
        for i in 0..desc.num_blocks {
            let addr = desc.base_addr as usize + i as usize * block_len;
            blocks.add_desc(addr, block_len, 0);
        }
        let list = match self.agent.prepare_xfer_dlist(addr.agent, &blocks, None) {
            Ok(list) => list,
            Err(e) => {
                if fresh {
                    let _ = self.agent.invalidate_remote_md(addr.agent);
                }
                return Err(nixl_error(
                    &format!(
                        "preparing the peer's descriptor list ({} blocks of {block_len} bytes \
                         at {:#x}: NIXL finds them in no memory the agent {:?} registered \
                         unless that geometry is what it registered)",
                        desc.num_blocks, desc.base_addr, addr.agent
                    ),
                    e,
                ));
            }
        };
        self.remotes
            .entry(addr.agent.to_owned())
            .or_insert_with(|| Remote {
                peers: 0,
                metadata: addr.metadata.to_vec(),
            })
            .peers += 1;
        Ok(NixlPeer {
            remote: addr.agent.to_owned(),
            list: Some(list),
            num_blocks: desc.num_blocks,
            probe_addr: desc.base_addr as usize,
            _live: live,
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

    /// Releases the peer's list, and unloads its agent's metadata with its last peer.
    pub(crate) fn disconnect(&mut self, peer: NixlPeer) {
        let NixlPeer { remote, list, .. } = peer;
        drop(list);
        let last = match self.remotes.get_mut(&remote) {
            Some(r) if r.peers > 1 => {
                r.peers -= 1;
                false
            }
            _ => true,
        };
        if last {
            self.remotes.remove(&remote);
            if let Err(e) = self.agent.invalidate_remote_md(&remote) {
                tracing::debug!(%remote, error = %e, "unloading remote agent metadata");
            }
        }
    }
}
