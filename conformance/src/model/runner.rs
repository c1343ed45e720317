//! The runner: applies each operation to the transports and to the model, and checks one
//! against the other.

use super::state::*;
use super::*;
use blockwire::Transport;
use blockwire_core::{
    BackendStats, BlockIndex, CancelMode, Error, FailureReason, PeerDescriptor, PeerId, PollResult,
    TransferId,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

pub(super) struct Runner<'s, T: Transport> {
    pub(super) setup: &'s Setup,
    pub(super) local: T,
    pub(super) remotes: Vec<T>,
    pub(super) descs: Vec<PeerDescriptor>,
    pub(super) names: Vec<PeerId>,
    pub(super) m: Model,
    pub(super) report: Report,
    pub(super) next_stamp: u64,
    /// What each stamp was written as, to name a block's content in a report.
    pub(super) stamps: HashMap<u64, String>,
    pub(super) trace: Vec<String>,
    pub(super) buf: Vec<u8>,
}

pub(super) type Step = Result<(), String>;

pub(super) fn expect_refused<T>(got: Result<T, Error>, want: &Error) -> Step
where
    T: fmt::Debug,
{
    match got {
        Err(e) if &e == want => Ok(()),
        other => Err(format!("returned {other:?}, expected Err({want:?})")),
    }
}

impl<'s, T: Transport> Runner<'s, T> {
    pub(super) fn open<F: Fixture<Transport = T>>(
        fx: &F,
        setup: &'s Setup,
    ) -> Result<Self, String> {
        let spec = |n: u32| Spec::new(n, setup.block_len);
        let local = fx
            .open(&spec(setup.num_blocks))
            .map_err(|e| e.to_string())?
            .transport;
        let mut remotes = Vec::new();
        let mut descs = Vec::new();
        for &n in &setup.remote_blocks {
            let r = fx.open(&spec(n)).map_err(|e| e.to_string())?.transport;
            descs.push(r.descriptor().map_err(|e| e.to_string())?);
            remotes.push(r);
        }
        let mut content = vec![vec![Content::Known(0); setup.num_blocks as usize]];
        content.extend(
            setup
                .remote_blocks
                .iter()
                .map(|&n| vec![Content::Known(0); n as usize]),
        );
        let peers = setup.peers.max(1);
        Ok(Runner {
            setup,
            local,
            remotes,
            descs,
            names: (0..peers).map(|i| PeerId::from(format!("p{i}"))).collect(),
            m: Model {
                content,
                peers: (0..peers).map(|_| PeerModel::default()).collect(),
                conns: Vec::new(),
                tracked: BTreeMap::new(),
                gone: HashMap::new(),
                detached: HashSet::new(),
                handles: Vec::new(),
                closed: false,
            },
            report: Report::default(),
            next_stamp: 1,
            stamps: HashMap::new(),
            trace: Vec::new(),
            buf: vec![0; setup.block_len],
        })
    }

    pub(super) fn space_name(&self, space: usize) -> String {
        if space == 0 {
            "local".into()
        } else {
            format!("r{}", space - 1)
        }
    }

    pub(super) fn space(&self, space: usize) -> &T {
        if space == 0 {
            &self.local
        } else {
            &self.remotes[space - 1]
        }
    }

    pub(super) fn peer_index(&self, peer: u8) -> usize {
        peer as usize % self.names.len()
    }

    pub(super) fn remote_index(&self, remote: u8) -> usize {
        remote as usize % self.remotes.len()
    }

    pub(super) fn step(&mut self, op: &Op) -> Step {
        self.apply(op)?;
        self.check_in_flight()
    }

