//! How transfers end: what a poll may report, and what a cancel may return.

use std::collections::BTreeSet;

use blockwire_core::{CancelMode, Error, FailureReason, PollResult, TransferId};

use super::super::Report;
use super::super::expected::{Call, Expected, Then};
use super::super::state::*;
use super::Model;

impl Model {
    pub(super) fn poll(&mut self, peer: Option<usize>) -> Expected {
        if self.closed {
            return Model::now(Then::Refused {
                call: Call::Poll { peer },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        Model::now(Then::Polled { peer })
    }

    /// Checks one poll result (of `poll(Some(p<peer>))`, or `poll(None)`) and applies it;
    /// returns what it counted.
    pub(in crate::model) fn absorb(
        &mut self,
        r: PollResult,
        peer: Option<usize>,
    ) -> Result<Report, String> {
        // Every peer here is healthy: no transfer fails but by a remove or a cancel.
        if let Some(fault) = &r.peer_fault {
            return Err(format!(
                "poll({:?}) reported a peer fault: {fault}",
                peer.map(|p| &self.names[p])
            ));
        }
        // `PollResult` lists each kind in id order.
        let ascending = |ids: &[TransferId]| ids.windows(2).all(|w| w[0] < w[1]);
        let failed: Vec<TransferId> = r.failed.iter().map(|(id, _)| *id).collect();
        if !ascending(&r.done) || !ascending(&failed) {
            return Err(format!(
                "poll returned ids out of id order: done {:?}, failed {failed:?}",
                r.done
            ));
        }
        let mut counted = Report::default();
        for id in r.done {
            self.finish(id, Ok(()), peer)?;
            counted.done += 1;
        }
        for (id, reason) in r.failed {
            self.finish(id, Err(reason), peer)?;
            counted.failed += 1;
        }
        Ok(counted)
    }

    fn finish(
        &mut self,
        id: TransferId,
        got: Result<(), FailureReason>,
        polled: Option<usize>,
    ) -> Result<(), String> {
        let Some(x) = self.tracked.remove(&id) else {
            return Err(match self.gone.get(&id) {
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
        let state = self.conns[x.conn].state;
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
        self.note_reported(id, got.as_ref().map(|_| ()).map_err(|r| format!("{r:?}")))?;
        match got {
            Ok(()) => {
                for &(space, block, content) in &x.lands {
                    self.content[space][block as usize] = content;
                }
            }
            Err(_) => self.forget_destinations(&x.lands),
        }
        self.gone.insert(id, Gone::Reported);
        Ok(())
    }

    pub(super) fn cancel(&mut self, mode: CancelMode, picks: &[u32]) -> Expected {
        let tracked: Vec<TransferId> = self.tracked.keys().copied().collect();
        let mut gone: Vec<TransferId> = self.gone.keys().copied().collect();
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
        if self.closed {
            return Model::now(Then::Refused {
                call: Call::Cancel { ids, mode },
                allowed: vec![Error::Closed],
                nothing_tracked: false,
            });
        }
        Model::now(Then::Cancelled { ids, mode })
    }

    /// Checks what `cancel(ids, mode)` returned (`still`) and applies it; returns what it
    /// counted.
    pub(in crate::model) fn cancelled(
        &mut self,
        ids: &[TransferId],
        mode: CancelMode,
        still: &[TransferId],
    ) -> Result<Report, String> {
        let asked: BTreeSet<TransferId> = ids
            .iter()
            .copied()
            .filter(|id| self.tracked.contains_key(id))
            .collect();
        let mut counted = Report::default();
        match mode {
            CancelMode::Immediate => {
                if !still.is_empty() {
                    return Err(format!("cancel(Immediate) returned {still:?}, expected []"));
                }
                for id in asked {
                    if let Some(x) = self.tracked.remove(&id) {
                        self.forget_destinations(&x.lands);
                        self.detached.extend(x.touches.iter().copied());
                        self.gone.insert(id, Gone::Forgotten);
                        self.note_left(id, "forgotten by cancel(Immediate)");
                        counted.forgotten += 1;
                    }
                }
            }
            CancelMode::Wait => {
                // An id asked for twice may be returned twice (once per ask), never more.
                for id in still {
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
                        if let Some(x) = self.tracked.get_mut(&id) {
                            x.aborted = true;
                        }
                        counted.still_running += 1;
                    } else if let Some(x) = self.tracked.remove(&id) {
                        self.forget_destinations(&x.lands);
                        self.gone.insert(id, Gone::TakenByWait);
                        self.note_left(id, "taken by cancel(Wait)");
                        counted.taken_by_wait += 1;
                    }
                }
            }
        }
        Ok(counted)
    }
}
