//! Notifications: standalone ones, drains at the targets (with the blocks their transfers
//! landed compared at once), the final drain, and the targets' close.

use std::time::{Duration, Instant};

use blockwire::Transport;
use blockwire_core::{Error, Notification};

use super::super::action::Sender;
use super::super::expected::Planned;
use super::super::reference::Model;
use super::super::state::stamp_bytes;
use super::{Runner, Step, expect_refused};

impl<T: Transport> Runner<'_, T> {
    /// The `from` of a `notifications` call.
    pub(super) fn source(&self, from: Sender) -> Option<String> {
        match from {
            Sender::Any => None,
            Sender::Initiator => Some(self.model.sender.clone()),
            Sender::Stranger => Some("stranger".into()),
        }
    }

    /// `notify` must return a new id.
    pub(super) fn notified(&mut self, peer: usize, message: &[u8], planned: Planned) -> Step {
        let got = self.local.notify(&self.model.names[peer], message);
        self.trace.push(format!(
            "  {}, {} bytes: {got:?}",
            planned.what,
            message.len()
        ));
        let id = got.map_err(|e| format!("a notification to a live peer was refused: {e:?}"))?;
        self.model.track(id, planned)?;
        self.report.posted += 1;
        self.report.notifies += 1;
        Ok(())
    }

    /// `notifications(from)` at `target` (a remote, or the local transport for `None`) must
    /// succeed; the model checks what it returned, and every block a drained notification's
    /// transfer landed (and nothing wrote since) must hold its bytes now.
    pub(super) fn drank(&mut self, target: Option<usize>, from: Sender) -> Step {
        let name = self.source(from);
        let got = match target {
            Some(r) => self.remotes[r].notifications(name.as_deref()),
            None => self.local.notifications(name.as_deref()),
        };
        let at = target.map_or("local".to_owned(), |r| format!("r{r}"));
        let got = got.map_err(|e| format!("notifications({name:?}) at {at} failed: {e:?}"))?;
        self.take(target, from, &got)
    }

    fn take(&mut self, target: Option<usize>, from: Sender, got: &[Notification]) -> Step {
        if !got.is_empty() {
            let heads: Vec<String> = got
                .iter()
                .map(|n| {
                    let head = n.message.iter().take_while(|&&b| b != b'|').take(16);
                    head.map(|&b| b as char).collect()
                })
                .collect();
            self.trace.push(format!(
                "  notifications({from:?}) at {target:?}: {heads:?}"
            ));
        }
        let (checks, counted) = self.model.received(target, from, got)?;
        self.report.merge(&counted);
        let mut have = vec![0u8; self.setup.block_len];
        for c in checks {
            self.space(c.space)
                .region()
                .read_block(c.block, &mut have)
                .map_err(|e| format!("reading a block: {}", e.report()))?;
            stamp_bytes(c.stamp, &mut self.buf);
            if have != self.buf {
                return Err(format!(
                    "the notification of {} was drained, but {}[{}] holds {}, not {}: the \
                     notification arrived before the bytes it follows",
                    c.what,
                    Model::space_name(c.space),
                    c.block,
                    self.model.identify(&have),
                    self.model.describe(c.stamp)
                ));
            }
            self.report.notes_blocks_checked += 1;
        }
        Ok(())
    }

    /// Drains every remote until every notification owed (its transfer reported done) was
    /// drained, bounded by the setup's timeout.
    pub(super) fn drain_notes(&mut self) -> Step {
        let deadline = Instant::now() + self.setup.timeout;
        loop {
            let mut missing = Vec::new();
            for r in 0..self.remotes.len() {
                let got = self.remotes[r]
                    .notifications(None)
                    .map_err(|e| format!("notifications(None) at r{r} failed: {e:?}"))?;
                self.take(Some(r), Sender::Any, &got)?;
                missing.extend(self.model.owed(r).into_iter().map(|n| format!("r{r}: {n}")));
            }
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "after {:?}, {} notifications of transfers reported done never arrived: \
                     {}",
                    self.setup.timeout,
                    missing.len(),
                    missing.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Closes remote `r`: close discards what its inbox holds (counted), and
    /// `notifications` is then `Err(Closed)`.
    pub(super) fn close_target(&mut self, r: usize) -> Step {
        let target = &self.remotes[r];
        let before = target.notification_stats();
        target
            .close()
            .map_err(|e| format!("closing remote r{r}: {e:?}"))?;
        let after = target.notification_stats();
        expect_refused(target.notifications(None), &Error::Closed)
            .map_err(|e| format!("notifications(None) at r{r} after its close {e}"))?;
        expect_refused(
            target.notifications(Some(&self.model.sender)),
            &Error::Closed,
        )
        .map_err(|e| format!("notifications(Some(sender)) at r{r} after its close {e}"))?;
        let drained = self.model.drained_at(r);
        let most = self.model.undrained(r);
        let discarded = after.discarded_closed - before.discarded_closed;
        let wrong = if before.drained != drained as u64 {
            Some(format!(
                "counts {} drained, the runner drained {drained}",
                before.drained
            ))
        } else if before.received != before.drained + before.queued as u64 {
            Some(format!(
                "counts {} received, but {} drained and {} queued",
                before.received, before.drained, before.queued
            ))
        } else if before.queued > most {
            Some(format!(
                "holds {} queued, but at most {most} sent there are undrained",
                before.queued
            ))
        } else if discarded < before.queued as u64 || discarded > most as u64 {
            Some(format!(
                "close discarded {discarded}, expected the {} queued (and at most {most}, \
                 counting late arrivals)",
                before.queued
            ))
        } else if after.queued != 0 || after.dropped_full != 0 || after.malformed != 0 {
            Some("after close: some queued, dropped for a full inbox or malformed".into())
        } else {
            None
        };
        if let Some(wrong) = wrong {
            return Err(format!(
                "r{r}'s notification_stats: {wrong} (before close {before:?}, after {after:?})"
            ));
        }
        self.report.notes_discarded += discarded as usize;
        Ok(())
    }
}
