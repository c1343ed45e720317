//! Valid and invalid transfers: the blocks they use, what they land, what is refused.

use std::collections::BTreeSet;

use blockwire_core::{BlockIndex, Error, Op, TransferId};

use super::super::action::Defect;
use super::super::expected::{Call, Expected, Fill, Planned, Then};
use super::super::state::*;
use super::Model;

impl Model {
    /// A valid transfer; with a `message`, the notified variant.
    pub(super) fn transfer(
        &mut self,
        op: Op,
        peer: usize,
        blocks: u8,
        pick: u64,
        message: Option<Vec<u8>>,
    ) -> Expected {
        let name = self.names[peer].clone();
        let zero = Call::Post {
            op,
            peer,
            local: vec![0],
            remote: vec![0],
            message: message.clone(),
        };
        if self.closed {
            return Model::now(Then::Refused {
                call: zero,
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        let settle = self.resolve(peer);
        if let (Some(e), Some(_)) = (&self.unsupported, &message) {
            return Model::after(
                settle,
                Then::Refused {
                    call: zero,
                    allowed: vec![e.clone()],
                    nothing_tracked: true,
                },
            );
        }
        let Some(conn) = self.peers[peer].published else {
            return Model::after(
                settle,
                Then::Refused {
                    call: zero,
                    allowed: vec![Error::UnknownPeer(name)],
                    nothing_tracked: true,
                },
            );
        };
        let remote = self.conns[conn].remote;
        let rspace = remote + 1;
        let busy = self.busy();
        let free = |space: usize, n: u32| -> Vec<BlockIndex> {
            (0..n).filter(|b| !busy.contains(&(space, *b))).collect()
        };
        let free_local = free(0, self.num_blocks);
        let free_remote = free(rspace, self.remote_blocks[remote]);
        let n = (blocks.max(1) as usize)
            .min(free_local.len())
            .min(free_remote.len());
        if n == 0 {
            return Model::after(settle, Then::Skipped);
        }
        let mut state = pick;
        let local = choose(&free_local, n, &mut state);
        let remote_blocks = choose(&free_remote, n, &mut state);
        let (mut srcs, src_space, dsts, dst_space) = match op {
            Op::Write => (local, 0, remote_blocks, rspace),
            Op::Read => (remote_blocks, rspace, local, 0),
        };
        if n >= 2 && splitmix(state) & 3 == 0 {
            srcs[1] = srcs[0];
        }
        // Fresh content in every source block.
        let distinct: BTreeSet<BlockIndex> = srcs.iter().copied().collect();
        let mut fill = Vec::new();
        for &b in &distinct {
            let stamp = self.fresh_stamp(format!(
                "source {}[{b}] of {op:?} to {name} at step {}",
                Model::space_name(src_space),
                self.step
            ));
            self.content[src_space][b as usize] = Content::Known(stamp);
            self.planned_write(src_space, b);
            fill.push(Fill {
                space: src_space,
                block: b,
                stamp,
            });
        }
        let (l, r) = match op {
            Op::Write => (srcs.clone(), dsts.clone()),
            Op::Read => (dsts.clone(), srcs.clone()),
        };
        let notified = if message.is_some() { " notified" } else { "" };
        let what = format!("{op:?}{notified} {name} (r{remote}) local {l:?} remote {r:?}");
        let lands: Vec<(usize, BlockIndex, Content)> = srcs
            .iter()
            .zip(&dsts)
            .map(|(&s, &d)| (dst_space, d, self.content[src_space][s as usize]))
            .collect();
        for &d in &dsts {
            self.planned_write(dst_space, d);
        }
        let note = message
            .clone()
            .map(|message| self.plan_note(remote, message, &lands));
        let mut touches: Vec<(usize, BlockIndex)> = srcs.iter().map(|&b| (src_space, b)).collect();
        touches.extend(dsts.iter().map(|&b| (dst_space, b)));
        Model::after(
            settle,
            Then::Posted {
                fill,
                op,
                peer,
                local: l,
                remote: r,
                message,
                planned: Planned {
                    peer,
                    conn,
                    lands,
                    touches,
                    what,
                    note,
                },
            },
        )
    }

    /// Tracks the transfer the backend issued `id` for; the id must be new.
    pub(in crate::model) fn track(
        &mut self,
        id: TransferId,
        planned: Planned,
    ) -> Result<(), String> {
        if self.tracked.contains_key(&id) || self.gone.contains_key(&id) {
            return Err(format!("transfer id {id} was issued twice"));
        }
        if let Some(note) = planned.note {
            self.track_note(id, note, &planned.what);
        }
        self.tracked.insert(
            id,
            Xfer {
                peer: planned.peer,
                conn: planned.conn,
                lands: planned.lands,
                touches: planned.touches,
                aborted: false,
                what: planned.what,
            },
        );
        Ok(())
    }

    pub(super) fn invalid(&mut self, op: Op, peer: usize, defect: Defect, pick: u64) -> Expected {
        let name = self.names[peer].clone();
        let settle = if self.closed {
            Vec::new()
        } else {
            self.resolve(peer)
        };
        let published = self.peers[peer].published;
        let local_n = self.num_blocks;
        let remote_n = match published {
            Some(c) => self.remote_blocks[self.conns[c].remote],
            None => self.remote_blocks[0],
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
                let index = match op {
                    Op::Write => repeat_first(&mut remote, &mut local),
                    Op::Read => repeat_first(&mut local, &mut remote),
                };
                Error::DuplicateDestination { op, index }
            }
        };
        let call = Call::Post {
            op,
            peer,
            local,
            remote,
            message: None,
        };
        let (allowed, nothing_tracked) = if self.closed {
            (vec![Error::Closed], false)
        } else if published.is_some() {
            (vec![want], true)
        } else if defect == Defect::RemoteOutOfRange {
            (vec![Error::UnknownPeer(name)], true)
        } else {
            (vec![Error::UnknownPeer(name), want], true)
        };
        Model::after(
            settle,
            Then::Refused {
                call,
                allowed,
                nothing_tracked,
            },
        )
    }
}
