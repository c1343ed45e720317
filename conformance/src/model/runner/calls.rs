//! Making one of the model's [`Call`]s, and the calls it expects refused.

use blockwire::Transport;
use blockwire_core::{BlockIndex, Error, Op, PeerId, TransferId};

use super::super::expected::{Call, Errs};
use super::{Runner, Step};

impl<T: Transport> Runner<'_, T> {
    pub(super) fn post(
        &self,
        op: Op,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: Option<&[u8]>,
    ) -> Result<TransferId, Error> {
        match (op, message) {
            (Op::Write, None) => self.local.write_blocks(peer, local, remote),
            (Op::Read, None) => self.local.read_blocks(peer, local, remote),
            (Op::Write, Some(m)) => self.local.write_blocks_notify(peer, local, remote, m),
            (Op::Read, Some(m)) => self.local.read_blocks_notify(peer, local, remote, m),
        }
    }

    /// Makes `call` and traces it; returns what it returned (`Ok` as `Debug` prints it), or a
    /// violation of its own (an asynchronous add still pending where it must have resolved).
    fn invoke(&mut self, call: &Call) -> Result<Result<String, Error>, String> {
        let names = &self.model.names;
        let (line, got) = match call {
            Call::Add { peer, remote } => {
                let got = self
                    .local
                    .add_remote_peer(&names[*peer], &self.descs[*remote]);
                (
                    format!("add {} -> r{remote}", names[*peer]),
                    got.map(|()| "()".to_owned()),
                )
            }
            Call::AddAsync { peer, remote } => {
                let handle = self
                    .local
                    .add_remote_peer_async(&names[*peer], &self.descs[*remote]);
                if !handle.is_finished() {
                    return Err(
                        "add_remote_peer_async: the handle is pending, expected one \
                                already resolved Err(Closed)"
                            .into(),
                    );
                }
                (
                    format!("add_async {} -> r{remote}", names[*peer]),
                    handle.wait().map(|()| "()".to_owned()),
                )
            }
            Call::Remove { peer } => (
                format!("remove {}", names[*peer]),
                self.local
                    .remove_remote_peer(&names[*peer])
                    .map(|()| "()".to_owned()),
            ),
            Call::Post {
                op,
                peer,
                local,
                remote,
                message,
            } => (
                format!(
                    "{op:?} {} local {local:?} remote {remote:?}{}",
                    names[*peer],
                    message
                        .as_ref()
                        .map_or(String::new(), |m| format!(" notify {} bytes", m.len()))
                ),
                self.post(*op, &names[*peer], local, remote, message.as_deref())
                    .map(|id| format!("{id:?}")),
            ),
            Call::Notify { peer, message } => (
                format!("notify {} {} bytes", names[*peer], message.len()),
                self.local
                    .notify(&names[*peer], message)
                    .map(|id| format!("{id:?}")),
            ),
            Call::Notifications { target, from } => {
                let from = self.source(*from);
                let got = match target {
                    Some(r) => self.remotes[*r].notifications(from.as_deref()),
                    None => self.local.notifications(from.as_deref()),
                };
                (
                    format!("notifications({from:?}) at {target:?}"),
                    got.map(|n| format!("{} notifications", n.len())),
                )
            }
            Call::Poll { peer } => {
                let name = peer.map(|p| &names[p]);
                (
                    format!("poll({name:?})"),
                    self.local.poll(name).map(|r| format!("{r:?}")),
                )
            }
            Call::Cancel { ids, mode } => (
                format!("cancel({ids:?}, {mode:?})"),
                self.local.cancel(ids, *mode).map(|r| format!("{r:?}")),
            ),
        };
        self.trace.push(format!("  {line}: {}", shown(&got)));
        Ok(got)
    }

    /// `call` must fail with one of `allowed`; with `nothing_tracked`, the transport tracks as
    /// many transfers after it as before, and the backend holds as many (only this thread's
    /// calls release any) where posts run in the caller's thread (not
    /// `Capabilities::posts_in_caller`).
    pub(super) fn refused(
        &mut self,
        call: &Call,
        allowed: &[Error],
        nothing_tracked: bool,
    ) -> Step {
        let live = self.local.backend_stats().live_transfers;
        let tracked = self.local.in_flight(None);
        let got = self.invoke(call)?;
        self.report.refused += 1;
        match &got {
            Err(e) if allowed.contains(e) => {}
            _ => {
                return Err(format!(
                    "returned {}, expected {}",
                    shown(&got),
                    Errs(allowed)
                ));
            }
        }
        if nothing_tracked {
            let after = self.local.backend_stats().live_transfers;
            // Where posts run on the posting thread, it may post (and the backend hold) a
            // transfer queued before this call, even one a cancel already forgot: only the
            // tracking below tells whether this call added one.
            let deferred = self.local.capabilities().posts_in_caller;
            if after != live && !deferred {
                return Err(format!(
                    "a refused call changed the backend's live transfers from {live} to {after}"
                ));
            }
            let tracked_after = self.local.in_flight(None);
            if tracked_after != tracked {
                return Err(format!(
                    "a refused call changed the transfers tracked from {tracked} to {tracked_after}"
                ));
            }
        }
        Ok(())
    }
}

/// `Ok(<value>)` or `Err(<error>)`, as `Debug` prints a result.
fn shown(got: &Result<String, Error>) -> String {
    match got {
        Ok(value) => format!("Ok({value})"),
        Err(e) => format!("Err({e:?})"),
    }
}
