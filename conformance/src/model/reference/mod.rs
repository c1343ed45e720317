//! The reference model: a pure state machine of what the contract lets a transport do.
//!
//! [`Model::apply`] takes one [`Action`] and returns the [`Expected`] calls: which concrete
//! call the runner makes (the blocks, ids and stamps the model chose), what it must return,
//! and the registrations to settle first. Whatever the action alone determines, `apply`
//! applies to the state at once. What the contract leaves to the backend (which id a post
//! gets, what a poll or a cancel-wait reports) the runner hands back, and the model checks it
//! and applies it: [`Model::track`], [`Model::absorb`], [`Model::cancelled`],
//! [`Model::received`]. Nothing here
//! touches a transport, a clock or a thread.

mod close;
mod notes;
mod outcomes;
mod peers;
mod transfer;

use std::collections::{BTreeMap, HashMap, HashSet};

use blockwire_core::{BlockIndex, Error, PeerId, TransferId};

use super::Setup;
use super::action::Action;
use super::expected::{Expected, Settle, Then};
use super::state::*;

/// What the model knows of one run: every block's content, every peer and connection, every
/// transfer and registration handle.
pub(super) struct Model {
    /// Local blocks, then each remote's (as the [`Setup`] says).
    pub(super) num_blocks: u32,
    pub(super) remote_blocks: Vec<u32>,
    /// Peer names `p0`, `p1`, ...
    pub(super) names: Vec<PeerId>,
    /// Per space (0: local, 1 + r: remote r), per block.
    pub(super) content: Vec<Vec<Content>>,
    pub(super) peers: Vec<PeerModel>,
    pub(super) conns: Vec<Conn>,
    pub(super) tracked: BTreeMap<TransferId, Xfer>,
    pub(super) gone: HashMap<TransferId, Gone>,
    /// Blocks touched by transfers an immediate cancel forgot: busy until the next drain.
    pub(super) detached: HashSet<(usize, BlockIndex)>,
    pub(super) handles: Vec<HandleModel>,
    pub(super) next_handle: usize,
    pub(super) closed: bool,
    /// The action being applied (counted from 0), to name stamps by.
    pub(super) step: usize,
    pub(super) next_stamp: u64,
    /// What each stamp was written as, to name a block's content in a report.
    pub(super) stamps: HashMap<u64, String>,
    /// Per space, per block: the number of the last write planned on it (a fill or a
    /// transfer's destination), so a notification's check knows whether its transfer's bytes
    /// must still be there.
    pub(super) writes: Vec<Vec<u64>>,
    pub(super) next_write: u64,
    /// The notifications sent, by the id of the transfer that carries them.
    pub(super) notes: BTreeMap<TransferId, Note>,
    /// Every message sent (unique per action), and the id that carries it.
    pub(super) messages: HashMap<Vec<u8>, TransferId>,
    /// The local transport's name: the sender of every notification.
    pub(super) sender: String,
    /// What a notified post or a `notify` returns when the backend carries no notifications
    /// (`None`: it does).
    pub(super) unsupported: Option<Error>,
}

impl Model {
    /// Every block zeros, no peer, nothing in flight.
    pub(super) fn new(setup: &Setup) -> Model {
        let mut content = vec![vec![Content::Known(0); setup.num_blocks as usize]];
        content.extend(
            setup
                .remote_blocks
                .iter()
                .map(|&n| vec![Content::Known(0); n as usize]),
        );
        let writes = content.iter().map(|b| vec![0; b.len()]).collect();
        let peers = setup.peers.max(1);
        Model {
            num_blocks: setup.num_blocks,
            remote_blocks: setup.remote_blocks.clone(),
            names: (0..peers).map(|i| PeerId::from(format!("p{i}"))).collect(),
            content,
            peers: (0..peers).map(|_| PeerModel::default()).collect(),
            conns: Vec::new(),
            tracked: BTreeMap::new(),
            gone: HashMap::new(),
            detached: HashSet::new(),
            handles: Vec::new(),
            next_handle: 0,
            closed: false,
            step: 0,
            next_stamp: 1,
            stamps: HashMap::new(),
            writes,
            next_write: 1,
            notes: BTreeMap::new(),
            messages: HashMap::new(),
            sender: "local".into(),
            unsupported: None,
        }
    }

