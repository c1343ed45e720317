//! # blockwire-conformance: the shared suite every backend passes
//!
//! The contract's cases are written once, as plain generic functions over a [`Fixture`], and
//! turned into named tests by [`trials`]: one `libtest` trial per case and fixture, named
//! `<fixture>::<group>::<case>`. Every backend runs them twice: as it is ([`Plain`]) and
//! wrapped in [`FaultyBackend`] ([`Faulty`], named `<backend>+faults`), which injects the
//! faults the contract must survive (a registration held open, a transfer held running, the
//! Nth post failing, failing state checks, release reporting busy, a remote disconnect) on top
//! of real transfers moving real bytes.
//!
//! A case that needs something a fixture lacks (fault injection, READ) is reported as
//! ignored with the reason, never as passed.
//!
//! Run it for the backends compiled in: `cargo test -p blockwire-conformance`. An out-of-tree
//! backend runs it from its own test with `harness = false`:
//!
//! ```no_run
//! use blockwire_conformance::{trials, Faulty, Plain, ShmFactory};
//! let args = libtest_mimic::Arguments::from_args();
//! let mut all = trials(Plain(ShmFactory::default()));
//! all.extend(trials(Faulty(ShmFactory::default())));
//! libtest_mimic::run(&args, all).exit();
//! ```

mod cases;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod dead_peer;
mod fault;
mod fixture;
pub mod memory;
pub mod model;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod peer;
mod support;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod target_side;

use std::sync::Arc;

use blockwire::Transport;
use libtest_mimic::{Completion, Trial};

pub use fault::{FaultPlan, FaultyBackend, FaultyPeer, FaultyXfer};
#[cfg(feature = "libfabric")]
pub use fixture::LibfabricFactory;
#[cfg(feature = "nixl")]
pub use fixture::NixlFactory;
#[cfg(feature = "shm")]
pub use fixture::ShmFactory;
pub use fixture::{BackendFactory, Faulty, Fixture, Opened, Plain, Spec};
#[cfg(feature = "ucx")]
pub use fixture::{UcxAllocated, UcxFactory};

/// What a case needs from a fixture; without it the case is reported as ignored.
///
/// ```
/// use blockwire_conformance::{cases, Needs, Plain, ShmFactory};
/// let all = cases::<Plain<ShmFactory>>();
/// assert!(all.iter().any(|c| c.needs == Needs { faults: true, ..Needs::default() }));
/// assert!(all.iter().any(|c| c.needs.read));
/// assert!(all.iter().any(|c| c.needs.disconnect));
/// assert!(all.iter().any(|c| c.needs.revoke));
/// let anywhere = Needs { faults: false, read: false, disconnect: false, revoke: false };
/// assert_eq!(Needs::default(), anywhere);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Fault injection (a [`Faulty`] fixture).
    pub faults: bool,
    /// READ support.
    pub read: bool,
    /// Detection of a peer that goes away ([`blockwire::Capabilities::remote_disconnect`]).
    pub disconnect: bool,
    /// Revocation of remote access at close ([`blockwire::Capabilities::revoke`]).
    pub revoke: bool,
}

/// One case of the suite.
///
/// ```
/// use blockwire_conformance::{cases, Case, Plain, ShmFactory};
/// let all: Vec<Case<Plain<ShmFactory>>> = cases();
/// let case = all.iter().find(|c| c.name == "write_lands_at_remote_index").expect("listed");
/// assert_eq!(case.group, "data");
/// assert!(!case.needs.faults && !case.needs.read);
/// (case.run)(&Plain(ShmFactory::default())); // panics if the backend breaks the contract
/// ```
pub struct Case<F> {
    /// Group (`data`, `cancel`, ...).
    pub group: &'static str,
    /// Case name.
    pub name: &'static str,
    /// What it needs.
    pub needs: Needs,
    /// The case; it fails by panicking.
    pub run: fn(&F),
}

/// Every case of the suite, for fixture `F`.
///
/// ```
/// use blockwire_conformance::{cases, Plain, ShmFactory};
/// let all = cases::<Plain<ShmFactory>>();
/// assert!(all.iter().any(|c| c.group == "cancel"));
/// ```
pub fn cases<F: Fixture>() -> Vec<Case<F>> {
    cases::all::<F>()
}

/// The suite's trials for `fixture`, ready for `libtest_mimic::run`.
///
/// ```
/// use blockwire_conformance::{trials, Faulty, ShmFactory};
/// let t = trials(Faulty(ShmFactory::default()));
/// assert!(t.iter().any(|t| t.name() == "shm+faults::cancel::wait_keeps_running_transfer"));
/// ```
pub fn trials<F: Fixture>(fixture: F) -> Vec<Trial> {
    let fixture = Arc::new(fixture);
    let name = fixture.name();
    cases::all::<F>()
        .into_iter()
        .map(|case| {
            let fx = fixture.clone();
            Trial::ignorable_test(
                format!("{name}::{}::{}", case.group, case.name),
                move || {
                    if let Some(reason) = skip_reason(&*fx, case.needs) {
                        return Ok(Completion::ignored_with(reason));
                    }
                    (case.run)(&fx);
                    Ok(Completion::Completed)
                },
            )
        })
        .collect()
}

fn skip_reason<F: Fixture>(fx: &F, needs: Needs) -> Option<String> {
    // A fixture that cannot open a transport fails every case; it is never "skipped".
    let probe = fx
        .open(&Spec::new(1, 64))
        .unwrap_or_else(|e| panic!("{}: opening a transport: {e}", fx.name()));
    if needs.faults && probe.faults.is_none() {
        return Some(format!(
            "needs fault injection; runs under {}+faults",
            fx.name()
        ));
    }
    if needs.read && !probe.transport.capabilities().read {
        return Some(format!(
            "backend {} has no READ",
            probe.transport.backend_kind()
        ));
    }
    if needs.disconnect && !probe.transport.capabilities().remote_disconnect {
        return Some(format!(
            "{} does not detect a remote disconnect in this setting",
            fx.name()
        ));
    }
    if needs.revoke && !probe.transport.capabilities().revoke {
        return Some(format!(
            "{}: close cannot stop a same-host peer that copies straight into the region \
             (Capabilities::revoke)",
            fx.name()
        ));
    }
    None
}
