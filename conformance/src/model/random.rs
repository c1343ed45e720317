//! Long random runs of the [model](super) under proptest: the strategies that generate
//! sequences of [`Action`]s, the run configuration, and one `libtest` trial per fixture
//! ([`trial`]) that warms the fixture up, runs proptest's sequences through [`run`](super::run)
//! (each against fresh transports, each followed by the leak checks) and prints what ran.
//!
//! Everything here is independent of which fixtures exist, so every test binary that runs
//! the model shares it: each backend crate's `tests/model.rs` lists that backend's settings.
//! Such a binary is `harness = false` and
//! ends in [`run_trials`], which runs the trials one after another on the main thread: the
//! leak checks count the whole process's threads and fds.
//!
//! ```no_run
//! use blockwire_conformance::model::random;
//! use blockwire_conformance::{Plain, Setting};
//! // 1 MiB blocks now and then, so transfers are really in flight when cancelled.
//! let trials = vec![random::trial(Plain(Setting::<blockwire_shm::ShmBackend>::default()), &[4096, 1 << 20])];
//! random::run_trials(trials).exit();
//! ```
//!
//! # Knobs
//!
//! Environment variables, read when a trial starts:
//!
//! - `BLOCKWIRE_MODEL_CASES`: sequences per fixture (default [`DEFAULT_CASES`]); with
//!   `BLOCKWIRE_MODEL_REPLAY`, how many times to replay (default once).
//! - `PROPTEST_RNG_SEED`: the seed (decimal); without it each trial picks one from the clock
//!   and prints it, so a failing run can be replayed exactly.
//! - `BLOCKWIRE_MODEL_SAVE=FILE`: write each sequence there (JSON lines, [`Sequence`])
//!   before running it, so one that crashes the process is left behind.
//! - `BLOCKWIRE_MODEL_REPLAY=FILE`: run the sequence saved there ([`Sequence`]) instead of
//!   generating any ([`replay`]).
//! - `PROPTEST_MAX_SHRINK_ITERS` (default [`DEFAULT_MAX_SHRINK_ITERS`] here) and
//!   `PROPTEST_MAX_SHRINK_TIME` (milliseconds, default [`DEFAULT_MAX_SHRINK_TIME_MS`] here):
//!   how long proptest may shrink a failing sequence. Every other `PROPTEST_*` variable works
//!   as proptest documents it, except `PROPTEST_CASES` (`BLOCKWIRE_MODEL_CASES` wins) and
//!   failure persistence (off: replay by seed or by file).
//! - `RUST_LOG`: a `tracing` filter for the backends' logs ([`run_trials`]).
//!
//! A failure prints the seed, the minimal sequence proptest found (as JSON lines: save them
//! to a file for `BLOCKWIRE_MODEL_REPLAY`, see [the model's docs](super#replaying-a-failure))
//! and the runner's trace of it.

use std::cell::RefCell;
use std::time::Instant;

use blockwire_core::{CancelMode, Op};
use libtest_mimic::{Conclusion, Failed, Trial};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};

use super::{Action, Defect, Report, Sender, Sequence, Setup};
use crate::fixture::Fixture;

/// Most actions [`sequence`] generates after its initial adds (at most 3 of those).
pub const MAX_OPS: usize = 37;

/// Sequences per fixture when `BLOCKWIRE_MODEL_CASES` is not set.
pub const DEFAULT_CASES: u32 = 24;

/// Shrink iterations when `PROPTEST_MAX_SHRINK_ITERS` is not set (proptest's own default is
/// far more than a sequence of real transfers can afford).
pub const DEFAULT_MAX_SHRINK_ITERS: u32 = 256;

/// Shrink time in milliseconds when `PROPTEST_MAX_SHRINK_TIME` is not set.
pub const DEFAULT_MAX_SHRINK_TIME_MS: u32 = 120_000;

/// Local blocks of every run's [`Setup`] (see [`setup`]).
pub const NUM_BLOCKS: u32 = 16;

