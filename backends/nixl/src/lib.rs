//! # blockwire-nixl: a NIXL agent through nixl-sys
//!
//! - **Agent**: one NIXL agent per transport, with the `UCX` backend plugin by default (option
//!   `backend`), named after the transport (`BackendOptions::name`, the transport's name): the
//!   sender NIXL reports with each notification is that name. A backend opened without a
//!   transport gets a name unique across hosts (`blockwire_core::unique_name`,
//!   `bw-<host>-<pid>-<n>-<random>`; its notifications are still told they come from
//!   `blockwire`, the name a backend opened without a transport is given).
//!   The whole region is registered once, as DRAM, and a local descriptor list of one
//!   descriptor per block is prepared once.
//! - **Descriptor**: carries the agent's name, the region the agent registered and the
//!   agent's metadata. Connecting checks the region against the descriptor's, loads the
//!   metadata (`load_remote_md`) and prepares the peer's region as one descriptor, which has
//!   NIXL check that it lies in the peer's registrations (a peer that registered it in
//!   pieces gets the per-block list at once instead). The peer's list of one descriptor per
//!   block is prepared by the first transfer of scattered blocks to it, on the posting
//!   thread, not by the add (for 19,599 blocks NIXL took 0.7 ms and more, most of the add);
//!   such a transfer is `make_xfer_req` with block indices on both prepared lists, then
//!   `post_xfer_req`. Where blocks are adjacent on both sides
//!   (`kit::checked_runs`), each run is one descriptor per side of up to
//!   `kit::DEFAULT_MAX_RUN_BYTES`, in lists made for the transfer (`create_xfer_req`), unless
//!   the peer registered its region in pieces: a run across two of them lies in no one
//!   registration, and NIXL would refuse the transfer, so its blocks go by index.
//! - **Names**: NIXL tells agents apart by name only. A peer whose agent has this transport's
//!   name, or the name of another connected peer with other metadata, is refused at connect
//!   ([`BackendErrorKind::NameInUse`], saying so; NIXL itself would refuse both, as
//!   `NIXL_ERR_INVALID_PARAM` and `NIXL_ERR_NOT_ALLOWED`, which nixl-sys cannot tell apart). So
//!   connected transports need distinct names (generated ones are), a transport cannot be its
//!   own peer, and a peer that restarted under the same name is added again only after the
//!   registration of its former self is removed (`remove_remote_peer`, then
//!   `add_remote_peer`): while that one is connected, its metadata holds the name.
//! - **Disconnect**: an agent's metadata stays loaded, idle, when its last peer is removed
//!   (the 64 most recent such agents), and the next connection to it reuses it: unloading it
//!   makes NIXL's UCX plugin close the agent's endpoints, which UCX 1.13 then keeps until the
//!   worker goes, two file descriptors for every add and remove of a live agent (NIXL's
//!   issue 2025 is this leak). An idle agent's metadata is replaced when an agent of that name
//!   comes back with other metadata.
//! - **State**: `get_xfer_status`; a transfer that finished inside the post is done. A status
//!   check that fails (nixl-sys reports every NIXL error, a failed transfer's included, as a
//!   failed check) is [`FailureReason::StateCheck`], which faults the peer. Every NIXL call is
//!   made under one lock, which the posting thread holds across `post_xfer_req` (NIXL's UCX
//!   plugin copies the data inside it on one host: milliseconds for large blocks); a status
//!   check, called by the caller's `poll`, that finds the lock taken reports the transfer
//!   running instead of waiting, and the next poll checks again.
//! - **Close fence**: the address names a memfd page of this backend's
//!   (`blockwire_core::kit::fence`), which a peer on this host reopens and maps at connect
//!   and counts each post to this backend in on, in which NIXL's UCX plugin copies with `cma`
//!   (`process_vm_writev`/`readv` on this process): revoke marks it closed first and waits for
//!   the posts that checked before (at most `kit::fence::CLOSE_WAIT`); later posts are
//!   refused as a remote disconnect. Destroying the agent would not stop those copies. NIXL's
//!   own metadata has no room for the fence, so the backend also publishes it under that
//!   metadata (a file in `/dev/shm` named by its SHA-256, removed with the backend; the one
//!   a killed process left is removed by the next backend to publish on the host): a peer
//!   added from it (`descriptor_from_nixl`, the Python P2P layer's handshake) finds it there.
//!   A peer of a plain NIXL agent finds none and goes without.
//! - **Revocation** (close): peers' posts are fenced off, then the agent is destroyed (its
//!   registration released first), which
//!   destroys its UCX workers: nothing serves a peer's put or get afterwards (UCX emulates
//!   them with active messages on memory it did not allocate, copying to whatever address the
//!   message names, so a deregistration alone would not do).
//! - **Release**: nixl-sys releases a request by dropping it and hides a failed release, so a
//!   request is dropped only once NIXL reports it terminal; until then `release` says busy. A
//!   finished request whose release finds the lock taken is parked and released by the lock's
//!   next holder in this backend (a post, a status check, the notification thread within a
//!   few milliseconds, at the latest revoke); so is a peer let go (its last transfer may be
//!   released in the caller's poll), which no longer counts as connected from then on.
//! - **Errors**: nixl-sys collapses NIXL's codes into one; the message is kept.
//! - **Runtime**: `libnixl_capi.so` from the `nixl-cu12==1.5.1` wheel, loaded by absolute path
//!   (see [`DEFAULT_LIB_DIR`] and [`LIB_DIR_ENV`]); opening a transport without it is a clear
//!   error that says how to install it, never the forwarder's abort.
//! - **UCX**: the wheel bundles its own UCX. A process that has initialized Debian's UCX (the
//!   ucx backend) must not load NIXL's: UCX 1.13 aborts with `Assertion
//!   '!ucs_debug_initialized' failed` as the second copy starts, because both export the same
//!   symbols. So the nixl backend runs in its own test binaries and processes.
//!
//! ## Notifications
//!
//! NIXL's own: `genNotif` (nixl-sys `send_notification`) carries the message, and NIXL adds
//! the sender's agent name (the transport's name), so the frame the transport hands to
//! `notify` is decoded and only its message sent. At the target, `getNotifs` (nixl-sys
//! `get_notifications`) takes what arrived, as (agent name, message) pairs, into the inbox:
//! a thread of the backend does so every few milliseconds (so a passive target that never
//! drains still receives, and the inbox's bound and counters apply), and so does every drain
//! of the transport (`poll_notifications`), so a drain sees at once what arrived. NIXL's
//! `getNotifs` takes every sender's notifications at once: they all go into the inbox, which
//! keeps them by sender. Measured: NIXL (its UCX plugin, with its progress thread) keeps what
//! arrives until `getNotifs` takes it (10,000 from two senders to an agent that drained once,
//! after two seconds: all there, each sender's in order).
//!
//! **Delivered.** `genNotif` has no completion handle: its success means NIXL's UCX plugin
//! handed the message to UCX (an eager active message that may still be on its way; measured,
//! in one process the message was at the target when `genNotif` returned in 58 of 200 tries,
//! and up to 42 ms later; across processes it was still missing after a pipe round trip in 29
//! to 374 of 1,000). So `notify` also posts a one-byte READ of the peer's block 0 into a
//! scratch byte of its own, on the same connection, after the message, and the notification's
//! transfer is done when that READ is: the peer's agent was then alive and had served this
//! connection after the message. Here UCX served the READ after the message, so the message
//! was in the target's NIXL by then (UCX does not promise an order between an active message
//! and a READ in general; on one lane it keeps it): measured, right after the READ the
//! target's `getNotifs` held it in every try (2,000 of 2,000 in one process and 2,500 of 2,500 across two, each
//! with UCX's default transports and with `UCX_TLS=tcp`; the crate's `notifications` test
//! checks it with one drain right after done). That is as far as NIXL lets a sender tell; it
//! is not an acknowledgement by the target's blockwire. It costs one round trip per
//! notification, which the target's progress thread serves: on a busy host its scheduling
//! shows (the bench's `notify` measure on this 2-core machine under a load of 8: notified
//! WRITEs of 16 x 64 KiB done at p50 2 to 5 ms, plain ones at 0.2 ms; the direct calls,
//! `genNotif` and the READ's post, take about 20 µs). The target need not know the sender:
//! NIXL's message names its sender, and receiving needs none of its metadata.
//!
//! **Failures and close.** `genNotif` to an agent that is gone fails (NIXL reports a remote
//! disconnect; measured for a transport closed in this process and for a killed process),
//! and so does the READ; one to an agent closed a moment ago may still return success before
//! UCX noticed (seen in the suite), and then the READ fails. Either way the notification is
//! not reported delivered: `notify` fails, or its transfer does. At close (`revoke`) the
//! receiving thread is stopped and joined before the agent is destroyed: nothing more reaches
//! the inbox (which the transport has closed too), and senders' `genNotif` to this agent fail.
//!
//! A message NIXL hands over from a sender whose name no blockwire transport could have (empty,
//! longer than 128 bytes, control characters, not UTF-8), or longer than 4096 bytes, is
//! dropped and logged (`warn`, the first and every thousandth).
//!
//! ## NIXL's own handshake (plain NIXL agents, vLLM's `NixlTransport`)
//!
//! A descriptor's address is `NXL3`, the agent's name, the region and the agent's metadata
//! exactly as NIXL's `getLocalMD` gives it. [`agent_metadata`] takes that metadata out of a
//! descriptor (what a plain NIXL agent's `add_remote_agent` accepts), and
//! [`descriptor_from_nixl`] makes a descriptor from a plain agent's metadata and the geometry
//! of its one DRAM registration (vLLM's `(agent_metadata, base_addr, num_blocks, block_len)`),
//! reading the agent's name from the metadata ([`agent_name_of`]). Notifications need no
//! mapping: `genNotif` carries the message alone, so a plain agent's `get_new_notifs()` sees
//! the bytes the caller gave, under this transport's name, and a plain agent's
//! `make_prepped_xfer(..., notif_msg=...)` reaches this transport's `notifications` under the
//! plain agent's name. The names must be distinct across the fleet (see **Names**).
//!
//! ## Several agents in one process
//!
//! One transport per process is how NIXL is deployed, and what blockwire recommends. Several
//! in one process work (the suite runs two, three at a time), with one exception found here:
//! two pairs of agents busy at once in one process, one of them destroying an agent (a
//! transport closed or dropped) while the other side's transfers to it ran, corrupted the
//! heap inside NIXL 1.5.1's UCX plugin in 2 of 16 runs (a crash in `malloc` on a UCX thread).
//! One pair at a time it did not happen (0 of 12 runs), nor in two processes at once (0 of
//! 20), and serializing every blockwire call into NIXL behind one process-wide lock did not
//! prevent it, so it lies in NIXL's or its UCX's own threads. The nixl suite therefore runs
//! its cases one at a time.
//!
//! ## Options
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `backend` | `UCX` | NIXL backend plugin |
//! | `num_threads` | the plugin's | the plugin's `num_threads` parameter (UCX: progress threads) |
//! | `progress_delay_us` | [`DEFAULT_PROGRESS_DELAY_US`] | the agent's progress thread sweeps every worker at least this often (NIXL's `pthrDelay`, rounded up to whole ms by its UCX plugin); between sweeps it sleeps until a worker has an event. `0` makes it spin |
//! | `param.<key>` | | any other plugin parameter, passed as is |
//! | `lib_dir` | [`LIB_DIR_ENV`], else [`DEFAULT_LIB_DIR`] | directory of `libnixl_capi.so` |

