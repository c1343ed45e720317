//! Drain points and close.

use super::super::expected::{Expected, Then};
use super::super::state::*;
use super::Model;

impl Model {
    pub(super) fn drain(&mut self) -> Expected {
        if self.closed {
            return Model::now(Then::Verify {
                when: "drain after close",
            });
        }
        let settle = self.resolve_all();
        // Once the drain is over nothing is in flight: blocks an immediate cancel forgot are
        // free again.
        self.detached.clear();
        let published = (0..self.names.len())
            .filter(|&p| self.peers[p].published.is_some())
            .collect();
        Model::after(settle, Then::Drained { published })
    }

    pub(super) fn close(&mut self) -> Expected {
        if self.closed {
            return Model::now(Then::ClosedAgain);
        }
        for h in &mut self.handles {
            h.allowed.push(RegOutcome::Closed);
        }
        self.closed = true;
        let settle = self.take_handles(None);
        for p in &mut self.peers {
            p.pending = None;
            p.published = None;
        }
        let mut in_flight = 0;
        for (id, x) in std::mem::take(&mut self.tracked) {
            self.forget_destinations(&x.lands);
            self.gone.insert(id, Gone::Closed);
            self.note_left(id, "in flight at close");
            in_flight += 1;
        }
        Model::now(Then::Closed { settle, in_flight })
    }
}
