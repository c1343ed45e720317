//! The [`Transport`] trait: the user contract.

use blockwire_core::{
    BackendStats, BlockIndex, CancelMode, Capabilities, PeerDescriptor, PeerId, PollResult, Result,
    TransferId,
};
use enum_dispatch::enum_dispatch;

use crate::{Region, Registration};
// enum_dispatch writes the dispatching impl here, naming the enum and its variants' types.
#[cfg(feature = "shm")]
#[allow(unused_imports)]
use crate::{AnyTransport, BlockTransport};

/// One-sided block transfers between this side's [`Region`] and registered remote peers.
///
/// Every method takes `&self`: a transport is `Send + Sync` and is shared by many peer
/// sessions, possibly on different threads. [`crate::BlockTransport`] implements every rule
/// below once, over any backend; [`crate::AnyTransport`] picks a backend at run time.
///
/// | method | rule |
/// |---|---|
/// | [`descriptor`](Transport::descriptor) | what a peer needs to connect; serializes to bytes |
/// | [`add_remote_peer`](Transport::add_remote_peer) | validates the descriptor, connects, publishes |
/// | [`add_remote_peer_async`](Transport::add_remote_peer_async) | claims a generation now, connects on the registration worker; a removed or re-added peer is never revived by a late result |
/// | [`remove_remote_peer`](Transport::remove_remote_peer) | unpublishes at once; transfers in flight surface as failed (peer removed) once they stop |
/// | [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks) | validate, post, return an id; never wait |
/// | [`poll`](Transport::poll) | drains one peer's finished transfers, or every peer's |
/// | [`cancel`](Transport::cancel) | immediate: forget; wait: release only what has stopped |
/// | [`close`](Transport::close) | idempotent; never frees memory under a running transfer |
///
/// Each transfer id is reported exactly once: done, failed, or taken by a cancel.
///
/// ```
/// use blockwire::{open, Region, Transport, TransportOptions};
/// let a = open("shm", Region::new(4, 4096)?, TransportOptions::default())?;
/// let b = open("shm", Region::new(4, 4096)?, TransportOptions::default())?;
/// a.region().write_block(0, &[42u8; 4096])?;
/// a.add_remote_peer(&"b".into(), &b.descriptor()?)?;
/// let id = a.write_blocks(&"b".into(), &[0], &[3])?;
/// let mut done = Vec::new();
/// while done.is_empty() {
///     done = a.poll(Some(&"b".into()))?.done;
/// }
/// assert_eq!(done, vec![id]);
/// assert_eq!(b.region().block(3)?, vec![42u8; 4096]);
/// # Ok::<(), blockwire::Error>(())
/// ```
#[enum_dispatch]
pub trait Transport: Send + Sync {
    /// The backend's kind (`"shm"`, ...).
    fn backend_kind(&self) -> &'static str;

    /// What the backend can do.
    fn capabilities(&self) -> Capabilities;

    /// The local block memory (read and write blocks through copies).
    fn region(&self) -> &Region;

    /// Bytes per block.
    fn block_len(&self) -> usize {
        self.region().block_len()
    }

    /// Number of local blocks.
    fn num_blocks(&self) -> u32 {
        self.region().num_blocks()
    }

    /// Address of local block 0.
    fn base_addr(&self) -> u64 {
        self.region().base_addr()
    }

    /// The config fingerprint; empty when no config fields were given (compatible with anyone).
    fn fingerprint(&self) -> &str;

    /// What a peer needs to connect to this transport. `Err(Closed)` after close.
    fn descriptor(&self) -> Result<PeerDescriptor>;

    /// Validates `desc` (backend kind, block length, fingerprint, shape), connects, and
    /// publishes the peer under `peer`, replacing an earlier registration of that id. Blocks
    /// until the registration worker has connected.
    fn add_remote_peer(&self, peer: &PeerId, desc: &PeerDescriptor) -> Result<()>;

    /// Like [`add_remote_peer`](Transport::add_remote_peer) without blocking: claims the next
    /// generation for `peer` now and connects on the registration worker. The handle resolves
    /// to `Err(Superseded)` when the peer is removed or added again before this registration
    /// publishes; its backend resources are then released. A descriptor that fails validation
    /// gives an already-resolved handle and claims nothing.
    fn add_remote_peer_async(&self, peer: &PeerId, desc: &PeerDescriptor) -> Registration;

    /// Unpublishes `peer` and invalidates any registration of it in flight, without waiting
    /// for one. Transfers still running to it surface through `poll` as failed (peer removed)
    /// once they stop; the backend's peer resources are freed only after that.
    /// `Err(UnknownPeer)` when the peer is neither published nor being registered.
    fn remove_remote_peer(&self, peer: &PeerId) -> Result<()>;

    /// Posts a WRITE of local block `local[i]` to the peer's block `remote[i]`, for every `i`.
    /// Validates before anything moves (equal non-zero lengths, every index in range, no
    /// remote block twice); any error leaves nothing tracked. Never waits for the transfer.
    fn write_blocks(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId>;

    /// Posts a READ of the peer's block `remote[i]` into local block `local[i]`. Same
    /// validation as a write, with the local block as the destination that must not repeat.
    fn read_blocks(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId>;

    /// Drains finished transfers: of `peer` only (other peers' completions stay for their own
    /// poll), or of every peer with `None` (shutdown drain). Never blocks.
    fn poll(&self, peer: Option<&PeerId>) -> Result<PollResult>;

    /// Cancels transfers. [`CancelMode::Immediate`] stops tracking each known id and returns
    /// `[]` (the backend may keep moving bytes for a while; its resources are released once
    /// it stops). [`CancelMode::Wait`] asks running transfers to stop, releases only those that
    /// have stopped, and returns the ids still tracked; poll until each surfaces. Once an id is
    /// no longer returned, no byte of it lands afterwards. Unknown ids are ignored.
    fn cancel(&self, ids: &[TransferId], mode: CancelMode) -> Result<Vec<TransferId>>;

    /// Stops registrations, cancels what is in flight, waits (bounded by the close timeout)
    /// for running transfers to stop, and releases every peer. Idempotent. If a transfer is
    /// still running at the deadline, close logs a warning and leaks the memory it may touch
    /// rather than free it. Every later call returns `Err(Closed)`. Dropping closes.
    fn close(&self) -> Result<()>;

    /// Whether [`close`](Transport::close) has been called.
    fn is_closed(&self) -> bool;

    /// The backend's live resources (connected peers, unreleased transfers).
    fn backend_stats(&self) -> BackendStats;

    /// Published peers, sorted.
    fn peers(&self) -> Vec<PeerId>;
}