/// WRITE three times in five, READ otherwise.
///
/// ```
/// use blockwire::Op;
/// use blockwire_conformance::model::random;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let op = random::op().new_tree(&mut runner).expect("a value").current();
/// assert!(matches!(op, Op::Write | Op::Read));
/// ```
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => Just(Op::Write), 2 => Just(Op::Read)]
}

/// Every [`Defect`], equally often.
///
/// ```
/// use blockwire_conformance::model::random;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let mut seen = std::collections::HashSet::new();
/// for _ in 0..200 {
///     seen.insert(random::defect().new_tree(&mut runner).expect("a value").current());
/// }
/// assert_eq!(seen.len(), 5);
/// ```
pub fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        Just(Defect::LengthMismatch),
        Just(Defect::Empty),
        Just(Defect::LocalOutOfRange),
        Just(Defect::RemoteOutOfRange),
        Just(Defect::DuplicateDestination),
    ]
}

/// Whose notifications a drain at a target takes: mostly every sender's, else the local
/// transport's by name, now and then a stranger's (none).
///
/// ```
/// use blockwire_conformance::model::{random, Sender};
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let from = random::sender().new_tree(&mut runner).expect("a value").current();
/// assert!(matches!(from, Sender::Any | Sender::Initiator | Sender::Stranger));
/// ```
pub fn sender() -> impl Strategy<Value = Sender> {
    prop_oneof![3 => Just(Sender::Any), 2 => Just(Sender::Initiator), 1 => Just(Sender::Stranger)]
}

/// One action: mostly valid transfers (30 plain and 14 notified in 116), then polls,
/// cancels, adds, removes, drains at the notifications' targets, invalid transfers, drains
/// and standalone notifications; `Close` is rare (1 in 116, about one sequence in six),
/// since every call after it is only `Err(Closed)`. Peer and remote numbers are `0..3` (a
/// notification drain's target `0..4`, 3 being the local transport), a transfer moves 1 to 4
/// blocks, a cancel names 1 to 4 ids.
///
/// ```
/// use blockwire_conformance::model::{random, Action};
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let actions: Vec<Action> = (0..500)
///     .map(|_| random::action().new_tree(&mut runner).expect("a value").current())
///     .collect();
/// assert!(actions.iter().any(|a| matches!(a, Action::Transfer { .. })));
/// assert!(actions.iter().all(|a| match a {
///     Action::Transfer { peer, blocks, .. } => *peer < 3 && (1..=4).contains(blocks),
///     Action::Cancel { picks, .. } => (1..=4).contains(&picks.len()),
///     _ => true,
/// }));
/// ```
pub fn action() -> impl Strategy<Value = Action> {
    let peer = || 0u8..3;
    let remote = || 0u8..3;
    let mode = prop_oneof![Just(CancelMode::Wait), Just(CancelMode::Immediate)];
    prop_oneof![
        7 => (peer(), remote()).prop_map(|(peer, remote)| Action::Add { peer, remote }),
        6 => (peer(), remote()).prop_map(|(peer, remote)| Action::AddAsync { peer, remote }),
        5 => peer().prop_map(|peer| Action::Remove { peer }),
        30 => (op(), peer(), 1u8..=4, any::<u64>())
            .prop_map(|(op, peer, blocks, pick)| Action::Transfer { op, peer, blocks, pick }),
        14 => (op(), peer(), 1u8..=4, any::<u64>())
            .prop_map(|(op, peer, blocks, pick)| Action::Notified { op, peer, blocks, pick }),
        5 => (peer(), any::<u64>()).prop_map(|(peer, pick)| Action::Notify { peer, pick }),
        10 => (0u8..4, sender())
            .prop_map(|(target, from)| Action::Notifications { target, from }),
        6 => (op(), peer(), defect(), any::<u64>())
            .prop_map(|(op, peer, defect, pick)| Action::Invalid { op, peer, defect, pick }),
        12 => peer().prop_map(|p| Action::Poll { peer: Some(p) }),
        4 => Just(Action::Poll { peer: None }),
        12 => (mode, prop::collection::vec(any::<u32>(), 1..=4))
            .prop_map(|(mode, picks)| Action::Cancel { mode, picks }),
        4 => Just(Action::Drain),
        1 => Just(Action::Close),
    ]
}