    /// What `action` asks of the runner; applies what it determines to the state.
    pub(super) fn apply(&mut self, action: &Action) -> Expected {
        let expected = match action {
            Action::Add { peer, remote } => {
                self.add(self.peer_index(*peer), self.remote_index(*remote))
            }
            Action::AddAsync { peer, remote } => {
                self.add_async(self.peer_index(*peer), self.remote_index(*remote))
            }
            Action::Remove { peer } => self.remove(self.peer_index(*peer)),
            Action::Transfer {
                op,
                peer,
                blocks,
                pick,
            } => self.transfer(*op, self.peer_index(*peer), *blocks, *pick, None),
            Action::Notified {
                op,
                peer,
                blocks,
                pick,
            } => {
                let message = self.message(*pick);
                self.transfer(*op, self.peer_index(*peer), *blocks, *pick, Some(message))
            }
            Action::Notify { peer, pick } => self.notify(self.peer_index(*peer), *pick),
            Action::Notifications { target, from } => self.notifications(*target, *from),
            Action::Invalid {
                op,
                peer,
                defect,
                pick,
            } => self.invalid(*op, self.peer_index(*peer), *defect, *pick),
            Action::Poll { peer } => self.poll(peer.map(|p| self.peer_index(p))),
            Action::Cancel { mode, picks } => self.cancel(*mode, picks),
            Action::Drain => self.drain(),
            Action::Close => self.close(),
        };
        self.step += 1;
        expected
    }

    /// Transfers in flight: in all, and per peer (what `in_flight` must say after each step).
    pub(super) fn in_flight(&self) -> (usize, Vec<usize>) {
        let mut per_peer = vec![0; self.names.len()];
        for x in self.tracked.values() {
            per_peer[x.peer] += 1;
        }
        (self.tracked.len(), per_peer)
    }

    /// Every (space, block, stamp) whose content the model knows.
    pub(super) fn known_blocks(&self) -> Vec<(usize, BlockIndex, u64)> {
        let mut out = Vec::new();
        for (space, blocks) in self.content.iter().enumerate() {
            for (block, content) in blocks.iter().enumerate() {
                if let Content::Known(stamp) = content {
                    out.push((space, block as BlockIndex, *stamp));
                }
            }
        }
        out
    }

    /// `local`, `r0`, `r1`, ...
    pub(super) fn space_name(space: usize) -> String {
        if space == 0 {
            "local".into()
        } else {
            format!("r{}", space - 1)
        }
    }

    /// Names a stamp: what it was written as.
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

    /// The tracked transfers, for a report of ones that never surfaced.
    pub(super) fn describe_tracked(&self) -> Vec<String> {
        self.tracked
            .iter()
            .map(|(id, x)| format!("{id} ({}, cancel-wait returned it: {})", x.what, x.aborted))
            .collect()
    }

    fn peer_index(&self, peer: u8) -> usize {
        peer as usize % self.names.len()
    }

    fn remote_index(&self, remote: u8) -> usize {
        remote as usize % self.remote_blocks.len()
    }

    fn busy(&self) -> HashSet<(usize, BlockIndex)> {
        let mut busy = self.detached.clone();
        for x in self.tracked.values() {
            busy.extend(x.touches.iter().copied());
        }
        busy
    }

    fn forget_destinations(&mut self, lands: &[(usize, BlockIndex, Content)]) {
        for &(space, block, _) in lands {
            self.content[space][block as usize] = Content::Unknown;
        }
    }

    fn fresh_stamp(&mut self, what: String) -> u64 {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.stamps.insert(stamp, what);
        stamp
    }

    /// Nothing to settle first.
    fn now(then: Then) -> Expected {
        Expected {
            settle: Vec::new(),
            then,
        }
    }

    /// Settles first, then `then`.
    fn after(settle: Vec<Settle>, then: Then) -> Expected {
        Expected { settle, then }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_notes;
