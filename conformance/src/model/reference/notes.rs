//! Notifications: the messages the model chooses, where each goes, and what a drain may
//! return.
//!
//! Every notification goes from the local transport to a remote (the one whose blocks a
//! notified transfer writes or reads, or a standalone one's peer), carries a message unique to
//! its action, and has a [`Fate`] that follows its transfer: `Open` while it is in flight (the
//! notification may already be there: it goes before the initiator sees the transfer done),
//! `Owed` once reported done (it must be drained, once), `Barred` once reported failed (never),
//! and `Undetermined` when the transfer leaves without a verdict (forgotten by
//! `cancel(Immediate)`, taken by `cancel(Wait)`, in flight at close: the notification may have
//! been sent before, so once or never). Which of `Open`'s outcomes happens is timing; what is
//! never allowed is a notification for a transfer reported failed, two for one transfer, or
//! one whose transfer's bytes are not yet in place.

use blockwire_core::{BlockIndex, Error, MAX_NOTIFICATION_LEN, Notification, TransferId};

use super::super::Report;
use super::super::action::Sender;
use super::super::expected::{Call, Expected, NotePlan, Planned, Then};
use super::super::state::*;
use super::Model;

/// A block to compare right after a drain: the notification of `what` was drained, so
/// `space[block]` must hold `stamp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::model) struct Check {
    pub(in crate::model) space: usize,
    pub(in crate::model) block: BlockIndex,
    pub(in crate::model) stamp: u64,
    pub(in crate::model) what: String,
}

impl Model {
    /// A message unique to the action being applied: `n<step>|`, then (chosen by `pick`)
    /// nothing, up to 200 bytes of any value, or as many as make exactly the 4 KiB limit.
    pub(super) fn message(&self, pick: u64) -> Vec<u8> {
        let mut m = format!("n{}|", self.step).into_bytes();
        let mut state = splitmix(pick ^ 0x6e6f_7465);
        let len = match state % 8 {
            0 => MAX_NOTIFICATION_LEN,
            1 | 2 => m.len() + (splitmix(state) % 201) as usize,
            _ => m.len(),
        };
        while m.len() < len {
            state = splitmix(state);
            m.push(state as u8);
        }
        m
    }

    /// A planned write on `space[block]`: its content is no longer what an earlier transfer
    /// left there.
    pub(super) fn planned_write(&mut self, space: usize, block: BlockIndex) {
        self.writes[space][block as usize] = self.next_write;
        self.next_write += 1;
    }

    /// The notification of a transfer landing `lands` on remote `target`.
    pub(super) fn plan_note(
        &self,
        target: usize,
        message: Vec<u8>,
        lands: &[(usize, BlockIndex, Content)],
    ) -> NotePlan {
        let lands = lands
            .iter()
            .filter_map(|&(space, block, content)| match content {
                Content::Known(stamp) => Some(Landing {
                    space,
                    block,
                    stamp,
                    write: self.writes[space][block as usize],
                }),
                Content::Unknown => None,
            })
            .collect();
        NotePlan {
            target,
            message,
            lands,
        }
    }

    /// Starts following the notification of the transfer the backend issued `id` for.
    pub(super) fn track_note(&mut self, id: TransferId, plan: NotePlan, what: &str) {
        self.messages.insert(plan.message, id);
        self.notes.insert(
            id,
            Note {
                target: plan.target,
                what: what.to_owned(),
                lands: plan.lands,
                fate: Fate::Open,
                drained: false,
            },
        );
    }

