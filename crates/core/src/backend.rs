//! The [`Backend`] trait: what a data path implements.

use crate::{BackendError, BlockIndex, Op, PeerDescriptor, XferState};

/// What a backend can do. The conformance suite runs only the cases a backend's capabilities
/// allow and reports the others as skipped, with the reason.
///
/// ```
/// use blockwire_core::Capabilities;
/// let mut caps = Capabilities::default();
/// caps.read = true;
/// assert!(caps.read && !caps.abort);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// READ is supported (remote blocks into local blocks).
    pub read: bool,
    /// A running transfer can be stopped early ([`Backend::abort`] takes effect). Without
    /// it, cancel-wait and close wait for the transfer to finish on its own.
    pub abort: bool,
    /// Peers in other processes on the same host can be reached.
    pub cross_process: bool,
    /// A peer that goes away (closes, dies, loses its link) fails the transfers to it within
    /// a bounded time. Without it such transfers may stay running.
    pub remote_disconnect: bool,
    /// A peer process that dies, however and whenever it dies, holds up no other peer's
    /// transfers. Without it (ucx over UCX 1.13's shared-memory transports, where every peer's
    /// messages to this process, READ data and completions included, share one receive queue,
    /// and a peer killed while it writes one there blocks that queue for good), one peer's
    /// death may stop every transfer of this transport: they then fail at the stall timeout
    /// (`PeerFault::Stalled`, a remote disconnect), and the transport must be reopened.
    pub isolates_peers: bool,
    /// `close` revokes every peer's access to the local region before it returns
    /// ([`Backend::revoke`]): afterwards no peer's WRITE lands in it and no peer's READ reads
    /// it (their transfers fail or are refused), so memory the caller owns may be freed.
    /// Without it, a peer on the same host may still copy into or out of the region after
    /// close, because the library copies straight between the processes and nothing on this
    /// side can stop it: the memory must then stay mapped until every peer has removed this
    /// transport.
    pub revoke: bool,
    /// Notifications are carried ([`Backend::notify`]), and arriving ones reach the
    /// transport's inbox.
    pub notifications: bool,
    /// [`Backend::post`] (or [`Backend::notify`]) may move data, or wait for the library, in
    /// the calling thread (a library that copies a large message, or drives a TCP send, inside
    /// its post call). The transport then never calls them on the caller's thread: it queues
    /// the transfer and a posting thread of its own posts it, so `write_blocks` and the others
    /// return at once. A backend whose post only queues work (shm hands a job to its copy
    /// threads) says `false`, and is posted in the caller's thread. ucx, libfabric and nixl
    /// say `true`; the conformance suite also runs the posting thread over any backend through
    /// its fault-injecting wrapper (`FaultPlan::defer_posts`).
    pub posts_in_caller: bool,
    /// Every transfer's end rings the doorbell the backend was opened with
    /// ([`crate::BackendOptions::doorbell`]): done, failed, aborted, its link cut, whatever
    /// ends it, without anybody having to call [`Backend::state`] first (a
    /// [`crate::kit::TransferCell`] made `with_doorbell` does it). The transport's
    /// `poll_wait` then sleeps until a ring; without it, it polls at short intervals instead.
    /// Say it only where it holds in every setting the backend was opened with: a missed
    /// ring makes a waiter sleep until its timeout.
    pub doorbell: bool,
}

/// Live resources of a backend, for tests and leak checks.
///
/// ```
/// use blockwire_core::BackendStats;
/// let s = BackendStats::default();
/// assert_eq!((s.connected_peers, s.live_transfers), (0, 0));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Peers connected and not yet disconnected (dropped).
    pub connected_peers: usize,
    /// Transfers posted and not yet released.
    pub live_transfers: usize,
}

impl BackendStats {
    /// Stats with the given counts.
    ///
    /// ```
    /// # use blockwire_core::BackendStats;
    /// assert_eq!(BackendStats::new(1, 2).live_transfers, 2);
    /// ```
    pub fn new(connected_peers: usize, live_transfers: usize) -> Self {
        BackendStats {
            connected_peers,
            live_transfers,
        }
    }
}