    /// `in_flight` equals the model's tracked transfers, per peer and in all (zero once
    /// closed).
    pub(super) fn check_in_flight(&self) -> Step {
        let all = self.local.in_flight(None);
        if all != self.m.tracked.len() {
            return Err(format!(
                "in_flight(None) is {all}, the model tracks {}",
                self.m.tracked.len()
            ));
        }
        for (p, name) in self.names.iter().enumerate() {
            let want = self.m.tracked.values().filter(|x| x.peer == p).count();
            let got = self.local.in_flight(Some(name));
            if got != want {
                return Err(format!(
                    "in_flight({name:?}) is {got}, the model tracks {want}"
                ));
            }
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Step {
        match op {
            Op::Add { peer, remote } => {
                self.add(self.peer_index(*peer), self.remote_index(*remote))
            }
            Op::AddAsync { peer, remote } => {
                self.add_async(self.peer_index(*peer), self.remote_index(*remote))
            }
            Op::Remove { peer } => self.remove(self.peer_index(*peer)),
            Op::Transfer {
                dir,
                peer,
                blocks,
                pick,
            } => self.transfer(*dir, self.peer_index(*peer), *blocks, *pick),
            Op::Invalid {
                dir,
                peer,
                defect,
                pick,
            } => self.invalid(*dir, self.peer_index(*peer), *defect, *pick),
            Op::Poll { peer } => self.poll(peer.map(|p| self.peer_index(p))),
            Op::Cancel { mode, picks } => self.cancel(*mode, picks),
            Op::Drain => self.drain(),
            Op::Close => self.close(),
        }
    }

    // --- registrations ------------------------------------------------------------------

    /// Every unresolved handle of `peer` may now also resolve `Superseded`.
    pub(super) fn supersede_handles(&mut self, peer: usize) {
        for h in self.m.handles.iter_mut().filter(|h| h.peer == peer) {
            if !h.allowed.contains(&RegOutcome::Superseded) {
                h.allowed.push(RegOutcome::Superseded);
            }
        }
    }

    pub(super) fn publish(&mut self, peer: usize, remote: usize) {
        if let Some(old) = self.m.peers[peer].published {
            self.m.conns[old].state = ConnState::Retired;
        }
        self.m.conns.push(Conn {
            remote,
            state: ConnState::Live,
        });
        self.m.peers[peer].published = Some(self.m.conns.len() - 1);
    }

    /// Waits for the handles of `peer` (every peer for `None`) and checks each outcome.
    pub(super) fn wait_handles(&mut self, peer: Option<usize>) -> Step {
        let (mine, rest): (Vec<Handle>, Vec<Handle>) = std::mem::take(&mut self.m.handles)
            .into_iter()
            .partition(|h| peer.is_none_or(|p| h.peer == p));
        self.m.handles = rest;
        for h in mine {
            let got = match h.handle.wait_timeout(self.setup.timeout) {
                Ok(got) => got,
                Err(_) => {
                    return Err(format!(
                        "registration {} did not resolve within {:?}",
                        h.what, self.setup.timeout
                    ));
                }
            };
            let outcome = match &got {
                Ok(()) => Some(RegOutcome::Ok),
                Err(Error::Superseded { peer: p }) if *p == self.names[h.peer] => {
                    Some(RegOutcome::Superseded)
                }
                Err(Error::Closed) => Some(RegOutcome::Closed),
                Err(_) => None,
            };
            self.trace
                .push(format!("  registration {} resolved {got:?}", h.what));
            match outcome {
                Some(o) if h.allowed.contains(&o) => {
                    if o == RegOutcome::Superseded {
                        self.report.superseded += 1;
                    }
                }
                _ => {
                    return Err(format!(
                        "registration {} resolved {got:?}, expected one of {:?}",
                        h.what, h.allowed
                    ));
                }
            }
        }
        Ok(())
    }

    /// Settles `peer`: waits for its handles and applies what they hid.
    pub(super) fn resolve(&mut self, peer: usize) -> Step {
        let Some(pending) = self.m.peers[peer].pending.take() else {
            return Ok(());
        };
        self.wait_handles(Some(peer))?;
        match pending {
            Pending::Add(remote) => self.publish(peer, remote),
            Pending::Removed => {}
        }
        Ok(())
    }

    pub(super) fn resolve_all(&mut self) -> Step {
        for p in 0..self.names.len() {
            self.resolve(p)?;
        }
        Ok(())
    }

    pub(super) fn add(&mut self, peer: usize, remote: usize) -> Step {
        let name = self.names[peer].clone();
        let got = self.local.add_remote_peer(&name, &self.descs[remote]);
        self.trace
            .push(format!("  add {name} -> r{remote}: {got:?}"));
        if self.m.closed {
            self.report.refused += 1;
            return expect_refused(got, &Error::Closed);
        }
        self.supersede_handles(peer);
        got.map_err(|e| format!("add_remote_peer failed: {e:?}"))?;
        // The worker runs registrations in order: every earlier one of this peer has finished.
        self.m.peers[peer].pending = None;
        self.wait_handles(Some(peer))?;
        // Retires the connection the model knew; one an asynchronous add published meanwhile
        // is retired as well, and had no transfers (the runner posts only to settled peers).
        self.publish(peer, remote);
        Ok(())
    }

    pub(super) fn add_async(&mut self, peer: usize, remote: usize) -> Step {
        let name = self.names[peer].clone();
        let handle = self.local.add_remote_peer_async(&name, &self.descs[remote]);
        let what = format!("#{} ({name} -> r{remote})", self.trace.len());
        self.trace.push(format!("  add_async {what}"));
        if self.m.closed {
            self.report.refused += 1;
            if !handle.is_finished() {
                return Err("add_remote_peer_async after close: the handle is pending, \
                            expected one already resolved Err(Closed)"
                    .into());
            }
            return expect_refused(handle.wait(), &Error::Closed);
        }
        self.supersede_handles(peer);
        if let Some(c) = self.m.peers[peer].published {
            if self.m.conns[c].state == ConnState::Live {
                self.m.conns[c].state = ConnState::MaybeRetired;
            }
        }
        self.m.peers[peer].pending = Some(Pending::Add(remote));
        self.m.handles.push(Handle {
            peer,
            what,
            handle,
            allowed: vec![RegOutcome::Ok],
        });
        Ok(())
    }

    pub(super) fn remove(&mut self, peer: usize) -> Step {
        let name = self.names[peer].clone();
        let got = self.local.remove_remote_peer(&name);
        self.trace.push(format!("  remove {name}: {got:?}"));
        if self.m.closed {
            self.report.refused += 1;
            return expect_refused(got, &Error::Closed);
        }
        let unknown = Error::UnknownPeer(name.clone());
        let p = &self.m.peers[peer];
        let ok_allowed = match p.pending {
            None => p.published.is_some(),
            Some(_) => true,
        };
        // After a remove, a superseded registration may still be queued ("being registered",
        // so Ok) or already finished (so unknown): both are right.
        let unknown_allowed = match p.pending {
            None => p.published.is_none(),
            Some(Pending::Add(_)) => false,
            Some(Pending::Removed) => true,
        };
        match &got {
            Ok(()) if ok_allowed => {}
            Err(e) if unknown_allowed && *e == unknown => self.report.refused += 1,
            _ => {
                return Err(format!(
                    "returned {got:?}; expected {}",
                    match (ok_allowed, unknown_allowed) {
                        (true, true) => "Ok or UnknownPeer",
                        (true, false) => "Ok",
                        _ => "Err(UnknownPeer)",
                    }
                ));
            }
        }
        if let Some(c) = self.m.peers[peer].published.take() {
            self.m.conns[c].state = ConnState::Retired;
        }
        if self.m.peers[peer].pending.is_some() {
            self.m.peers[peer].pending = Some(Pending::Removed);
            self.supersede_handles(peer);
        }
        Ok(())
    }

    // --- transfers -----------------------------------------------------------------------

    pub(super) fn post(
        &self,
        dir: Dir,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
    ) -> Result<TransferId, Error> {
        match dir {
            Dir::Write => self.local.write_blocks(peer, local, remote),
            Dir::Read => self.local.read_blocks(peer, local, remote),
        }
    }

    pub(super) fn fresh_stamp(&mut self, what: String) -> u64 {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.stamps.insert(stamp, what);
        stamp
    }

    pub(super) fn new_id(&self, id: TransferId) -> Step {
        if self.m.tracked.contains_key(&id) || self.m.gone.contains_key(&id) {
            return Err(format!("transfer id {id} was issued twice"));
        }
        Ok(())
    }

    pub(super) fn transfer(&mut self, dir: Dir, peer: usize, blocks: u8, pick: u64) -> Step {
        let name = self.names[peer].clone();
        if self.m.closed {
            let got = self.post(dir, &name, &[0], &[0]);
            self.trace
                .push(format!("  {dir:?} {name} [0]->[0]: {got:?}"));
            self.report.refused += 1;
            return expect_refused(got, &Error::Closed);
        }
        self.resolve(peer)?;
        let Some(conn) = self.m.peers[peer].published else {
            let live = self.local.backend_stats().live_transfers;
            let got = self.post(dir, &name, &[0], &[0]);
            self.trace
                .push(format!("  {dir:?} {name} [0]->[0]: {got:?}"));
            self.report.refused += 1;
            expect_refused(got, &Error::UnknownPeer(name))?;
            return self.nothing_tracked(live);
        };
        let remote = self.m.conns[conn].remote;
        let rspace = remote + 1;
        let busy = self.m.busy();
        let free = |space: usize, n: u32| -> Vec<BlockIndex> {
            (0..n).filter(|b| !busy.contains(&(space, *b))).collect()
        };
        let free_local = free(0, self.setup.num_blocks);
        let free_remote = free(rspace, self.setup.remote_blocks[remote]);
        let n = (blocks.max(1) as usize)
            .min(free_local.len())
            .min(free_remote.len());
        if n == 0 {
            self.report.skipped += 1;
            self.trace.push("  skipped: no free block".into());
            return Ok(());
        }
        let mut state = pick;
        let local = choose(&free_local, n, &mut state);
        let remote_blocks = choose(&free_remote, n, &mut state);
        let (mut srcs, src_space, dsts, dst_space) = match dir {
            Dir::Write => (local, 0, remote_blocks, rspace),
            Dir::Read => (remote_blocks, rspace, local, 0),
        };
        if n >= 2 && splitmix(state) & 3 == 0 {
            srcs[1] = srcs[0];
        }
        // Fresh content in every source block.
        let distinct: BTreeSet<BlockIndex> = srcs.iter().copied().collect();
        for &b in &distinct {
            let stamp = self.fresh_stamp(format!(
                "source {}[{b}] of {dir:?} to {name} at trace line {}",
                self.space_name(src_space),
                self.trace.len()
            ));
            stamp_bytes(stamp, &mut self.buf);
            self.space(src_space)
                .region()
                .write_block(b, &self.buf)
                .map_err(|e| format!("writing a source block: {e}"))?;
            self.m.content[src_space][b as usize] = Content::Known(stamp);
        }
        let (l, r) = match dir {
            Dir::Write => (&srcs, &dsts),
            Dir::Read => (&dsts, &srcs),
        };
        let got = self.post(dir, &name, l, r);
        let what = format!("{dir:?} {name} (r{remote}) local {l:?} remote {r:?}");
        self.trace.push(format!("  {what}: {got:?}"));
        let id = got.map_err(|e| format!("a valid transfer was refused: {e:?}"))?;
        self.new_id(id)?;
        let lands = srcs
            .iter()
            .zip(&dsts)
            .map(|(&s, &d)| (dst_space, d, self.m.content[src_space][s as usize]))
            .collect();
        let mut touches: Vec<(usize, BlockIndex)> = srcs.iter().map(|&b| (src_space, b)).collect();
        touches.extend(dsts.iter().map(|&b| (dst_space, b)));
        self.m.tracked.insert(
            id,
            Xfer {
                peer,
                conn,
                lands,
                touches,
                aborted: false,
                what,
            },
        );
        self.report.posted += 1;
        Ok(())
    }

    /// A refused call must leave nothing tracked: the backend holds as many transfers as
    /// before (only this thread's calls release any).
    pub(super) fn nothing_tracked(&self, live_before: usize) -> Step {
        let live = self.local.backend_stats().live_transfers;
        if live != live_before {
            return Err(format!(
                "a refused call changed the backend's live transfers from {live_before} to {live}"
            ));
        }
        Ok(())
    }

    pub(super) fn invalid(&mut self, dir: Dir, peer: usize, defect: Defect, pick: u64) -> Step {
        let name = self.names[peer].clone();
        if !self.m.closed {
            self.resolve(peer)?;
        }
        let published = self.m.peers[peer].published;
        let local_n = self.setup.num_blocks;
        let remote_n = match published {
            Some(c) => self.setup.remote_blocks[self.m.conns[c].remote],
            None => self.setup.remote_blocks[0],
        };
        let mut state = pick;
        let n = 2 + (splitmix(pick) % 2) as usize;
        let all_local: Vec<BlockIndex> = (0..local_n).collect();
        let all_remote: Vec<BlockIndex> = (0..remote_n).collect();
        let mut local = choose(&all_local, n, &mut state);
        let mut remote = choose(&all_remote, n, &mut state);
        let n = local.len().min(remote.len());
        local.truncate(n);
        remote.truncate(n);
        let k = (splitmix(state) % n.max(1) as u64) as usize;
        let past = (splitmix(state ^ 1) % 3) as u32;
        let want = match defect {
            Defect::LengthMismatch => {
                local.pop();
                Error::LengthMismatch {
                    local: local.len(),
                    remote: remote.len(),
                }
            }
            Defect::Empty => {
                local.clear();
                remote.clear();
                Error::EmptyTransfer
            }
            Defect::LocalOutOfRange => {
                local[k] = local_n + past;
                Error::LocalIndexOutOfRange {
                    index: local[k],
                    num_blocks: local_n,
                }
            }
            Defect::RemoteOutOfRange => {
                remote[k] = remote_n + past;
                Error::RemoteIndexOutOfRange {
                    peer: name.clone(),
                    index: remote[k],
                    num_blocks: remote_n,
                }
            }
            Defect::DuplicateDestination => {
                let index = match dir {
                    Dir::Write => repeat_first(&mut remote, &mut local),
                    Dir::Read => repeat_first(&mut local, &mut remote),
                };
                Error::DuplicateDestination {
                    op: dir.op(),
                    index,
                }
            }
        };
        let live = self.local.backend_stats().live_transfers;
        let got = self.post(dir, &name, &local, &remote);
        self.trace.push(format!(
            "  {dir:?} {name} local {local:?} remote {remote:?}: {got:?}"
        ));
        self.report.refused += 1;
        if self.m.closed {
            return expect_refused(got, &Error::Closed);
        }
        match (&got, published) {
            (Err(e), Some(_)) if *e == want => {}
            (Err(e), None)
                if *e == Error::UnknownPeer(name.clone())
                    || (defect != Defect::RemoteOutOfRange && *e == want) => {}
            _ => {
                let expected = match published {
                    Some(_) => format!("Err({want:?})"),
                    None => format!("Err(UnknownPeer({name:?})) (or Err({want:?}))"),
                };
                return Err(format!("returned {got:?}, expected {expected}"));
            }
        }
        self.nothing_tracked(live)
    }

    // --- polling and cancelling ----------------------------------------------------------

    pub(super) fn poll(&mut self, peer: Option<usize>) -> Step {
        let name = peer.map(|p| self.names[p].clone());
        let got = self.local.poll(name.as_ref());
        if self.m.closed {
            self.trace.push(format!("  poll({name:?}): {got:?}"));
            self.report.refused += 1;
            return expect_refused(got, &Error::Closed);
        }
        let r = got.map_err(|e| format!("poll failed: {e:?}"))?;
        self.absorb(r, peer)
    }

    /// Checks and applies one poll result.
    pub(super) fn absorb(&mut self, r: PollResult, peer: Option<usize>) -> Step {
        // Every peer here is healthy: no transfer fails but by a remove or a cancel.
        if let Some(fault) = &r.peer_fault {
            return Err(format!(
                "poll({:?}) reported a peer fault: {fault}",
                peer.map(|p| &self.names[p])
            ));
        }
        if r.is_empty() {
            return Ok(());
        }
        self.trace.push(format!(
            "  poll({:?}): done {:?} failed {:?}",
            peer.map(|p| &self.names[p]),
            r.done,
            r.failed
        ));
        // `PollResult` lists each kind in id order.
        let ascending = |ids: &[TransferId]| ids.windows(2).all(|w| w[0] < w[1]);
        let failed: Vec<TransferId> = r.failed.iter().map(|(id, _)| *id).collect();
        if !ascending(&r.done) || !ascending(&failed) {
            return Err(format!(
                "poll returned ids out of id order: done {:?}, failed {failed:?}",
                r.done
            ));
        }
        for id in r.done {
            self.finish_xfer(id, Ok(()), peer)?;
        }
        for (id, reason) in r.failed {
            self.finish_xfer(id, Err(reason), peer)?;
        }
        Ok(())
    }

    pub(super) fn finish_xfer(
        &mut self,
        id: TransferId,
        got: Result<(), FailureReason>,
        polled: Option<usize>,
    ) -> Step {
        let Some(x) = self.m.tracked.remove(&id) else {
            return Err(match self.m.gone.get(&id) {
                Some(Gone::Reported) => format!("id {id} reported twice (now {got:?})"),
                Some(Gone::TakenByWait) => format!(
                    "id {id} reported ({got:?}) after a cancel(Wait) took it (did not return it)"
                ),
                Some(Gone::Forgotten) => {
                    format!("id {id} reported ({got:?}) after cancel(Immediate) forgot it")
                }
                Some(Gone::Closed) => format!("id {id} reported ({got:?}) after close"),
                None => format!("id {id} reported ({got:?}) but never issued"),
            });
        };
        if let Some(p) = polled {
            if x.peer != p {
                return Err(format!(
                    "poll({:?}) reported id {id} ({}), which belongs to {:?}",
                    self.names[p], x.what, self.names[x.peer]
                ));
            }
        }
        let state = self.m.conns[x.conn].state;
        let allowed = match (state, &got) {
            // A transfer that completed before its peer was removed is reported done.
            (_, Ok(())) => true,
            (ConnState::Retired, Err(FailureReason::PeerRemoved)) => true,
            // One a cancel-wait aborted may have stopped before its peer was removed: it then
            // reports its own failure.
            (ConnState::Retired, Err(_)) => x.aborted,
            (ConnState::MaybeRetired, Err(FailureReason::PeerRemoved)) => true,
            (_, Err(FailureReason::PeerRemoved)) => false,
            (_, Err(_)) => x.aborted,
        };
        if !allowed {
            let expected = match (state, x.aborted) {
                (ConnState::Retired, false) => {
                    "done (completed before its peer was removed or replaced), or failed \
                     PeerRemoved"
                }
                (ConnState::Retired, true) => {
                    "done, or failed: PeerRemoved, or the abort's reason if it stopped before \
                     its peer was removed"
                }
                (ConnState::MaybeRetired, false) => {
                    "done, or failed PeerRemoved (a registration replacing its peer was pending)"
                }
                (ConnState::MaybeRetired, true) => "done or failed",
                (ConnState::Live, false) => "done (its peer is live and nothing cancelled it)",
                (ConnState::Live, true) => {
                    "done, or failed for a reason other than PeerRemoved (its peer is live)"
                }
            };
            return Err(format!(
                "id {id} ({}) ended {got:?}; expected {expected}",
                x.what
            ));
        }
        match got {
            Ok(()) => {
                for &(space, block, content) in &x.lands {
                    self.m.content[space][block as usize] = content;
                }
                self.report.done += 1;
            }
            Err(_) => {
                self.m.forget_destinations(&x);
                self.report.failed += 1;
            }
        }
        self.m.gone.insert(id, Gone::Reported);
        Ok(())
    }

    pub(super) fn cancel(&mut self, mode: CancelMode, picks: &[u32]) -> Step {
        let tracked: Vec<TransferId> = self.m.tracked.keys().copied().collect();
        let mut gone: Vec<TransferId> = self.m.gone.keys().copied().collect();
        gone.sort();
        let ids: Vec<TransferId> = picks
            .iter()
            .map(|&p| {
                if p % 4 != 3 && !tracked.is_empty() {
                    tracked[(p / 4) as usize % tracked.len()]
                } else if p % 8 == 3 && !gone.is_empty() {
                    gone[(p / 8) as usize % gone.len()]
                } else {
                    TransferId(u64::MAX - u64::from(p))
                }
            })
            .collect();
        let got = self.local.cancel(&ids, mode);
        self.trace
            .push(format!("  cancel({ids:?}, {mode:?}): {got:?}"));
        if self.m.closed {
            self.report.refused += 1;
            return expect_refused(got, &Error::Closed);
        }
        let still = got.map_err(|e| format!("cancel failed: {e:?}"))?;
        let asked: BTreeSet<TransferId> = ids
            .iter()
            .copied()
            .filter(|id| self.m.tracked.contains_key(id))
            .collect();
        match mode {
            CancelMode::Immediate => {
                if !still.is_empty() {
                    return Err(format!("cancel(Immediate) returned {still:?}, expected []"));
                }
                for id in asked {
                    if let Some(x) = self.m.tracked.remove(&id) {
                        self.m.forget_destinations(&x);
                        self.m.detached.extend(x.touches.iter().copied());
                        self.m.gone.insert(id, Gone::Forgotten);
                        self.report.forgotten += 1;
                    }
                }
            }
            CancelMode::Wait => {
                // An id asked for twice may be returned twice (once per ask), never more.
                for id in &still {
                    let returned = still.iter().filter(|x| *x == id).count();
                    let asked = ids.iter().filter(|x| *x == id).count();
                    if returned > asked {
                        return Err(format!(
                            "cancel(Wait) returned id {id} {returned} times, asked {asked} \
                             times: {still:?} (asked {ids:?})"
                        ));
                    }
                }
                let returned: BTreeSet<TransferId> = still.iter().copied().collect();
                if let Some(bad) = returned.difference(&asked).next() {
                    return Err(format!(
                        "cancel(Wait) returned id {bad}, which was not asked for or not in \
                         flight (asked {ids:?}, in flight among them {asked:?})"
                    ));
                }
                for id in asked {
                    if returned.contains(&id) {
                        if let Some(x) = self.m.tracked.get_mut(&id) {
                            x.aborted = true;
                        }
                        self.report.still_running += 1;
                    } else if let Some(x) = self.m.tracked.remove(&id) {
                        self.m.forget_destinations(&x);
                        self.m.gone.insert(id, Gone::TakenByWait);
                        self.report.taken_by_wait += 1;
                    }
                }
            }
        }
        Ok(())
    }

    // --- drain, verify, close ------------------------------------------------------------

    pub(super) fn drain(&mut self) -> Step {
        self.report.drains += 1;
        if self.m.closed {
            return self.verify("drain after close");
        }
        self.resolve_all()?;
        let deadline = Instant::now() + self.setup.timeout;
        loop {
            let r = self
                .local
                .poll(None)
                .map_err(|e| format!("poll(None) failed: {e:?}"))?;
            let empty = r.is_empty();
            self.absorb(r, None)?;
            let live = self.local.backend_stats().live_transfers;
            if self.m.tracked.is_empty() && live == 0 {
                break;
            }
            if empty && live == 0 {
                let ids: Vec<String> = self
                    .m
                    .tracked
                    .iter()
                    .map(|(id, x)| {
                        format!("{id} ({}, cancel-wait returned it: {})", x.what, x.aborted)
                    })
                    .collect();
                return Err(format!(
                    "the backend holds no transfer any more, yet ids {ids:?} were never \
                     reported, taken or forgotten: they never will be"
                ));
            }
            if Instant::now() >= deadline {
                let ids: Vec<&TransferId> = self.m.tracked.keys().collect();
                return Err(format!(
                    "drain: after {:?}, ids {ids:?} are still unreported and the backend \
                     holds {live} transfers",
                    self.setup.timeout
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.m.detached.clear();
        self.trace.push("  drained".into());
        self.verify("drain")?;
        let mut published: Vec<PeerId> = self
            .m
            .peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.published.is_some())
            .map(|(i, _)| self.names[i].clone())
            .collect();
        published.sort();
        let peers = self.local.peers();
        if peers != published {
            return Err(format!(
                "peers() is {peers:?}, expected {published:?} after every registration resolved"
            ));
        }
        let stats = self.local.backend_stats();
        if stats.connected_peers != published.len() {
            return Err(format!(
                "backend_stats() is {stats:?} with nothing in flight: expected {} connected \
                 peers, one per published peer",
                published.len()
            ));
        }
        Ok(())
    }

    /// Compares every block whose content the model knows.
    pub(super) fn verify(&mut self, when: &str) -> Step {
        let mut wrong = Vec::new();
        let mut got = vec![0u8; self.setup.block_len];
        for space in 0..self.m.content.len() {
            for block in 0..self.m.content[space].len() {
                let Content::Known(stamp) = self.m.content[space][block] else {
                    continue;
                };
                self.space(space)
                    .region()
                    .read_block(block as BlockIndex, &mut got)
                    .map_err(|e| format!("reading a block: {e}"))?;
                stamp_bytes(stamp, &mut self.buf);
                if got != self.buf {
                    wrong.push(format!(
                        "{}[{block}] should hold {} but holds {}",
                        self.space_name(space),
                        self.describe(stamp),
                        self.identify(&got)
                    ));
                }
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{when}: {} blocks differ from the model: {}",
                wrong.len(),
                wrong.join("; ")
            ))
        }
    }

    pub(super) fn describe(&self, stamp: u64) -> String {
        if stamp == 0 {
            return "zeros".into();
        }
        match self.stamps.get(&stamp) {
            Some(what) => format!("stamp {stamp} ({what})"),
            None => format!("stamp {stamp}"),
        }
    }

    /// Names what a block holds, as far as stamps tell.
    pub(super) fn identify(&self, got: &[u8]) -> String {
        if got.iter().all(|&b| b == 0) {
            return "zeros".into();
        }
        let mut head = [0u8; 8];
        let n = got.len().min(8);
        head[..n].copy_from_slice(&got[..n]);
        let stamp = u64::from_le_bytes(head) ^ MAGIC;
        if self.stamps.contains_key(&stamp) {
            let mut expected = vec![0u8; got.len()];
            stamp_bytes(stamp, &mut expected);
            let same = got.iter().zip(&expected).filter(|(a, b)| a == b).count();
            if same == got.len() {
                return self.describe(stamp);
            }
            return format!(
                "{} bytes of {} ({} bytes differ)",
                same,
                self.describe(stamp),
                got.len() - same
            );
        }
        format!("other bytes (first eight {:02x?})", &got[..n])
    }

    pub(super) fn close(&mut self) -> Step {
        if self.m.closed {
            let got = self.local.close();
            self.trace.push(format!("  close again: {got:?}"));
            return got.map_err(|e| format!("close after close returned Err({e:?}), expected Ok"));
        }
        for h in &mut self.m.handles {
            h.allowed.push(RegOutcome::Closed);
        }
        let got = self.local.close();
        self.trace.push(format!("  close: {got:?}"));
        got.map_err(|e| format!("close returned Err({e:?})"))?;
        self.m.closed = true;
        self.wait_handles(None)?;
        for p in &mut self.m.peers {
            p.pending = None;
            p.published = None;
        }
        for (id, x) in std::mem::take(&mut self.m.tracked) {
            self.m.forget_destinations(&x);
            self.m.gone.insert(id, Gone::Closed);
            self.report.in_flight_at_close += 1;
        }
        if !self.local.is_closed() {
            return Err("is_closed() is false after close".into());
        }
        let peers = self.local.peers();
        if !peers.is_empty() {
            return Err(format!("peers() is {peers:?} after close, expected []"));
        }
        expect_refused(self.local.descriptor(), &Error::Closed)?;
        self.verify("after close")
    }

    /// Drains (unless closed), closes everything, and checks that every backend released
    /// every peer and transfer.
    pub(super) fn finish(mut self) -> Result<Report, String> {
        if !self.m.closed {
            self.drain()?;
            self.close()?;
        }
        self.verify("after close")?;
        for (i, r) in self.remotes.iter().enumerate() {
            r.close()
                .map_err(|e| format!("closing remote r{i}: {e:?}"))?;
        }
        let deadline = Instant::now() + self.setup.timeout;
        loop {
            let stats: Vec<BackendStats> = std::iter::once(&self.local)
                .chain(&self.remotes)
                .map(|t| t.backend_stats())
                .collect();
            if stats.iter().all(|s| *s == BackendStats::default()) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{:?} after closing every transport: backend live counts (local, r0, ...) \
                     are {stats:?}, expected all zero",
                    self.setup.timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(self.report)
    }
}

// ---------------------------------------------------------------------------------------------
// Process resources.
