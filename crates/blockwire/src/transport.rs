//! The [`Transport`] trait: the user contract.

use blockwire_core::kit::InboxStats;
use blockwire_core::{
    BackendStats, BlockIndex, CancelMode, Capabilities, Notification, PeerDescriptor, PeerId,
    PollResult, Result, TransferId,
};
use enum_dispatch::enum_dispatch;
use std::time::Duration;

use crate::{Region, Registration, TelemetrySnapshot};
// enum_dispatch writes the dispatching impl here, naming the enum and its variants' types.
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
#[allow(unused_imports)]
use crate::{AnyTransport, BlockTransport};

/// One-sided block transfers between this side's [`Region`] and registered remote peers.
///
/// Every method takes `&self`: a transport is `Send + Sync` and is shared by many peer
/// sessions, possibly on different threads. [`crate::BlockTransport`] implements every rule
/// below once, over any backend; [`crate::AnyTransport`] picks a backend at run time.
///
/// # The rules
///
/// This table is the contract, stated once: the README links here, and each case of the
/// conformance suite (`conformance/src/cases/`) names the rules it checks by their id
/// (`Rules: R-...` in its doc comment; a unit test of the suite checks that every id it cites
/// is in this table and that every rule is cited).
///
/// | id | call | rule |
/// |---|---|---|
/// | `R-DESC` | [`descriptor`](Transport::descriptor) | what a peer needs to connect: backend kind and address, base address, block count and length, fingerprint, format version; serializes to bytes, and decoding bytes from a peer never panics |
/// | `R-ADD-CHECK` | [`add_remote_peer`](Transport::add_remote_peer) | refuses, before connecting and publishing nothing: another backend's descriptor, a block length mismatch, two different non-empty fingerprints (an empty one on either side is compatible with any), an empty region, an overflowing size, a malformed address |
/// | `R-ADD-REGISTERED` | [`add_remote_peer`](Transport::add_remote_peer) | refuses, as a malformed address, a descriptor whose base address, block count or block length disagree with what the peer registered (its address carries them, and a seal over the address catches them changed there too) |
/// | `R-ADD-PUBLISH` | [`add_remote_peer`](Transport::add_remote_peer) | then connects and publishes, replacing an earlier registration of the id (later transfers go to the new peer); blocks until the registration worker has connected |
/// | `R-ADD-ASYNC` | [`add_remote_peer_async`](Transport::add_remote_peer_async) | claims the peer's next generation now and connects on one registration worker; the handle is a `Future` (woken when the registration ends) with a blocking `wait()`; a descriptor that fails validation gives an already-resolved handle and claims nothing |
/// | `R-ADD-SUPERSEDED` | [`add_remote_peer_async`](Transport::add_remote_peer_async) | a peer removed or added again meanwhile is never revived by a late result: the handle resolves `Err(Superseded)` and its connection is released |
/// | `R-REMOVE` | [`remove_remote_peer`](Transport::remove_remote_peer) | unpublishes at once, without waiting for a registration in flight (which is superseded; a connect of it that waits for the peer is told to give up); `Err(UnknownPeer)` for a peer neither published nor being registered; the peer may be added again |
/// | `R-REMOVE-RUNNING` | [`remove_remote_peer`](Transport::remove_remote_peer) | transfers still running surface (by the peer's id) as failed, `PeerRemoved`, once they stop; those that had completed, as done; the backend's peer is freed only after the last of them |
/// | `R-POST-CHECK` | [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks) | validate before anything moves: a published peer, equal non-empty index lists (an empty one is `EmptyTransfer`, given no id), every index in range (remote ones against the peer's block count), no destination block twice; an error, or a post the backend refuses in the call, leaves nothing tracked and moves nothing (a post refused on the posting thread is a failed transfer, `R-POST-DEFERRED`) |
/// | `R-POST-DATA` | [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks) | a WRITE lands local block `local[i]` at the peer's block `remote[i]`, a READ the peer's `remote[i]` at `local[i]`, for every `i` (a source may repeat); no other block changes on either side; done only once the bytes are at the destination |
/// | `R-POST-NO-WAIT` | [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks) | never wait, not for the transfer nor for the peer: what the library refuses for now is retried on the backend's thread, and a backend that says `posts_in_caller` is posted on the transport's posting thread (`R-POST-DEFERRED`): ucx, libfabric and nixl, whose library's post may move data in the call (large messages over TCP, NIXL's UCX on one host) |
/// | `R-POST-DEFERRED` | [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks), the `_notify` variants, [`notify`](Transport::notify) | with a backend that says [`Capabilities::posts_in_caller`](crate::Capabilities::posts_in_caller), the call validates, gives the id and returns; the transport's posting thread posts, to each peer in submit order. A post that fails there is a failed transfer whose reason says posting failed, with the backend's text, and counts toward `R-PEER-FAULT` like a refused post. A transfer still queued is in flight and obeys every rule: a cancel (either mode) releases it at once and it is never posted, a remove fails it `PeerRemoved` unposted, close never posts it |
/// | `R-ID-UNIQUE` | [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks) | return a [`TransferId`] unique for the transport's lifetime and increasing, across every peer |
/// | `R-ID-ONCE` | [`poll`](Transport::poll), [`cancel`](Transport::cancel) | every id is reported exactly once: done, failed (with a reason: peer removed, remote disconnect, aborted, backend error, failed state check), or taken by a cancel |
/// | `R-POLL-PEER` | [`poll`](Transport::poll)`(Some(peer))` | drains only that peer's finished transfers (another session's completions stay for its own poll); a peer with nothing, or never added, is empty, not an error; never blocks |
/// | `R-POLL-ALL` | [`poll`](Transport::poll)`(None)` | drains every peer's finished transfers (shutdown) |
/// | `R-POLL-WAIT` | [`poll_wait`](Transport::poll_wait) | drains as `poll` does, for one peer or all; when that drain has nothing to report (no id, no peer fault) while transfers it covers are in flight, sleeps until one of the transport's transfers ends (or a remove, cancel or close), then drains again, until something is reported or the timeout passes; returns at once, empty, when none is in flight; never reports an id twice nor one another peer's poll would; `Err(Closed)` once closed, also for a wait a close ends |
/// | `R-IN-FLIGHT` | [`in_flight`](Transport::in_flight) | transfers posted and not yet reported nor taken by a cancel, to one peer or to all |
/// | `R-CANCEL-IMMEDIATE` | [`cancel`](Transport::cancel)`(ids, Immediate)` | forgets the known ids and returns `[]`; the backend may still move bytes, and its handle is released once it stops (a poll reaps it); until then it counts in `backend_stats().live_transfers`, even while the posting thread is still handing it to the backend |
/// | `R-CANCEL-WAIT` | [`cancel`](Transport::cancel)`(ids, Wait)` | asks running transfers to stop, releases only those that have stopped, and returns the ids still running (poll until each surfaces); once an id is no longer returned, no byte of it lands; unknown ids are ignored |
/// | `R-FAIL-BOUNDED` | [`poll`](Transport::poll) | a failure is terminal and bounded: a failed state check, a remote disconnect or a peer that closed fails the transfers, with its reason, within a bounded time; none is left running |
/// | `R-STALL` | [`poll`](Transport::poll), [`cancel`](Transport::cancel) | a peer with transfers in flight of which none completes for [`TransportOptions::stall_timeout`](crate::TransportOptions::stall_timeout) (default 5 s, read on [`TransportOptions::clock`](crate::TransportOptions::clock); `None` waits for the library) is taken for dead or unreachable: the backend is asked, once, to cut its connection, and its transfers fail as a remote disconnect. What the backend finished counts as progress, polled or not, and before a cut each transfer is observed for certain (`Backend::state_blocking`: a backend whose status check gives up on a busy lock waits for it), so transfers finished behind another thread's long library call are not taken for a stall. A backend cuts only where no byte of those transfers can land in this process's region afterwards; one that cannot logs it, and its transfers end when the library ends them (SECURITY.md, per backend) |
/// | `R-PEER-FAULT` | [`poll`](Transport::poll), [`write_blocks`](Transport::write_blocks), [`read_blocks`](Transport::read_blocks) | a peer is judged unusable ([`PeerFault`](crate::PeerFault)) after a remote disconnect, a stall cut, a failed state check, or [`TransportOptions::max_consecutive_failures`](crate::TransportOptions::max_consecutive_failures) (default 3; `0`: never for failures alone) failures in a row with no success between: every `poll(Some(peer))` reports it until `remove_remote_peer`, and posts to it are refused (`PeerFaulted`); the transport never recovers a peer itself, the caller removes and adds it again |
/// | `R-CLOSE` | [`close`](Transport::close) | idempotent; stops registrations (each pending one resolves `Err(Closed)`, none is published; a connect waiting for its peer's answer gives up), cancels, waits (bounded by [`TransportOptions::close_timeout`](crate::TransportOptions::close_timeout)) for running transfers, releases every peer; every later call is `Err(Closed)`; drop closes |
/// | `R-CLOSE-REAPER` | [`close`](Transport::close) | a transfer still running at the deadline is handed to a reaper that frees it, and the memory it may touch, only once it stops, never under it, and revokes then (logged) |
/// | `R-CLOSE-REVOKE` | [`close`](Transport::close) | revokes every peer's access to the region before it returns: afterwards no peer's WRITE lands in it and no peer's READ reads it, so caller-owned memory may be freed ([`Capabilities::revoke`](crate::Capabilities::revoke); SECURITY.md says how, per backend); the peers' transfers fail or are refused, and a peer that goes away never crashes this transport |
/// | `R-TELEMETRY` | [`poll`](Transport::poll), [`telemetry`](Transport::telemetry) | off by default: no record, no snapshot; on, each id a poll reports comes with its [`TransferRecord`](blockwire_core::TransferRecord) in [`PollResult::records`] (kind, blocks, bytes, time in the submit call, time until reported, outcome), and the snapshot's per-peer counters (transfers, done, failed by reason, cancelled, bytes) and latency counts agree with what was reported |
/// | `R-NAME` | [`name`](Transport::name), [`descriptor`](Transport::descriptor) | every transport has a name, carried in its descriptor: the one `TransportOptions::name` gives (refused at open, `BadName`, if empty, over 128 bytes or holding a control character), else one generated at open, unique across transports |
/// | `R-NOTIFY-CHECK` | [`write_blocks_notify`](Transport::write_blocks_notify), [`read_blocks_notify`](Transport::read_blocks_notify), [`notify`](Transport::notify) | validate like a post, and refuse a message over [`MAX_NOTIFICATION_LEN`](blockwire_core::MAX_NOTIFICATION_LEN) (4 KiB) with `NotificationTooLong`; either way nothing moves, nothing is tracked, nothing reaches the peer |
/// | `R-NOTIFY-AFTER-DATA` | [`write_blocks_notify`](Transport::write_blocks_notify), [`read_blocks_notify`](Transport::read_blocks_notify) | the notification reaches the transfer's target (for a READ, the peer whose blocks were read), from this transport's name, only once every byte of the transfer is in place: a target that drains it and then reads the blocks sees the new bytes; the target need not have added the sender as a peer |
/// | `R-NOTIFY-DONE` | [`poll`](Transport::poll) | a transfer carrying a notification is done only once its notification was delivered; one that fails, is cancelled, or whose peer is removed before its data is in place delivers none; one whose data landed but whose notification was not delivered fails, `NotificationUndelivered`; one whose notification was already on its way when its peer was removed reports what became of it (done if it was delivered, `PeerRemoved` otherwise) |
/// | `R-NOTIFY-ALONE` | [`notify`](Transport::notify) | a standalone notification to a connected peer is tracked like a transfer: done once delivered, failed if it cannot be |
/// | `R-NOTIFY-DRAIN` | [`notifications`](Transport::notifications) | drains the notifications of one sender, or of all, each exactly once; draining one sender leaves the others' queued; never blocks; the queue is bounded (`TransportOptions::notification_capacity`) and what it drops when full is counted ([`notification_stats`](Transport::notification_stats)), never silently; `close` discards what is queued, counted |
///
/// # Examples
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
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// assert_eq!(t.backend_kind(), "shm");
    /// assert_eq!(t.descriptor()?.backend, t.backend_kind());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn backend_kind(&self) -> &'static str;

    /// What the backend can do.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let caps = t.capabilities();
    /// assert!(caps.read && caps.abort && caps.cross_process);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn capabilities(&self) -> Capabilities;

    /// The local block memory (read and write blocks through copies).
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// t.region().fill_block(1, 7)?;
    /// assert_eq!(t.region().block(1)?, vec![7u8; 64]);
    /// assert_eq!(t.region().block(0)?, vec![0u8; 64]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn region(&self) -> &Region;

    /// Bytes per block.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(8, 4096)?, TransportOptions::default())?;
    /// assert_eq!(t.block_len(), 4096);
    /// assert_eq!(t.descriptor()?.block_len, 4096);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn block_len(&self) -> usize {
        self.region().block_len()
    }

    /// Number of local blocks.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(8, 4096)?, TransportOptions::default())?;
    /// assert_eq!(t.num_blocks(), 8);
    /// assert_eq!(t.descriptor()?.num_blocks, 8);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn num_blocks(&self) -> u32 {
        self.region().num_blocks()
    }

    /// Address of local block 0.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(2, 4096)?, TransportOptions::default())?;
    /// assert_eq!(t.base_addr(), t.region().base_addr());
    /// assert_eq!(t.descriptor()?.base_addr, t.base_addr());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn base_addr(&self) -> u64 {
        self.region().base_addr()
    }

    /// The config fingerprint; empty when no config fields were given (compatible with anyone).
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let plain = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// assert_eq!(plain.fingerprint(), "");
    /// let fields = serde_json::json!({"model": "llama-3-8b", "layers": 32});
    /// let opts = TransportOptions::default().with_config_fields(fields.as_object().cloned());
    /// let t = open("shm", Region::new(2, 64)?, opts)?;
    /// assert_eq!(t.fingerprint(), blockwire::fingerprint::fingerprint(fields.as_object()));
    /// assert_eq!(t.descriptor()?.fingerprint, t.fingerprint());
    /// t.add_remote_peer(&"plain".into(), &plain.descriptor()?)?; // empty: compatible
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn fingerprint(&self) -> &str;

    /// What a peer needs to connect to this transport. `Err(Closed)` after close.
    ///
    /// ```
    /// use blockwire::{open, Error, PeerDescriptor, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let d = t.descriptor()?;
    /// assert_eq!(PeerDescriptor::from_bytes(&d.to_bytes())?, d);
    /// t.close()?;
    /// assert_eq!(t.descriptor(), Err(Error::Closed));
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn descriptor(&self) -> Result<PeerDescriptor>;

    /// Validates `desc` (backend kind, block length, fingerprint, shape), connects, and
    /// publishes the peer under `peer`, replacing an earlier registration of that id. Blocks
    /// until the registration worker has connected.
    ///
    /// ```
    /// use blockwire::{open, Error, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let big = open("shm", Region::new(2, 128)?, TransportOptions::default())?;
    /// a.add_remote_peer(&"b".into(), &b.descriptor()?)?;
    /// assert_eq!(a.peers(), vec!["b".into()]);
    /// let err = a.add_remote_peer(&"big".into(), &big.descriptor()?).unwrap_err();
    /// assert!(matches!(err, Error::BlockLenMismatch { local: 64, remote: 128, .. }));
    /// assert_eq!(a.peers(), vec!["b".into()]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn add_remote_peer(&self, peer: &PeerId, desc: &PeerDescriptor) -> Result<()>;

    /// Like [`add_remote_peer`](Transport::add_remote_peer) without blocking: claims the next
    /// generation for `peer` now and connects on the registration worker. The handle resolves
    /// to `Err(Superseded)` when the peer is removed or added again before this registration
    /// publishes; its backend resources are then released. A descriptor that fails validation
    /// gives an already-resolved handle and claims nothing.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let handle = a.add_remote_peer_async(&"b".into(), &b.descriptor()?);
    /// handle.wait()?; // or await it under any executor
    /// assert_eq!(a.peers(), vec!["b".into()]);
    /// let mut bad = b.descriptor()?;
    /// bad.backend = "ucx".into();
    /// let handle = a.add_remote_peer_async(&"c".into(), &bad);
    /// assert!(handle.is_finished() && handle.wait().is_err());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn add_remote_peer_async(&self, peer: &PeerId, desc: &PeerDescriptor) -> Registration;

    /// Unpublishes `peer` and invalidates any registration of it in flight, without waiting
    /// for one. Transfers still running to it surface through `poll` as failed (peer removed)
    /// once they stop; those that had completed before the remove surface as done (or failed,
    /// as they ended). The backend's peer resources are freed only after the last one. A
    /// peer fault is forgotten with the registration. `Err(UnknownPeer)` when the peer is
    /// neither published nor being registered.
    ///
    /// ```
    /// use blockwire::{open, Error, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// a.remove_remote_peer(&p)?;
    /// assert!(a.peers().is_empty());
    /// assert_eq!(a.write_blocks(&p, &[0], &[0]), Err(Error::UnknownPeer(p.clone())));
    /// assert_eq!(a.remove_remote_peer(&p), Err(Error::UnknownPeer(p)));
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn remove_remote_peer(&self, peer: &PeerId) -> Result<()>;

    /// Posts a WRITE of local block `local[i]` to the peer's block `remote[i]`, for every `i`.
    /// Validates before anything moves (equal non-zero lengths, every index in range, no
    /// remote block twice); any error leaves nothing tracked. Never waits for the transfer, nor
    /// for the peer. A backend that says
    /// [`Capabilities::posts_in_caller`](crate::Capabilities::posts_in_caller) is posted on the
    /// transport's posting thread, in submit order (a post that fails there is reported by
    /// [`poll`](Transport::poll) as a failed transfer instead of this call's `Err(Submit)`):
    /// ucx, libfabric and nixl say it, so no byte moves inside this call on any built-in
    /// backend. A peer the transport judged unusable is refused with
    /// `Err(PeerFaulted)` (see [`PollResult::peer_fault`]) until it is removed.
    ///
    /// ```
    /// use blockwire::{open, Error, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// a.region().fill_block(0, 1)?;
    /// a.region().fill_block(1, 2)?;
    /// let id = a.write_blocks(&p, &[0, 1], &[3, 2])?;
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(b.region().block(3)?, vec![1u8; 64]);
    /// assert_eq!(b.region().block(2)?, vec![2u8; 64]);
    /// let dup = a.write_blocks(&p, &[0, 1], &[2, 2]);
    /// assert!(matches!(dup, Err(Error::DuplicateDestination { index: 2, .. })));
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn write_blocks(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId>;

    /// Posts a READ of the peer's block `remote[i]` into local block `local[i]`. Same
    /// validation as a write, with the local block as the destination that must not repeat.
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// b.region().fill_block(2, 9)?;
    /// let id = a.read_blocks(&p, &[0], &[2])?;
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(a.region().block(0)?, vec![9u8; 64]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn read_blocks(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId>;

    /// Drains finished transfers: of `peer` only (other peers' completions stay for their own
    /// poll), or of every peer with `None` (shutdown drain). Never blocks.
    ///
    /// A peer-scoped poll also reports the peer's fault ([`PollResult::peer_fault`]) once the
    /// transport has judged it unusable: a transfer failed as a remote disconnect, the stall
    /// watchdog cut it, a state check failed, or `TransportOptions::max_consecutive_failures`
    /// transfers failed in a row. It is reported on every scoped poll until the peer is
    /// removed; posts to it are refused meanwhile.
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let c = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let (pb, pc) = (PeerId::from("b"), PeerId::from("c"));
    /// a.add_remote_peer(&pb, &b.descriptor()?)?;
    /// a.add_remote_peer(&pc, &c.descriptor()?)?;
    /// let (to_b, to_c) = (a.write_blocks(&pb, &[0], &[0])?, a.write_blocks(&pc, &[0], &[0])?);
    /// loop {
    ///     let r = a.poll(Some(&pb))?;
    ///     assert!(r.failed.is_empty() && !r.done.contains(&to_c)); // c's stays for c
    ///     if r.done.contains(&to_b) { break; }
    /// }
    /// while !a.poll(None)?.done.contains(&to_c) {}
    /// assert!(a.poll(None)?.is_empty()); // each id is reported once
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn poll(&self, peer: Option<&PeerId>) -> Result<PollResult>;

    /// [`poll`](Transport::poll), waiting up to `timeout` for something to report: when the
    /// drain finds nothing (no transfer done or failed, no peer fault) while transfers of
    /// `peer` (of any peer, with `None`) are in flight, the calling thread sleeps until a
    /// transfer ends and drains again, until there is something to report or `timeout` has
    /// passed; then it returns what it drained, maybe nothing. With nothing in flight it
    /// returns at once. Everything `poll` promises holds: only that peer's transfers, each id
    /// once, the peer's fault on every scoped drain.
    ///
    /// For a caller with nothing else to do until a transfer ends (a driver thread, a
    /// shutdown drain, a Python caller): it costs no CPU while it waits, where a loop of
    /// `poll` and short sleeps takes a core from the threads moving the data. A backend that
    /// says [`Capabilities::doorbell`](crate::Capabilities::doorbell) wakes it when a transfer
    /// ends (shm, ucx, libfabric); with another it drains again after short naps (from 20 µs,
    /// growing to 1 ms while nothing ends). Before it sleeps, it may lend its thread to the
    /// backend's queued work ([`Backend::assist`](crate::Backend::assist)): shm's waiting
    /// caller copies a queued transfer (of any peer) of at most `assist_bytes` itself, work
    /// the copy threads would have done, instead of being woken for each transfer. A close
    /// from another thread ends the wait with `Err(Closed)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(4, 4096)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(4, 4096)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// let id = a.write_blocks(&p, &[0, 1], &[2, 3])?;
    /// let mut done = Vec::new();
    /// while !done.contains(&id) {
    ///     // Sleeps until the transfer ends (at most a second per call).
    ///     done.extend(a.poll_wait(Some(&p), Duration::from_secs(1))?.done);
    /// }
    /// // Nothing in flight: returns at once, empty.
    /// assert!(a.poll_wait(Some(&p), Duration::from_secs(60))?.is_empty());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn poll_wait(&self, peer: Option<&PeerId>, timeout: Duration) -> Result<PollResult>;

    /// Cancels transfers. [`CancelMode::Immediate`] stops tracking each known id and returns
    /// `[]` (the backend may keep moving bytes for a while; its resources are released once
    /// it stops). [`CancelMode::Wait`] asks running transfers to stop, releases only those that
    /// have stopped, and returns the ids still tracked; poll until each surfaces. Once an id is
    /// no longer returned, no byte of it lands afterwards. Unknown ids are ignored.
    ///
    /// ```
    /// use blockwire::{open, CancelMode, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// let id = a.write_blocks(&p, &[0], &[1])?;
    /// let mut tracked = a.cancel(&[id], CancelMode::Wait)?; // `[id]` while it still runs
    /// while !tracked.is_empty() {
    ///     let r = a.poll(Some(&p))?;
    ///     tracked.retain(|t| !r.ids().any(|x| x == *t));
    /// }
    /// assert!(a.poll(Some(&p))?.is_empty()); // taken by the cancel or reported once
    /// assert!(a.cancel(&[id], CancelMode::Wait)?.is_empty()); // now unknown: ignored
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn cancel(&self, ids: &[TransferId], mode: CancelMode) -> Result<Vec<TransferId>>;

    /// Transfers posted and not yet reported by `poll` nor taken by a cancel: to `peer`, or to
    /// every peer with `None`. `0` after close.
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// let id = a.write_blocks(&p, &[0], &[1])?;
    /// assert_eq!(a.in_flight(Some(&p)), 1); // until it is reported
    /// assert_eq!(a.in_flight(Some(&"other".into())), 0);
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(a.in_flight(None), 0);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn in_flight(&self, peer: Option<&PeerId>) -> usize;

    /// Stops registrations (a connect waiting for its peer, as ucx's does for a peer process
    /// that does not run, gives up rather than hold the close), cancels what is in flight,
    /// waits (bounded by the close timeout) for running transfers to stop, releases every
    /// peer, and revokes every peer's access to the local region: once close returns, no
    /// peer's WRITE lands in the region and no peer's READ reads it (their transfers fail or
    /// are refused), so memory the caller owns may be freed. A backend whose library cannot
    /// stop a same-host peer says so in [`Capabilities::revoke`]. Idempotent.
    ///
    /// If a transfer is still running at the deadline, close logs a warning and returns; a
    /// reaper thread keeps the transfer, its peer, the backend and the memory it may touch
    /// until it stops, and only then frees them and revokes remote access (so caller-owned
    /// memory must then stay allocated for the process's lifetime). Every later call returns
    /// `Err(Closed)`. Dropping closes.
    ///
    /// ```
    /// use blockwire::{open, Error, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// a.add_remote_peer(&"b".into(), &b.descriptor()?)?;
    /// a.close()?;
    /// a.close()?; // idempotent
    /// assert_eq!(a.backend_stats().connected_peers, 0);
    /// assert_eq!(a.write_blocks(&"b".into(), &[0], &[0]), Err(Error::Closed));
    /// assert_eq!(a.poll(None), Err(Error::Closed));
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn close(&self) -> Result<()>;

    /// Whether [`close`](Transport::close) has been called.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let t = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// assert!(!t.is_closed());
    /// t.close()?;
    /// assert!(t.is_closed());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn is_closed(&self) -> bool;

    /// The backend's live resources (connected peers, unreleased transfers). A transfer the
    /// transport's posting thread is handing to the backend counts as live too: once
    /// `live_transfers` is 0, no transfer (not even one `cancel(Immediate)` forgot) can move
    /// a byte any more.
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// assert_eq!(a.backend_stats().connected_peers, 1);
    /// let id = a.write_blocks(&p, &[0], &[0])?;
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(a.backend_stats().live_transfers, 0); // released once reported
    /// a.remove_remote_peer(&p)?;
    /// assert_eq!(a.backend_stats().connected_peers, 0);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn backend_stats(&self) -> BackendStats;

    /// This transport's name: in its descriptor, and the sender its notifications carry
    /// (`TransportOptions::name`, or one generated at open).
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default().with_name("prefill-0"))?;
    /// assert_eq!(a.name(), "prefill-0");
    /// assert_eq!(a.descriptor()?.name, "prefill-0");
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// assert_ne!(b.name(), a.name()); // generated, unique
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn name(&self) -> &str;

    /// Posts a WRITE, like [`Transport::write_blocks`], that carries a notification: `message`
    /// (at most [`blockwire_core::MAX_NOTIFICATION_LEN`] bytes; longer is
    /// `Err(NotificationTooLong)` and nothing moves) reaches the peer's
    /// [`Transport::notifications`], from this transport's [`Transport::name`], once every byte
    /// of the write is in place.
    ///
    /// The rules:
    /// - the notification is sent only after the data is at the target: a target that drains
    ///   it and then reads the blocks sees the new bytes;
    /// - the transfer is reported done only once its notification was delivered; one that
    ///   fails, is cancelled or whose peer is removed before its data is in place sends none;
    ///   one whose data landed but whose notification could not be delivered is reported
    ///   failed ([`FailureReason::NotificationUndelivered`](blockwire_core::FailureReason));
    /// - the notification is sent when this transport sees the data in place: by a `poll`
    ///   of the peer (or `cancel`'s check), so the initiator keeps polling as it does for any
    ///   transfer. A `cancel` that finds the notification already sent cannot recall it: with
    ///   `Wait` it waits for the notification's delivery like for any running transfer.
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(4, 64)?, TransportOptions::default().with_name("a"))?;
    /// let b = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// a.region().fill_block(0, 7)?;
    /// let id = a.write_blocks_notify(&p, &[0], &[3], b"block 3 is yours")?;
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// let got = b.notifications(Some("a"))?; // b never added a as a peer
    /// assert_eq!(got[0].message, b"block 3 is yours");
    /// assert_eq!(b.region().block(3)?, vec![7u8; 64]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn write_blocks_notify(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: &[u8],
    ) -> Result<TransferId>;

    /// Posts a READ, like [`Transport::read_blocks`], that carries a notification to the peer
    /// whose blocks are read, once they are all in the local region: the producer learns that
    /// it may free them. Same rules as [`Transport::write_blocks_notify`].
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let consumer = open("shm", Region::new(4, 64)?, TransportOptions::default().with_name("c"))?;
    /// let producer = open("shm", Region::new(4, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("producer");
    /// consumer.add_remote_peer(&p, &producer.descriptor()?)?;
    /// producer.region().fill_block(1, 5)?;
    /// let id = consumer.read_blocks_notify(&p, &[0], &[1], b"done with 1")?;
    /// while !consumer.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(consumer.region().block(0)?, vec![5u8; 64]);
    /// assert_eq!(producer.notifications(None)?[0].sender, "c");
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn read_blocks_notify(
        &self,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: &[u8],
    ) -> Result<TransferId>;

    /// Sends a standalone notification (no data) to a connected peer. It is tracked like a
    /// transfer: reported done by `poll` once delivered, failed
    /// ([`FailureReason::NotificationUndelivered`](blockwire_core::FailureReason)) if it could
    /// not be.
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default().with_name("a"))?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// let id = a.notify(&p, b"hello")?;
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(b.notifications(Some("a"))?.len(), 1);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn notify(&self, peer: &PeerId, message: &[u8]) -> Result<TransferId>;

    /// Drains the notifications that reached this transport from `from` (a sender's
    /// [`Transport::name`]), or from every sender, in arrival order. Draining one sender
    /// leaves the others' for their own call; each notification is drained exactly once.
    /// Never blocks.
    ///
    /// The queue is bounded (`TransportOptions::notification_capacity`): while it is full,
    /// one more is dropped on arrival and counted in [`Transport::notification_stats`] (and
    /// logged), never silently. `close` discards what is queued (counted too).
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default().with_name("a"))?;
    /// let c = open("shm", Region::new(2, 64)?, TransportOptions::default().with_name("c"))?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// c.add_remote_peer(&p, &b.descriptor()?)?;
    /// let (x, y) = (a.notify(&p, b"from a")?, c.notify(&p, b"from c")?);
    /// while !a.poll(Some(&p))?.done.contains(&x) {}
    /// while !c.poll(Some(&p))?.done.contains(&y) {}
    /// assert_eq!(b.notifications(Some("c"))?[0].message, b"from c");
    /// assert_eq!(b.notifications(None)?[0].sender, "a"); // a's stayed for its own drain
    /// assert!(b.notifications(None)?.is_empty());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn notifications(&self, from: Option<&str>) -> Result<Vec<Notification>>;

    /// The inbox's counters: received, drained, queued, dropped because it was full,
    /// discarded by close, malformed.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// assert_eq!(a.notification_stats().dropped_full, 0);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn notification_stats(&self) -> InboxStats;

    /// With telemetry on (`TransportOptions::telemetry`), every peer's figures so far:
    /// counters (transfers, done, failed by reason, cancelled, bytes) and latency percentiles;
    /// `None` when it is off. Per-transfer records come with the poll result that reports
    /// each transfer ([`PollResult::records`]); the `metrics` facade gets the same figures
    /// (names in [`crate::telemetry`]).
    ///
    /// ```
    /// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default().with_telemetry(true))?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let p = PeerId::from("b");
    /// a.add_remote_peer(&p, &b.descriptor()?)?;
    /// let id = a.notify(&p, b"hi")?;
    /// while !a.poll(Some(&p))?.done.contains(&id) {}
    /// assert_eq!(a.telemetry().expect("on").peer(&p).expect("b").done, 1);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn telemetry(&self) -> Option<TelemetrySnapshot>;

    /// Published peers, sorted.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// assert!(a.peers().is_empty());
    /// a.add_remote_peer(&"zeta".into(), &b.descriptor()?)?;
    /// a.add_remote_peer(&"alpha".into(), &b.descriptor()?)?;
    /// assert_eq!(a.peers(), vec!["alpha".into(), "zeta".into()]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    fn peers(&self) -> Vec<PeerId>;
}