/// A data path: how to connect to a peer, post a block transfer, observe it and release it.
///
/// The rules of the user contract (validation, generations, per-peer polling, cancel modes,
/// close) are implemented once, over any backend, by `blockwire::BlockTransport`. A backend
/// only has to keep these promises:
///
/// - [`Backend::post`] is called with index lists that were already validated: equal, non-zero
///   lengths, every index inside the local region and inside the peer's region as its
///   descriptor states, no destination twice. A backend still must not touch memory outside
///   the two regions whatever it is given (check cheaply, fail with an error).
/// - [`Backend::state`] says [`XferState::Done`] only when every byte is at the target (remote
///   completion, not merely local). An error while checking is a terminal
///   [`XferState::Failed`], never "running forever".
/// - [`Backend::release`] returns `Err(xfer)` (busy) while the transfer may still move a byte;
///   `Ok` means no byte of it will land afterwards. This one promise is what makes
///   cancel-wait and close safe, so a backend that cannot tell must say busy.
/// - Dropping or disconnecting a peer while transfers to it are still held is never asked for:
///   the generic layer keeps the peer alive until every transfer to it is released.
/// - A passive peer that never polls still receives writes: a backend whose library needs the
///   target to make progress runs its own progress thread.
/// - After [`Backend::revoke`] no peer reaches the local region any more.
///
/// Every method takes `&self` and may be called from several threads at once; a backend whose
/// library is not thread-safe serializes internally.
///
/// ```
/// use blockwire_core::{Backend, BackendError, BackendStats, BlockIndex, Capabilities, Op,
///     PeerDescriptor, XferState};
///
/// /// A backend whose transfers complete at once and move nothing (illustration only).
/// struct Null;
/// impl Backend for Null {
///     type Peer = ();
///     type Xfer = ();
///     fn kind(&self) -> &'static str { "null" }
///     fn capabilities(&self) -> Capabilities { Capabilities::default() }
///     fn address(&self) -> Vec<u8> { Vec::new() }
///     fn connect(&self, _: &PeerDescriptor) -> Result<(), BackendError> { Ok(()) }
///     fn disconnect(&self, _: ()) {}
///     fn post(&self, _: &(), _: Op, _: &[BlockIndex], _: &[BlockIndex])
///         -> Result<(), BackendError> { Ok(()) }
///     fn state(&self, _: &mut ()) -> XferState { XferState::Done }
///     fn release(&self, _: ()) -> Result<(), ()> { Ok(()) }
///     fn stats(&self) -> BackendStats { BackendStats::default() }
/// }
/// assert_eq!(Null.kind(), "null");
/// ```
pub trait Backend: Send + Sync + 'static {
    /// A connected peer: endpoint, remote key, remote base address.
    type Peer: Send + Sync + 'static;
    /// One posted transfer.
    type Xfer: Send + 'static;

    /// The backend's kind, as written in descriptors (`"shm"`, `"ucx"`, ...).
    fn kind(&self) -> &'static str;

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// The backend part of this side's descriptor (endpoint address, remote key, metadata).
    fn address(&self) -> Vec<u8>;

    /// Connects to a peer. May be slow; runs on the transport's registration worker, never
    /// under a lock. The descriptor was validated (shape, kind, fingerprint) but its address
    /// bytes are untrusted.
    fn connect(&self, remote: &PeerDescriptor) -> Result<Self::Peer, BackendError>;

    /// Releases a peer's resources. Called only once no transfer to it is held.
    fn disconnect(&self, peer: Self::Peer);

    /// Posts a transfer of `local[i]` to `remote[i]` (WRITE) or back (READ). Must not wait for
    /// the transfer; a backend whose library may move data in this call says
    /// [`Capabilities::posts_in_caller`], and is then called from the transport's posting
    /// thread, in submit order.
    fn post(
        &self,
        peer: &Self::Peer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<Self::Xfer, BackendError>;

    /// Observes a transfer without blocking. The caller's `poll` calls it: where the lock it
    /// needs may be held by another thread across a library call that moves data (nixl's
    /// posting thread), it reports the transfer running rather than wait, and the transfer is
    /// observed again at the next poll (such a backend also implements
    /// [`state_blocking`](Backend::state_blocking)).
    fn state(&self, xfer: &mut Self::Xfer) -> XferState;

    /// Observes a transfer like [`state`](Backend::state), but for certain: where `state`
    /// reports a transfer running only because the lock it needs was busy, this waits for
    /// that lock. The stall watchdog calls it for a peer's transfers before it cuts the peer,
    /// so that transfers finished behind another thread's library calls (nixl's posting
    /// thread, posting one large transfer after another, longer than the stall timeout) are
    /// not taken for a stall. It runs in the caller's `poll` or `cancel`, only for a peer that
    /// has completed nothing for the stall timeout, and only until the cut is made (or found
    /// impossible). The default is `state`, right for every backend whose `state` never
    /// gives up on a lock.
    fn state_blocking(&self, xfer: &mut Self::Xfer) -> XferState {
        self.state(xfer)
    }

    /// Asks a running transfer to stop early (best effort; a backend that cannot stop an
    /// operation in flight does nothing). It then ends as done or failed as usual.
    fn abort(&self, xfer: &mut Self::Xfer) {
        let _ = xfer;
    }

    /// Cuts the connection to `peer` because no transfer to it has completed for the
    /// transport's stall timeout (the peer may be dead, or the link cut, without the library
    /// noticing): every transfer to it in flight must then end, failed, and later posts to it
    /// fail. Returns whether the backend could; one that cannot (the default) leaves its
    /// transfers to end on their own.
    fn fail_peer(&self, peer: &Self::Peer) -> bool {
        let _ = peer;
        false
    }

    /// Sends a notification to `peer`: `frame` (what [`crate::encode_frame`] made of the
    /// sender's name and message; a backend whose library carries the sender's name itself, as
    /// NIXL does, may send the message alone). It returns a transfer that is done once the
    /// notification reached the peer's transport (as far as the library can tell: at least
    /// the peer's side of the connection acknowledged it), and fails if it cannot get there.
    /// At the peer, the backend's receive path hands it to the inbox it was opened with
    /// ([`crate::BackendOptions::inbox`]), without the peer having to poll.
    ///
    /// The transport calls it only after the transfer the notification goes with is done (so
    /// ordering after the data is the transport's rule, not the backend's), and for
    /// standalone notifications. The default refuses: a backend that has it says
    /// [`Capabilities::notifications`].
    fn notify(&self, peer: &Self::Peer, frame: &[u8]) -> Result<Self::Xfer, BackendError> {
        let _ = (peer, frame);
        Err(BackendError::new(
            crate::BackendErrorKind::Unsupported,
            format!("backend {} does not carry notifications", self.kind()),
        ))
    }

    /// Called by the transport before it drains its inbox (`notifications`): a backend whose
    /// library delivers arriving messages only while someone drives it, and that does not run
    /// a thread doing that in every setting, hands what arrived to the inbox here. Must not
    /// block. The default does nothing (the receive path delivers on its own).
    fn poll_notifications(&self) {}

    /// Releases a transfer's resources: `Err(xfer)` while it may still move bytes. The
    /// caller's `poll` calls it too, so it should not wait for such a lock either.
    fn release(&self, xfer: Self::Xfer) -> Result<(), Self::Xfer>;

    /// Revokes every peer's access to the local region: once this returns, no peer's WRITE
    /// lands in it and no peer's READ reads it (a peer's transfer is refused or fails), as far
    /// as the library allows ([`Capabilities::revoke`] says whether it does completely).
    ///
    /// Called once, by the transport's close, when no transfer of this backend is held any
    /// more (a close that had to be forced calls it once its reaper released the last one).
    /// Afterwards `connect` may still be called (a registration close stopped waiting for) and
    /// must fail, and `disconnect` may be called and must not touch what `revoke` released;
    /// nothing else is. The default does nothing: a backend that keeps it must say
    /// `revoke: false`.
    fn revoke(&self) {}

    /// Called once by the transport's close, before it waits for the registration in flight:
    /// a [`connect`](Backend::connect) that waits for the peer (ucx's waits for the peer's
    /// answer to an identity check) should return soon, failed, rather than hold the close
    /// (a stopped peer process answers nothing); a later `connect` may fail at once. Transfers
    /// are not touched: close stops them next. The default does nothing, right for a backend
    /// whose connect does not wait for the peer.
    fn stop_connecting(&self) {}

    /// Called when the registration that the connect in flight serves was superseded (its
    /// peer removed, or added again): that connect may give up and fail, as its peer will not
    /// be published; a connect that starts later must not be affected. Best effort: one that
    /// starts just after the call may run on, and its result is discarded. The transport has
    /// one registration worker, so at most one connect is in flight, and this is called only
    /// while it runs. The default does nothing, right for a backend whose connect does not
    /// wait for the peer.
    fn cancel_connect(&self) {}

    /// Lends the thread of a caller waiting in `poll_wait` to the backend's own queued work:
    /// runs one item that would otherwise wait for the backend's threads (shm: copies one
    /// queued transfer), and returns whether it did. The transport calls it instead of
    /// sleeping, when nothing can be reported yet, holding no lock, and only while at least
    /// `budget` is left before the caller's deadline: the item should take no longer. The
    /// default does nothing.
    fn assist(&self, budget: std::time::Duration) -> bool {
        let _ = budget;
        false
    }

    /// Live resources, for tests and leak checks.
    fn stats(&self) -> BackendStats;
}