/// A sequence: up to three synchronous adds first (so most sequences move data early), then
/// 1 to [`MAX_OPS`] of [`action`].
///
/// ```
/// use blockwire_conformance::model::random;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// for _ in 0..50 {
///     let actions = random::sequence().new_tree(&mut runner).expect("a value").current();
///     assert!((1..=3 + random::MAX_OPS).contains(&actions.len()));
/// }
/// ```
pub fn sequence() -> impl Strategy<Value = Vec<Action>> {
    let adds = prop::collection::vec(
        (0u8..3, 0u8..3).prop_map(|(peer, remote)| Action::Add { peer, remote }),
        0..=3,
    );
    (adds, prop::collection::vec(action(), 1..=MAX_OPS)).prop_map(|(mut adds, actions)| {
        adds.extend(actions);
        adds
    })
}

/// The block length of one sequence: `block_lens[0]` three times in four, else any of
/// `block_lens` (so a long list does not slow every sequence down). Shrinks towards
/// `block_lens[0]`.
///
/// # Panics
///
/// If `block_lens` is empty.
///
/// ```
/// use blockwire_conformance::model::random;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let s = random::block_len(&[4096, 1 << 20]);
/// let lens: Vec<usize> = (0..100)
///     .map(|_| s.new_tree(&mut runner).expect("a value").current())
///     .collect();
/// assert!(lens.iter().all(|l| *l == 4096 || *l == 1 << 20));
/// assert!(lens.iter().filter(|l| **l == 4096).count() > 50);
/// ```
pub fn block_len(block_lens: &[usize]) -> impl Strategy<Value = usize> + use<> {
    assert!(!block_lens.is_empty(), "no block length to choose from");
    let first = block_lens[0];
    (0..4usize, prop::sample::select(block_lens.to_vec()))
        .prop_map(move |(which, other)| if which < 3 { first } else { other })
}

/// The [`Setup`] of every run: [`NUM_BLOCKS`] local blocks of `block_len` bytes (and the rest
/// as [`Setup::new`] says).
///
/// ```
/// let s = blockwire_conformance::model::random::setup(4096);
/// assert_eq!((s.num_blocks, s.block_len), (16, 4096));
/// ```
pub fn setup(block_len: usize) -> Setup {
    Setup::new(NUM_BLOCKS, block_len)
}

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The proptest configuration of a trial, from the environment (see the module docs), and the
/// seed it runs with: `PROPTEST_RNG_SEED`, else one drawn from the clock and the pid. The
/// returned config always has that seed fixed, so the run can be replayed with it.
///
/// ```
/// use proptest::test_runner::RngSeed;
/// let (config, seed) = blockwire_conformance::model::random::config();
/// assert_eq!(config.rng_seed, RngSeed::Fixed(seed));
/// assert!(config.failure_persistence.is_none());
/// if std::env::var_os("BLOCKWIRE_MODEL_CASES").is_none() {
///     assert_eq!(config.cases, blockwire_conformance::model::random::DEFAULT_CASES);
/// }
/// ```
pub fn config() -> (Config, u64) {
    // `Config::default()` reads the PROPTEST_* variables.
    let mut config = Config {
        cases: env_u32("BLOCKWIRE_MODEL_CASES").unwrap_or(DEFAULT_CASES),
        failure_persistence: None,
        ..Config::default()
    };
    if env_u32("PROPTEST_MAX_SHRINK_ITERS").is_none() {
        config.max_shrink_iters = DEFAULT_MAX_SHRINK_ITERS;
    }
    if env_u32("PROPTEST_MAX_SHRINK_TIME").is_none() {
        config.max_shrink_time = DEFAULT_MAX_SHRINK_TIME_MS;
    }
    let seed = match config.rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            now ^ u64::from(std::process::id()).rotate_left(32)
        }
    };
    config.rng_seed = RngSeed::Fixed(seed);
    (config, seed)
}

