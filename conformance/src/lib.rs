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
//! Every backend runs it from its own crate, the way an out-of-tree backend would: a short
//! `tests/suite.rs` with `harness = false` that names the backend's settings and hands the
//! cases to [`run`] (`cargo test -p blockwire-shm --test suite`; filters work as usual:
//! `-- shm+faults::cancel`):
//!
//! ```no_run
//! use blockwire_conformance::{run, suite, Setting};
//! use blockwire_shm::ShmBackend;
//! let mut trials = suite(Setting::<ShmBackend>::default());
//! trials.extend(suite(Setting::<ShmBackend>::new("1", "copy_threads=1")));
//! run(libtest_mimic::Arguments::from_args(), trials);
//! ```
//!
//! The crate's `shm`, `ucx`, `libfabric` and `nixl` features are for its peer binary and the
//! cross-process tests, which open backends by name; the cases themselves know no backend.

mod cases;
pub mod churn;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod dead_peer;
pub mod dev_shm;
mod fault;
mod fixture;
pub mod idle;
pub mod memory;
pub mod model;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod notify_across;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod peer;
pub mod stale;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub mod stopped_peer;
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

pub use fault::{FaultPlan, FaultyBackend, FaultyPeer, FaultyXfer, INJECTED};
pub use fixture::{BackendFactory, Faulty, Fixture, Opened, Plain, Setting, Spec};

/// What a case needs from a fixture; without it the case is reported as ignored.
///
/// ```
/// use blockwire_conformance::{cases, Needs, Plain, Setting};
/// let all = cases::<Plain<Setting<blockwire_shm::ShmBackend>>>();
/// assert!(all.iter().any(|c| c.needs == Needs { faults: true, ..Needs::default() }));
/// assert!(all.iter().any(|c| c.needs.read));
/// assert!(all.iter().any(|c| c.needs.disconnect));
/// assert!(all.iter().any(|c| c.needs.revoke));
/// let anywhere = Needs { faults: false, read: false, disconnect: false, revoke: false, notify: false };
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
    /// Notifications ([`blockwire::Capabilities::notifications`]).
    pub notify: bool,
}

/// One case of the suite.
///
/// ```
/// use blockwire_conformance::{cases, Case, Plain, Setting};
/// use blockwire_shm::ShmBackend;
/// let all: Vec<Case<Plain<Setting<ShmBackend>>>> = cases();
/// let case = all.iter().find(|c| c.name == "write_lands_at_remote_index").expect("listed");
/// assert_eq!(case.group, "data");
/// assert!(!case.needs.faults && !case.needs.read);
/// (case.run)(&Plain(Setting::<ShmBackend>::default())); // panics if the backend breaks the contract
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
/// use blockwire_conformance::{cases, Plain, Setting};
/// let all = cases::<Plain<Setting<blockwire_shm::ShmBackend>>>();
/// assert!(all.iter().any(|c| c.group == "cancel"));
/// ```
pub fn cases<F: Fixture>() -> Vec<Case<F>> {
    cases::all::<F>()
}

/// The suite's trials for `fixture`, ready for `libtest_mimic::run`.
///
/// ```
/// use blockwire_conformance::{trials, Faulty, Setting};
/// let t = trials(Faulty(Setting::<blockwire_shm::ShmBackend>::default()));
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

/// The suite for one setting of a backend: every case, plain ([`Plain`]) and with injected
/// faults ([`Faulty`], named `<setting>+faults`).
///
/// ```
/// use blockwire_conformance::{suite, Setting};
/// let t = suite(Setting::<blockwire_shm::ShmBackend>::default());
/// assert!(t.iter().any(|t| t.name() == "shm::data::write_lands_at_remote_index"));
/// assert!(t.iter().any(|t| t.name() == "shm+faults::cancel::wait_keeps_running_transfer"));
/// ```
pub fn suite<B: blockwire::OpenBackend>(setting: Setting<B>) -> Vec<Trial> {
    let mut all = trials(Plain(setting.clone()));
    all.extend(trials(Faulty(setting)));
    all
}

/// The `main` of a backend's `tests/suite.rs` (`harness = false`): the [`suite`] of every
/// setting, run by [`run`] with the command line's arguments.
///
/// ```no_run
/// use blockwire_conformance::Setting;
/// use blockwire_shm::ShmBackend;
/// blockwire_conformance::suite_main([Setting::<ShmBackend>::default(), Setting::new("1", "copy_threads=1")]);
/// ```
pub fn suite_main<B: blockwire::OpenBackend>(settings: impl IntoIterator<Item = Setting<B>>) -> ! {
    let trials = settings.into_iter().flat_map(suite).collect();
    run(libtest_mimic::Arguments::from_args(), trials)
}

/// Runs `trials` as the `main` of a test binary with `harness = false`, then exits: with
/// `RUST_LOG` honoured (`tracing`), and failing if a transport the cases opened left a file
/// named after this process in `/dev/shm` (every one is closed by then; the libfabric shm
/// provider, for one, keeps a file per endpoint there).
///
/// ```no_run
/// use blockwire_conformance::{run, suite, Setting};
/// let mut args = libtest_mimic::Arguments::from_args();
/// args.test_threads.get_or_insert(1); // a backend whose cases must run one at a time
/// run(args, suite(Setting::<blockwire_shm::ShmBackend>::default()));
/// ```
pub fn run(args: libtest_mimic::Arguments, trials: Vec<Trial>) -> ! {
    init_tracing();
    let conclusion = libtest_mimic::run(&args, trials);
    let left = files_left_in_dev_shm();
    if !left.is_empty() {
        eprintln!("files left in /dev/shm by this run: {left:?}");
        std::process::exit(101);
    }
    conclusion.exit()
}

/// Shows the library's `tracing` events as `RUST_LOG` asks, in a test binary's output.
pub(crate) fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Files in `/dev/shm` whose name starts with this process's pid and a colon.
fn files_left_in_dev_shm() -> Vec<String> {
    let pid = format!("{}:", std::process::id());
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&pid))
                .collect()
        })
        .unwrap_or_default()
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
    if needs.notify && !probe.transport.capabilities().notifications {
        return Some(format!(
            "backend {} does not carry notifications (Capabilities::notifications)",
            probe.transport.backend_kind()
        ));
    }
    None
}
