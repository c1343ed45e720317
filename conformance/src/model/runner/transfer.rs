//! Posting, polling, cancelling and draining transfers.

use std::time::{Duration, Instant};

use blockwire::Transport;
use blockwire_core::{BlockIndex, CancelMode, Op, PeerId, PollResult, TransferId};

use super::super::expected::Planned;
use super::{Runner, Step};

impl<T: Transport> Runner<'_, T> {
    /// Posts `local` and `remote` to `peer`, which must return a new id.
    pub(super) fn posted(
        &mut self,
        op: Op,
        peer: usize,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: Option<&[u8]>,
        planned: Planned,
    ) -> Step {
        let got = self.post(op, &self.model.names[peer], local, remote, message);
        self.trace.push(format!("  {}: {got:?}", planned.what));
        let id = got.map_err(|e| format!("a valid transfer was refused: {e:?}"))?;
        self.model.track(id, planned)?;
        self.report.posted += 1;
        if message.is_some() {
            self.report.notified += 1;
        }
        Ok(())
    }

    /// `poll` must succeed; the model checks what it reported.
    pub(super) fn polled(&mut self, peer: Option<usize>) -> Step {
        let name = peer.map(|p| self.model.names[p].clone());
        let r = self
            .local
            .poll(name.as_ref())
            .map_err(|e| format!("poll({name:?}) failed: {e:?}"))?;
        self.absorb(r, name.as_ref(), peer)
    }

    fn absorb(&mut self, r: PollResult, name: Option<&PeerId>, peer: Option<usize>) -> Step {
        if !r.is_empty() {
            self.trace.push(format!(
                "  poll({name:?}): done {:?} failed {:?}",
                r.done, r.failed
            ));
        }
        let counted = self.model.absorb(r, peer)?;
        self.report.merge(&counted);
        Ok(())
    }

    /// `cancel` must succeed; the model checks what it returned.
    pub(super) fn cancelled(&mut self, ids: &[TransferId], mode: CancelMode) -> Step {
        let got = self.local.cancel(ids, mode);
        self.trace
            .push(format!("  cancel({ids:?}, {mode:?}): {got:?}"));
        let still = got.map_err(|e| format!("cancel failed: {e:?}"))?;
        let counted = self.model.cancelled(ids, mode, &still)?;
        self.report.merge(&counted);
        Ok(())
    }

    /// Polls every peer until the model tracks nothing and the backend holds nothing (bounded
    /// by the setup's timeout); then checks every known block and the peer table.
    pub(super) fn drained(&mut self, published: &[usize]) -> Step {
        self.report.drains += 1;
        let deadline = Instant::now() + self.setup.timeout;
        loop {
            let r = self
                .local
                .poll(None)
                .map_err(|e| format!("poll(None) failed: {e:?}"))?;
            let empty = r.is_empty();
            self.absorb(r, None, None)?;
            let live = self.local.backend_stats().live_transfers;
            let (tracked, _) = self.model.in_flight();
            if tracked == 0 && live == 0 {
                break;
            }
            // A transfer the transport still tracks but the backend does not hold yet is
            // queued for the posting thread (`Capabilities::posts_in_caller`): it will be.
            let queued = self.local.in_flight(None);
            if empty && live == 0 && queued == 0 {
                return Err(format!(
                    "the backend holds no transfer any more, yet ids {:?} were never \
                     reported, taken or forgotten: they never will be",
                    self.model.describe_tracked()
                ));
            }
            if Instant::now() >= deadline {
                let ids: Vec<&TransferId> = self.model.tracked.keys().collect();
                return Err(format!(
                    "drain: after {:?}, ids {ids:?} are still unreported and the backend \
                     holds {live} transfers",
                    self.setup.timeout
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.trace.push("  drained".into());
        self.verify("drain")?;
        let mut want: Vec<PeerId> = published
            .iter()
            .map(|&p| self.model.names[p].clone())
            .collect();
        want.sort();
        let peers = self.local.peers();
        if peers != want {
            return Err(format!(
                "peers() is {peers:?}, expected {want:?} after every registration resolved"
            ));
        }
        // A transfer that `cancel(Immediate)` forgot while the posting thread was posting it
        // (`Capabilities::posts_in_caller`) is held by neither the model nor the backend yet,
        // and keeps its (removed) peer connected until a poll releases it once posted: the
        // backend's peers must come down to the published ones, with polls, within the bound.
        loop {
            let stats = self.local.backend_stats();
            if stats.connected_peers == want.len() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "backend_stats() is {stats:?} with nothing in flight: expected {} \
                     connected peers, one per published peer",
                    want.len()
                ));
            }
            let r = self
                .local
                .poll(None)
                .map_err(|e| format!("poll(None) failed: {e:?}"))?;
            self.absorb(r, None, None)?;
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}
