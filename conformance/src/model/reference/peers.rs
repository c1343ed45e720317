//! Adding and removing peers, and the registration handles whose effect they may hide.

use blockwire_core::Error;

use super::super::expected::{Call, Expected, HandleId, Settle, Then};
use super::super::state::*;
use super::Model;

impl Model {
    /// Every unresolved handle of `peer` may now also resolve `Superseded`.
    fn supersede_handles(&mut self, peer: usize) {
        for h in self.handles.iter_mut().filter(|h| h.peer == peer) {
            if !h.allowed.contains(&RegOutcome::Superseded) {
                h.allowed.push(RegOutcome::Superseded);
            }
        }
    }

    pub(super) fn publish(&mut self, peer: usize, remote: usize) {
        if let Some(old) = self.peers[peer].published {
            self.conns[old].state = ConnState::Retired;
        }
        self.conns.push(Conn {
            remote,
            state: ConnState::Live,
        });
        self.peers[peer].published = Some(self.conns.len() - 1);
    }

    /// Takes the handles of `peer` (every peer for `None`): the runner waits for them.
    pub(super) fn take_handles(&mut self, peer: Option<usize>) -> Vec<Settle> {
        let (mine, rest): (Vec<HandleModel>, Vec<HandleModel>) = std::mem::take(&mut self.handles)
            .into_iter()
            .partition(|h| peer.is_none_or(|p| h.peer == p));
        self.handles = rest;
        mine.into_iter()
            .map(|h| Settle {
                handle: h.id,
                peer: h.peer,
                what: h.what,
                allowed: h.allowed,
            })
            .collect()
    }

    /// Settles `peer`: its handles are to be waited for, and what they hid applies.
    pub(super) fn resolve(&mut self, peer: usize) -> Vec<Settle> {
        let Some(pending) = self.peers[peer].pending.take() else {
            return Vec::new();
        };
        let settle = self.take_handles(Some(peer));
        match pending {
            Pending::Add(remote) => self.publish(peer, remote),
            Pending::Removed => {}
        }
        settle
    }

    pub(super) fn resolve_all(&mut self) -> Vec<Settle> {
        (0..self.names.len())
            .flat_map(|p| self.resolve(p))
            .collect()
    }

    pub(super) fn add(&mut self, peer: usize, remote: usize) -> Expected {
        if self.closed {
            return Model::now(Then::Refused {
                call: Call::Add { peer, remote },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        self.supersede_handles(peer);
        // The worker runs registrations in order: once the add returned, every earlier one of
        // this peer has finished.
        self.peers[peer].pending = None;
        let settle = self.take_handles(Some(peer));
        // Retires the connection the model knew; one an asynchronous add published meanwhile
        // is retired as well, and had no transfers (the model posts only to settled peers).
        self.publish(peer, remote);
        Model::now(Then::Added {
            peer,
            remote,
            settle,
        })
    }

    pub(super) fn add_async(&mut self, peer: usize, remote: usize) -> Expected {
        if self.closed {
            return Model::now(Then::Refused {
                call: Call::AddAsync { peer, remote },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        self.supersede_handles(peer);
        if let Some(c) = self.peers[peer].published {
            if self.conns[c].state == ConnState::Live {
                self.conns[c].state = ConnState::MaybeRetired;
            }
        }
        self.peers[peer].pending = Some(Pending::Add(remote));
        let handle = HandleId(self.next_handle);
        self.next_handle += 1;
        self.handles.push(HandleModel {
            id: handle,
            peer,
            what: format!("{} ({} -> r{remote})", handle.0, self.names[peer]),
            allowed: vec![RegOutcome::Ok],
        });
        Model::now(Then::Registering {
            peer,
            remote,
            handle,
        })
    }

    pub(super) fn remove(&mut self, peer: usize) -> Expected {
        if self.closed {
            return Model::now(Then::Refused {
                call: Call::Remove { peer },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        let p = &self.peers[peer];
        let ok = match p.pending {
            None => p.published.is_some(),
            Some(_) => true,
        };
        // After a remove, a superseded registration may still be queued ("being registered",
        // so Ok) or already finished (so unknown): both are right.
        let unknown = match p.pending {
            None => p.published.is_none(),
            Some(Pending::Add(_)) => false,
            Some(Pending::Removed) => true,
        };
        if let Some(c) = self.peers[peer].published.take() {
            self.conns[c].state = ConnState::Retired;
        }
        if self.peers[peer].pending.is_some() {
            self.peers[peer].pending = Some(Pending::Removed);
            self.supersede_handles(peer);
        }
        Model::now(Then::Removed { peer, ok, unknown })
    }
}