mod address;
mod agent;
mod dram;
mod lists;
mod lock;
mod metadata;
mod notify;
mod open;
mod peer;
mod runtime;
#[cfg(test)]
mod tests;

use std::sync::Arc;

#[cfg(doc)]
use blockwire_core::OpenBackend;
use blockwire_core::kit::fence::CloseFence;
use blockwire_core::kit::{self, ByteRun, Live, LiveCounts, ProgressThread};
use blockwire_core::{
    Backend, BackendError, BackendErrorKind, BackendStats, BlockIndex, Capabilities, FailureReason,
    Op, PeerDescriptor, RegionSpan, XferState, decode_frame,
};
use nixl_sys::{XferOp, XferRequest, XferStatus};
use parking_lot::{Mutex, MutexGuard};

pub use agent::{DEFAULT_PROGRESS_DELAY_US, agent_config};
use agent::{Inner, nixl_error};
pub use dram::Dram;
use lists::{run_lists, to_i32};
use lock::AgentLock;
pub use metadata::{MetadataError, agent_metadata, agent_name_of, descriptor_from_nixl};
pub use peer::NixlPeer;
pub use runtime::{DEFAULT_LIB_DIR, LIB_DIR_ENV, load_runtime, runtime_loaded};

/// The backend kind written in descriptors.
///
/// ```
/// assert_eq!(blockwire_nixl::KIND, "nixl");
/// ```
pub const KIND: &str = "nixl";

