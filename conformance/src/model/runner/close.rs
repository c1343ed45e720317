//! Closing the local transport, and the end of a run: every backend releases everything.

use std::time::{Duration, Instant};

use blockwire::Transport;
use blockwire_core::{BackendStats, Error};

use super::super::Report;
use super::super::action::Action;
use super::super::expected::Settle;
use super::{Runner, Step, expect_refused};

impl<T: Transport> Runner<'_, T> {
    /// `close` must succeed; then the handles resolve as allowed and the transport says it
    /// is closed.
    pub(super) fn closed(&mut self, settle: Vec<Settle>, in_flight: usize) -> Step {
        let got = self.local.close();
        self.trace.push(format!("  close: {got:?}"));
        got.map_err(|e| format!("close returned Err({e:?})"))?;
        self.settle(settle)?;
        self.report.in_flight_at_close += in_flight;
        if !self.local.is_closed() {
            return Err("is_closed() is false after close".into());
        }
        let peers = self.local.peers();
        if !peers.is_empty() {
            return Err(format!("peers() is {peers:?} after close, expected []"));
        }
        expect_refused(self.local.descriptor(), &Error::Closed)?;
        expect_refused(self.local.notifications(None), &Error::Closed)
            .map_err(|e| format!("notifications(None) after close {e}"))?;
        self.verify("after close")
    }

    /// `close` again must still succeed.
    pub(super) fn closed_again(&mut self) -> Step {
        let got = self.local.close();
        self.trace.push(format!("  close again: {got:?}"));
        got.map_err(|e| format!("close after close returned Err({e:?}), expected Ok"))
    }

    /// Drains (unless closed), drains every notification owed, leaves one more queued at
    /// each published peer's target, closes (unless closed), closes the remotes (which
    /// discard what is queued), and checks that every backend released every peer and
    /// transfer.
    pub(in crate::model) fn finish(mut self) -> Result<Report, String> {
        if !self.model.closed {
            self.step(&Action::Drain)?;
        }
        self.drain_notes()?;
        if !self.model.closed {
            for peer in 0..self.model.names.len() {
                let pick = peer as u64;
                let notify = Action::Notify {
                    peer: peer as u8,
                    pick,
                };
                self.trace.push(format!("end: {}", notify.to_json()));
                self.step(&notify)?;
            }
            self.step(&Action::Drain)?;
            self.step(&Action::Close)?;
        }
        self.verify("after close")?;
        for r in 0..self.remotes.len() {
            self.close_target(r)?;
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