/// One `libtest` trial, `model::<fixture name>`, that runs the model under proptest against
/// `fx`: it first [warms up](super::warm_up) the fixture once per block length, then runs
/// [`config`]'s cases of ([`block_len`]`(block_lens)`, [`sequence`]) through
/// [`run`](super::run) (or replays a saved sequence, see the module docs), and prints how many
/// sequences ran, the seed, the summed [`Report`] and the wall time. A violation fails the
/// trial with the seed, the minimal sequence and the runner's trace.
///
/// Run it with [`run_trials`] (one at a time, on the main thread), never beside other tests
/// in one process: the leak checks count the whole process's threads and fds.
///
/// # Panics
///
/// If `block_lens` is empty.
///
/// (The example runs in a process of its own: the leak check counts the process's threads.)
///
/// ```standalone_crate
/// use blockwire_conformance::model::random;
/// use blockwire_conformance::{Plain, Setting};
/// let t = random::trial(Plain(Setting::<blockwire_shm::ShmBackend>::default()), &[4096]);
/// assert_eq!(t.name(), "model::shm");
/// ```
pub fn trial<F: Fixture>(fx: F, block_lens: &[usize]) -> Trial {
    assert!(!block_lens.is_empty(), "no block length to choose from");
    let block_lens = block_lens.to_vec();
    let name = format!("model::{}", fx.name());
    Trial::test(name.clone(), move || {
        let started = Instant::now();
        for &len in &block_lens {
            super::warm_up(&fx, &setup(len))
                .map_err(|v| Failed::from(format!("warm-up failed: {v}")))?;
        }
        if let Ok(path) = std::env::var("BLOCKWIRE_MODEL_REPLAY") {
            return replay(&fx, &name, &path);
        }
        let save = std::env::var("BLOCKWIRE_MODEL_SAVE").ok();
        let (config, seed) = config();
        let mut runner = TestRunner::new(config);
        let runs = RefCell::new(0usize);
        let total = RefCell::new(Report::default());
        let strategy = (block_len(&block_lens), sequence());
        let result = runner.run(&strategy, |(len, actions)| {
            *runs.borrow_mut() += 1;
            let sequence = |actions: &[Action]| Sequence {
                fixture: name.clone(),
                block_len: len,
                actions: actions.to_vec(),
            };
            if let Some(path) = &save {
                // Written before the run: a sequence that crashes the process stays there.
                std::fs::write(path, sequence(&actions).to_json_lines()).map_err(|e| {
                    TestCaseError::fail(format!("writing the sequence to {path}: {e}"))
                })?;
            }
            let report = super::run(&fx, &setup(len), &actions).map_err(|v| {
                // The actions after the failing one never ran: list the ones that did.
                let ran = v.step.map_or(actions.len(), |s| s + 1);
                TestCaseError::fail(format!(
                    "{v}\nthe {ran} actions that ran, as JSON lines (save them to a file and \
                     replay it with BLOCKWIRE_MODEL_REPLAY=<file>):\n{}",
                    sequence(&actions[..ran]).to_json_lines()
                ))
            })?;
            total.borrow_mut().merge(&report);
            Ok(())
        });
        let total = total.into_inner();
        eprintln!(
            "{name}: {} sequences run ({} cases asked, seed {seed}), {total}; {:.1} s",
            runs.into_inner(),
            runner.config().cases,
            started.elapsed().as_secs_f64()
        );
        match result {
            Ok(()) => Ok(()),
            Err(TestError::Fail(reason, (len, actions))) => Err(format!(
                "{name}: the model found a contract violation (replay: \
                 PROPTEST_RNG_SEED={seed}); the minimal sequence proptest found has {} \
                 actions, block_len {len}:\n{reason}",
                actions.len()
            )
            .into()),
            Err(e) => Err(format!("{name}: {e}").into()),
        }
    })
}

