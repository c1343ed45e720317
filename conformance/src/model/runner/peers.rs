//! Adding and removing peers, and waiting for registration handles.

use blockwire::Transport;
use blockwire_core::Error;

use super::super::expected::{HandleId, Settle};
use super::super::state::RegOutcome;
use super::{Runner, Step};

impl<T: Transport> Runner<'_, T> {
    /// Waits for each handle and checks its outcome against what the model allows.
    pub(super) fn settle(&mut self, settle: Vec<Settle>) -> Step {
        for s in settle {
            let handle = self
                .handles
                .remove(&s.handle)
                .ok_or_else(|| format!("the runner holds no handle for registration {}", s.what))?;
            let got = handle.wait_timeout(self.setup.timeout).map_err(|_| {
                format!(
                    "registration {} did not resolve within {:?}",
                    s.what, self.setup.timeout
                )
            })?;
            let outcome = match &got {
                Ok(()) => Some(RegOutcome::Ok),
                Err(Error::Superseded { peer }) if *peer == self.model.names[s.peer] => {
                    Some(RegOutcome::Superseded)
                }
                Err(Error::Closed) => Some(RegOutcome::Closed),
                Err(_) => None,
            };
            self.trace
                .push(format!("  registration {} resolved {got:?}", s.what));
            match outcome {
                Some(o) if s.allowed.contains(&o) => {
                    if o == RegOutcome::Superseded {
                        self.report.superseded += 1;
                    }
                }
                _ => {
                    return Err(format!(
                        "registration {} resolved {got:?}, expected one of {:?}",
                        s.what, s.allowed
                    ));
                }
            }
        }
        Ok(())
    }

    /// `add_remote_peer` must succeed; then the handles it superseded resolve.
    pub(super) fn added(&mut self, peer: usize, remote: usize, settle: Vec<Settle>) -> Step {
        let name = &self.model.names[peer];
        let got = self.local.add_remote_peer(name, &self.descs[remote]);
        self.trace
            .push(format!("  add {name} -> r{remote}: {got:?}"));
        got.map_err(|e| format!("add_remote_peer failed: {e:?}"))?;
        self.settle(settle)
    }

    /// Keeps the handle of `add_remote_peer_async` for the model's later [`Settle`].
    pub(super) fn registering(&mut self, peer: usize, remote: usize, handle: HandleId) -> Step {
        let name = &self.model.names[peer];
        let registration = self.local.add_remote_peer_async(name, &self.descs[remote]);
        self.trace
            .push(format!("  add_async {} ({name} -> r{remote})", handle.0));
        self.handles.insert(handle, registration);
        Ok(())
    }

    /// `remove_remote_peer` must return `Ok` (where `ok`) or `UnknownPeer` (where `unknown`).
    pub(super) fn removed(&mut self, peer: usize, ok: bool, unknown: bool) -> Step {
        let name = &self.model.names[peer];
        let got = self.local.remove_remote_peer(name);
        self.trace.push(format!("  remove {name}: {got:?}"));
        match &got {
            Ok(()) if ok => Ok(()),
            Err(Error::UnknownPeer(p)) if unknown && p == name => {
                self.report.refused += 1;
                Ok(())
            }
            _ => Err(format!(
                "returned {got:?}; expected {}",
                match (ok, unknown) {
                    (true, true) => "Ok or UnknownPeer",
                    (true, false) => "Ok",
                    _ => "Err(UnknownPeer)",
                }
            )),
        }
    }
}