    /// `notify(p<peer>)`.
    pub(super) fn notify(&mut self, peer: usize, pick: u64) -> Expected {
        let message = self.message(pick);
        let refused = |message: Vec<u8>, e: Error| Then::Refused {
            call: Call::Notify { peer, message },
            allowed: vec![e],
            nothing_tracked: true,
        };
        if self.closed {
            return Model::now(Then::Refused {
                call: Call::Notify { peer, message },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        let settle = self.resolve(peer);
        if let Some(e) = &self.unsupported {
            return Model::after(settle, refused(message, e.clone()));
        }
        let name = self.names[peer].clone();
        let Some(conn) = self.peers[peer].published else {
            return Model::after(settle, refused(message, Error::UnknownPeer(name)));
        };
        let remote = self.conns[conn].remote;
        let what = format!("notify {name} (r{remote}) at step {}", self.step);
        let note = self.plan_note(remote, message.clone(), &[]);
        Model::after(
            settle,
            Then::Notified {
                peer,
                message,
                planned: Planned {
                    peer,
                    conn,
                    lands: Vec::new(),
                    touches: Vec::new(),
                    what,
                    note: Some(note),
                },
            },
        )
    }

    /// `notifications(from)` at remote `target`, or at the local transport (one past the
    /// last remote).
    pub(super) fn notifications(&mut self, target: u8, from: Sender) -> Expected {
        let t = target as usize % (self.remote_blocks.len() + 1);
        let target = (t < self.remote_blocks.len()).then_some(t);
        if target.is_none() && self.closed {
            return Model::now(Then::Refused {
                call: Call::Notifications { target, from },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        Model::now(Then::Drank { target, from })
    }

    /// The id `id` was reported (`done`, or failed as `how`): its notification is owed, or
    /// barred (and must not have been drained already).
    pub(super) fn note_reported(
        &mut self,
        id: TransferId,
        outcome: Result<(), String>,
    ) -> Result<(), String> {
        let Some(note) = self.notes.get_mut(&id) else {
            return Ok(());
        };
        match outcome {
            Ok(()) => note.fate = Fate::Owed,
            Err(how) if note.drained => {
                return Err(format!(
                    "id {id} ({}) was reported failed ({how}), yet its notification was already \
                     drained at r{}: a transfer that fails must deliver none, and one that \
                     delivered its notification is done",
                    note.what, note.target
                ));
            }
            Err(how) => note.fate = Fate::Barred(how),
        }
        Ok(())
    }

    /// The id `id` left without a verdict (`why`): its notification may arrive, once.
    pub(super) fn note_left(&mut self, id: TransferId, why: &'static str) {
        if let Some(note) = self.notes.get_mut(&id) {
            note.fate = Fate::Undetermined(why);
        }
    }

    /// Checks what `notifications(from)` at remote `target` (the local transport for `None`)
    /// returned and applies it; returns the blocks to compare now and what it counted.
    pub(in crate::model) fn received(
        &mut self,
        target: Option<usize>,
        from: Sender,
        got: &[Notification],
    ) -> Result<(Vec<Check>, Report), String> {
        let at = target.map_or("the local transport".to_owned(), |r| format!("r{r}"));
        let mut checks = Vec::new();
        let mut counted = Report::default();
        for n in got {
            let shown = show(&n.message);
            if from == Sender::Stranger {
                return Err(format!(
                    "notifications(Some(\"stranger\")) at {at} returned one from {:?} ({shown}): \
                     nobody sends as that name",
                    n.sender
                ));
            }
            if n.sender != self.sender {
                return Err(format!(
                    "a notification at {at} ({shown}) names sender {:?}; the only sender is \
                     the local transport, {:?}",
                    n.sender, self.sender
                ));
            }
            let Some(&id) = self.messages.get(&n.message) else {
                return Err(format!(
                    "a notification at {at} carries a message nobody sent ({shown})"
                ));
            };
            let Some(note) = self.notes.get_mut(&id) else {
                return Err(format!("the model lost the notification of id {id}"));
            };
            if target != Some(note.target) {
                return Err(format!(
                    "the notification of id {id} ({}) arrived at {at}, not at its target r{}",
                    note.what, note.target
                ));
            }
            if note.drained {
                return Err(format!(
                    "the notification of id {id} ({}) was drained twice at {at}",
                    note.what
                ));
            }
            match &note.fate {
                Fate::Barred(how) => {
                    return Err(format!(
                        "a notification of id {id} ({}) arrived at {at}, but the transfer was \
                         reported failed ({how}): a transfer that fails must deliver none",
                        note.what
                    ));
                }
                Fate::Open => counted.notes_early += 1,
                Fate::Undetermined(_) => counted.notes_undetermined += 1,
                Fate::Owed => {}
            }
            note.drained = true;
            counted.notes_drained += 1;
            for l in &note.lands {
                if self.writes[l.space][l.block as usize] == l.write {
                    checks.push(Check {
                        space: l.space,
                        block: l.block,
                        stamp: l.stamp,
                        what: format!("id {id} ({})", note.what),
                    });
                }
            }
        }
        Ok((checks, counted))
    }

    /// The notifications owed to remote `target` (reported done) and not drained yet.
    pub(in crate::model) fn owed(&self, target: usize) -> Vec<String> {
        self.notes
            .iter()
            .filter(|(_, n)| n.target == target && !n.drained && n.fate == Fate::Owed)
            .map(|(id, n)| format!("id {id} ({})", n.what))
            .collect()
    }

    /// Notifications that may still be (or arrive) at remote `target`: not drained, not
    /// barred. What its close may discard, at most.
    pub(in crate::model) fn undrained(&self, target: usize) -> usize {
        self.notes
            .values()
            .filter(|n| n.target == target && !n.drained && !matches!(n.fate, Fate::Barred(_)))
            .count()
    }

    /// Notifications drained at remote `target` so far.
    pub(in crate::model) fn drained_at(&self, target: usize) -> usize {
        self.notes
            .values()
            .filter(|n| n.target == target && n.drained)
            .count()
    }
}

/// A message as a report shows it: its prefix and length.
fn show(message: &[u8]) -> String {
    let head: String = message
        .iter()
        .take_while(|&&b| b != b'|')
        .take(16)
        .map(|&b| b as char)
        .collect();
    format!("message {head:?}, {} bytes", message.len())
}