/// The NIXL backend (see the crate docs and [`NixlBackend::open`]).
pub struct NixlBackend {
    span: RegionSpan,
    /// The agent, and what waits for its lock's next holder.
    inner: Arc<AgentLock>,
    /// The agent's name.
    name: String,
    /// The address bytes (see the `address` module).
    address: Vec<u8>,
    /// Peers on this host hold it around each post, and `revoke` waits for them
    /// (`blockwire_core::kit::fence`): NIXL's UCX plugin copies inside the initiator's post
    /// there, where this agent's destruction cannot stop it.
    fence: CloseFence,
    counts: LiveCounts,
    receiver: Arc<notify::Receiver>,
    /// The thread that drains NIXL's notifications into the inbox; stopped by `revoke`.
    receiving: Mutex<Option<ProgressThread>>,
}

/// A posted transfer: blocks, or a notification's probe.
pub struct NixlXfer {
    request: Option<XferRequest>,
    outcome: Option<XferState>,
    /// What a failed status check names: the transfer, or the probe of a notification.
    what: &'static str,
    _live: Live,
}

impl NixlBackend {
    /// A transfer's state, asking NIXL under the agent's lock as `lock` takes it (`None`:
    /// not taken, and the transfer reads as running).
    fn observe<'a>(
        &'a self,
        xfer: &mut NixlXfer,
        lock: impl FnOnce(&'a AgentLock) -> Option<MutexGuard<'a, Option<Inner>>>,
    ) -> XferState {
        if let Some(done) = &xfer.outcome {
            return done.clone();
        }
        let Some(request) = &xfer.request else {
            return XferState::Done;
        };
        let Some(guard) = lock(&self.inner) else {
            return XferState::Running;
        };
        let status = match guard.as_ref() {
            Some(inner) => inner.agent.get_xfer_status(request),
            // Never: transfers are released before revoke.
            None => return XferState::Running,
        };
        drop(guard);
        let state = match status {
            Ok(XferStatus::InProgress) => return XferState::Running,
            Ok(XferStatus::Success) => XferState::Done,
            Err(e) => XferState::Failed(FailureReason::StateCheck(format!("{}: {e}", xfer.what))),
        };
        xfer.outcome = Some(state.clone());
        state
    }

