//! The runner: asks the [model](super::reference) what each action expects, makes those calls
//! on the real transports, and compares what they returned with it. All the waiting (for
//! registrations, a drain, the backends' live counts) is here; every judgement of what a
//! backend may do is the model's.

mod blocks;
mod calls;
mod close;
mod notes;
mod peers;
mod transfer;

use std::collections::HashMap;

use blockwire::{Registration, Transport};
use blockwire_core::{Error, PeerDescriptor, PeerId};

use super::action::Action;
use super::expected::{Expected, HandleId, Then};
use super::reference::Model;
use super::{Report, Setup};
use crate::fixture::{Fixture, Spec};

/// `Ok`, or what differs from the model.
pub(super) type Step = Result<(), String>;

pub(super) struct Runner<'s, T: Transport> {
    pub(super) setup: &'s Setup,
    pub(super) local: T,
    pub(super) remotes: Vec<T>,
    pub(super) descs: Vec<PeerDescriptor>,
    pub(super) model: Model,
    /// The handles of asynchronous adds not waited for yet.
    pub(super) handles: HashMap<HandleId, Registration>,
    pub(super) report: Report,
    pub(super) trace: Vec<String>,
    pub(super) buf: Vec<u8>,
}

/// `got` must be `Err(want)`.
pub(super) fn expect_refused<T: std::fmt::Debug>(got: Result<T, Error>, want: &Error) -> Step {
    match got {
        Err(e) if &e == want => Ok(()),
        other => Err(format!("returned {other:?}, expected Err({want:?})")),
    }
}

impl<'s, T: Transport> Runner<'s, T> {
    /// Opens the local transport and the remotes `setup` names.
    pub(super) fn open<F: Fixture<Transport = T>>(
        fx: &F,
        setup: &'s Setup,
    ) -> Result<Self, String> {
        let spec = |n: u32| Spec::new(n, setup.block_len);
        let local = fx
            .open(&spec(setup.num_blocks))
            .map_err(|e| e.report())?
            .transport;
        let mut remotes = Vec::new();
        let mut descs = Vec::new();
        for &n in &setup.remote_blocks {
            let r = fx.open(&spec(n)).map_err(|e| e.report())?.transport;
            descs.push(r.descriptor().map_err(|e| e.report())?);
            remotes.push(r);
        }
        let mut model = Model::new(setup);
        model.sender = local.name().to_owned();
        // Whether notifications are carried, and the exact refusal when they are not: a
        // notification to a peer nobody added is refused for that first.
        let probe = local.notify(&PeerId::from("model-probe"), b"");
        match (local.capabilities().notifications, probe) {
            (true, Err(Error::UnknownPeer(_))) => {}
            (false, Err(e @ Error::Unsupported { .. })) => model.unsupported = Some(e),
            (caps, got) => {
                return Err(format!(
                    "notify to a peer nobody added returned {got:?}, expected \
                     Err(UnknownPeer) where the backend carries notifications, \
                     Err(Unsupported) where not (capabilities say {caps})"
                ));
            }
        }
        Ok(Runner {
            setup,
            local,
            remotes,
            descs,
            model,
            handles: HashMap::new(),
            report: Report::default(),
            trace: Vec::new(),
            buf: vec![0; setup.block_len],
        })
    }

    /// Applies `action` to the model and runs what it expects; then `in_flight` must agree.
    pub(super) fn step(&mut self, action: &Action) -> Step {
        let expected = self.model.apply(action);
        self.run(expected)?;
        self.check_in_flight()
    }

    fn run(&mut self, expected: Expected) -> Step {
        let Expected { settle, then } = expected;
        self.settle(settle)?;
        match then {
            Then::Refused {
                call,
                allowed,
                nothing_tracked,
            } => self.refused(&call, &allowed, nothing_tracked),
            Then::Added {
                peer,
                remote,
                settle,
            } => self.added(peer, remote, settle),
            Then::Registering {
                peer,
                remote,
                handle,
            } => self.registering(peer, remote, handle),
            Then::Removed { peer, ok, unknown } => self.removed(peer, ok, unknown),
            Then::Skipped => {
                self.report.skipped += 1;
                self.trace.push("  skipped: no free block".into());
                Ok(())
            }
            Then::Posted {
                fill,
                op,
                peer,
                local,
                remote,
                message,
                planned,
            } => {
                self.fill(&fill)?;
                self.posted(op, peer, &local, &remote, message.as_deref(), planned)
            }
            Then::Notified {
                peer,
                message,
                planned,
            } => self.notified(peer, &message, planned),
            Then::Drank { target, from } => self.drank(target, from),
            Then::Polled { peer } => self.polled(peer),
            Then::Cancelled { ids, mode } => self.cancelled(&ids, mode),
            Then::Drained { published } => self.drained(&published),
            Then::Verify { when } => {
                self.report.drains += 1;
                self.verify(when)
            }
            Then::Closed { settle, in_flight } => self.closed(settle, in_flight),
            Then::ClosedAgain => self.closed_again(),
        }
    }

    /// `in_flight` equals the model's tracked transfers, per peer and in all (zero once
    /// closed).
    fn check_in_flight(&self) -> Step {
        let (all, per_peer) = self.model.in_flight();
        let got = self.local.in_flight(None);
        if got != all {
            return Err(format!("in_flight(None) is {got}, the model tracks {all}"));
        }
        for (name, want) in self.model.names.iter().zip(per_peer) {
            let got = self.local.in_flight(Some(name));
            if got != want {
                return Err(format!(
                    "in_flight({name:?}) is {got}, the model tracks {want}"
                ));
            }
        }
        Ok(())
    }
}