/// Runs the sequence saved at `path` (JSON lines, [`Sequence`]) against `fx`,
/// `BLOCKWIRE_MODEL_CASES` times (default once), each a full [`run`](super::run) with its
/// leak checks; `name` prefixes what it prints and returns. [`trial`] calls it when
/// `BLOCKWIRE_MODEL_REPLAY` is set (after its warm-up, which a caller of its own should do
/// too).
///
/// (The example runs in a process of its own: the leak check counts the process's threads.)
///
/// ```standalone_crate
/// use blockwire_conformance::model::{self, random, Action, Sequence};
/// use blockwire_conformance::{Plain, Setting};
/// let fx = Plain(Setting::<blockwire_shm::ShmBackend>::default());
/// model::warm_up(&fx, &random::setup(4096)).expect("warm-up");
/// let path = std::env::temp_dir().join(format!("model-replay-{}.jsonl", std::process::id()));
/// let seq = Sequence {
///     fixture: "model::shm".into(),
///     block_len: 4096,
///     actions: vec![Action::Add { peer: 0, remote: 0 }, Action::Drain],
/// };
/// std::fs::write(&path, seq.to_json_lines()).expect("write");
/// let replayed = random::replay(&fx, "model::shm", &path.to_string_lossy());
/// std::fs::write(&path, "{\"fixture\":\"model::shm\",\"block_len\":4096}\n\"Jump\"\n")
///     .expect("write");
/// let garbled = random::replay(&fx, "model::shm", &path.to_string_lossy());
/// std::fs::remove_file(&path).expect("remove");
/// replayed.expect("the sequence passes");
/// assert!(garbled.is_err());
/// ```
pub fn replay<F: Fixture>(fx: &F, name: &str, path: &str) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    let seq =
        Sequence::from_json_lines(&text).map_err(|e| match std::error::Error::source(&e) {
            Some(why) => format!("{path}: {e}: {why}"),
            None => format!("{path}: {e}"),
        })?;
    let setup = setup(seq.block_len);
    let times = env_u32("BLOCKWIRE_MODEL_CASES").unwrap_or(1);
    for i in 0..times {
        super::run(fx, &setup, &seq.actions).map_err(|v| format!("{name}: replay {i}: {v}"))?;
    }
    eprintln!(
        "{name}: replayed {} actions {times} times: ok",
        seq.actions.len()
    );
    Ok(())
}

/// The `main` of a model test binary: installs a `tracing` subscriber filtered by `RUST_LOG`,
/// reads the `libtest` arguments (a filter, `--list`, ...) and runs `trials` one at a time on
/// the main thread, whatever `--test-threads` says (the leak checks count the whole
/// process). Returns the conclusion; call [`Conclusion::exit`] on it.
///
/// ```no_run
/// use blockwire_conformance::model::random;
/// use blockwire_conformance::{Plain, Setting};
/// random::run_trials(vec![random::trial(Plain(Setting::<blockwire_shm::ShmBackend>::default()), &[4096])]).exit();
/// ```
pub fn run_trials(trials: Vec<Trial>) -> Conclusion {
    crate::init_tracing();
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = Some(1);
    libtest_mimic::run(&args, trials)
}

/// The `main` of a backend's `tests/model.rs` (`harness = false`): one [`trial`] per fixture
/// with blocks of `block_lens` bytes, run by [`run_trials`], then exits.
///
/// ```no_run
/// use blockwire_conformance::{Plain, Setting, model::random};
/// random::main([Plain(Setting::<blockwire_shm::ShmBackend>::default())], &[4096]);
/// ```
pub fn main<F: Fixture>(fixtures: impl IntoIterator<Item = F>, block_lens: &[usize]) -> ! {
    let trials = fixtures
        .into_iter()
        .map(|fx| trial(fx, block_lens))
        .collect();
    run_trials(trials).exit()
}