    /// The NIXL agent's name: the transport's name, or one generated for a backend opened
    /// without a transport. It is the sender NIXL reports with this backend's notifications.
    pub fn agent_name(&self) -> &str {
        &self.name
    }
}

impl Backend for NixlBackend {
    type Peer = NixlPeer;
    type Xfer = NixlXfer;

    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.read = true;
        c.cross_process = true;
        // NIXL's UCX endpoints handle peer errors, which keeps UCX off its shared-memory
        // queues (see the ucx backend's `isolates_peers`); the dead-peer check holds to it.
        c.isolates_peers = true;
        c.revoke = true;
        c.notifications = true;
        // Its post may move data in the caller's thread (NIXL with its UCX plugin on one host copies inside `postXferReq`): the
        // transport posts on its posting thread, so the caller never waits for the data.
        c.posts_in_caller = true;
        c
    }

    fn address(&self) -> Vec<u8> {
        self.address.clone()
    }

    fn connect(&self, desc: &PeerDescriptor) -> Result<NixlPeer, BackendError> {
        let mut guard = self.inner.lock();
        let inner = guard.as_mut().ok_or_else(revoked)?;
        inner.connect(desc, &self.address, self.counts.peer())
    }

    fn disconnect(&self, peer: NixlPeer) {
        // The peer's last transfer may be released in the caller's poll, which never waits
        // for the agent's lock: with it busy, the peer is parked for its next holder.
        self.inner.release_peer(peer.depart());
    }

    fn post(
        &self,
        peer: &NixlPeer,
        op: Op,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<NixlXfer, BackendError> {
        // Every index is checked before anything is posted. Blocks adjacent on both sides are
        // one descriptor per side (`kit::checked_runs`).
        let runs: Vec<ByteRun> = kit::checked_runs(
            &self.span,
            local,
            remote,
            peer.num_blocks,
            kit::DEFAULT_MAX_RUN_BYTES,
        )?
        .collect();
        let xop = match op {
            Op::Write => XferOp::Write,
            Op::Read => XferOp::Read,
        };
        // Built before the agent's lock is taken, from the peer's block 0 (`base`). A peer
        // registered in pieces gets block indices even for adjacent blocks.
        let lists = if runs.len() < local.len() && peer.registered_whole() {
            Some(run_lists(self.span.base_addr(), peer.base, &runs)?)
        } else {
            None
        };
        let guard = self.inner.lock();
        let inner = guard.as_ref().ok_or_else(revoked)?;
        // Held across the post, in which the data may move: the peer's close waits for it.
        // Taken once the agent's lock is ours (never waits), so that close never waits for
        // this thread's wait for the lock, behind another post's copy.
        let fenced = peer.hold_fence()?;
        let request = match lists {
            Some((near, far)) => inner
                .agent
                .create_xfer_req(xop, &near, &far, &peer.remote, None)
                .map_err(|e| nixl_error("create_xfer_req", e))?,
            None => {
                // Scattered: block indices on the two lists prepared once (the peer's by its
                // first such transfer).
                let (l, r) = (to_i32(local)?, to_i32(remote)?);
                let mut blocks = peer.blocks.lock();
                let list = match &mut *blocks {
                    Some(list) => list,
                    unprepared => {
                        let took = std::time::Instant::now();
                        let list = unprepared.insert(inner.prepare_blocks(
                            &peer.remote,
                            peer.base,
                            peer.num_blocks,
                            peer.block_len,
                        )?);
                        tracing::debug!(remote = %peer.remote, blocks = peer.num_blocks,
                            took = ?took.elapsed(), "nixl: the peer's block list prepared");
                        list
                    }
                };
                inner
                    .agent
                    .make_xfer_req(xop, &inner.local, &l, list, &r, None)
                    .map_err(|e| nixl_error("make_xfer_req", e))?
            }
        };
        let running = inner
            .agent
            .post_xfer_req(&request, None)
            .map_err(|e| nixl_error("post_xfer_req", e))?;
        drop((guard, fenced));
        Ok(NixlXfer {
            request: Some(request),
            outcome: (!running).then_some(XferState::Done),
            what: "get_xfer_status",
            _live: self.counts.transfer(),
        })
    }

    /// Sends the frame's message with `genNotif`, then the probe (see the crate docs,
    /// "Notifications"): the transfer is done once the probe is.
    fn notify(&self, peer: &NixlPeer, frame: &[u8]) -> Result<NixlXfer, BackendError> {
        let n = decode_frame(frame).map_err(|problem| {
            BackendError::new(
                BackendErrorKind::Other,
                format!("notification frame: {problem}"),
            )
        })?;
        let guard = self.inner.lock();
        let inner = guard.as_ref().ok_or_else(revoked)?;
        // The probe reads a byte of the peer's region (see `notify`); taken as in `post`.
        let fenced = peer.hold_fence()?;
        if n.sender != inner.name {
            // Only for a transport named like an unnamed backend (see `agent_name`).
            tracing::debug!(sender = %n.sender, agent = %inner.name, "NIXL sends as the agent");
        }
        let (request, running) = notify::send(inner, &peer.remote, peer.base, &n.message)?;
        drop((guard, fenced));
        tracing::trace!(remote = %peer.remote, len = n.message.len(), "nixl notification sent");
        Ok(NixlXfer {
            request: Some(request),
            outcome: (!running).then_some(XferState::Done),
            what: "get_xfer_status of the probe after genNotif",
            _live: self.counts.transfer(),
        })
    }

    fn poll_notifications(&self) {
        // Waits for the agent's lock, unlike `state`: a notification whose transfer is done
        // is in NIXL, and this drain must find it ("Delivered" in the crate docs).
        self.receiver.drain(&self.inner);
    }

    fn state(&self, xfer: &mut NixlXfer) -> XferState {
        // Never waits for the agent's lock: another thread holding it may be inside a NIXL
        // call that takes long (the posting thread's `postXferReq`, which with the UCX plugin
        // on one host copies the data in it: up to tens of ms), and the caller's `poll` must
        // not wait for that. The transfer is observed again at the next poll.
        self.observe(xfer, AgentLock::try_lock)
    }

    fn state_blocking(&self, xfer: &mut NixlXfer) -> XferState {
        // The stall watchdog, about to cut the peer: worth waiting for the post in progress.
        self.observe(xfer, |lock| Some(lock.lock()))
    }

    fn release(&self, mut xfer: NixlXfer) -> Result<(), NixlXfer> {
        // Only a request NIXL reported terminal is dropped (dropping is nixl-sys's release,
        // and it hides a failed one).
        if self.state(&mut xfer) == XferState::Running {
            return Err(xfer);
        }
        // As in `state`, the caller does not wait for the agent's lock: with it busy, the
        // finished request (which moves no more bytes) is parked for the lock's next holder.
        if let Some(request) = xfer.request.take() {
            self.inner.release_request(request);
        }
        Ok(())
    }

    fn revoke(&self) {
        // Peers on this host first: none posts from now on, and the posts they made have
        // returned, with whatever they copied (past `CLOSE_WAIT` the fence says so and this
        // goes on). Idempotent.
        if let Ok(waited) = self.fence.close() {
            tracing::debug!(?waited, "nixl: peers' posts stopped");
        }
        // The receiving thread next (it calls into the agent); nothing reaches the inbox
        // after it stopped.
        if let Some(mut thread) = self.receiving.lock().take() {
            thread.stop();
        }
        // Taking the lock releases what was parked, before the agent it points into goes.
        let mut guard = self.inner.lock();
        if let Some(inner) = guard.take() {
            inner.destroy();
            tracing::debug!(agent = %self.name, "nixl agent destroyed");
        }
    }

    fn stats(&self) -> BackendStats {
        self.counts.stats()
    }
}

/// Why a call finds the agent gone.
fn revoked() -> BackendError {
    BackendError::new(
        BackendErrorKind::Unsupported,
        "the transport closed: its NIXL agent was destroyed",
    )
}

impl Drop for NixlBackend {
    fn drop(&mut self) {
        // The same order as revoke (a backend dropped without it).
        self.revoke();
    }
}
