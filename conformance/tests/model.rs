//! Long random runs: proptest generates sequences of operations (add, add-async, remove, write,
//! read, invalid transfers, poll, cancel, drain, close) and `blockwire_conformance::model` runs
//! each against fresh transports and checks it against its reference model, then checks that
//! nothing leaked (backend live counts, threads, fds, `/dev/shm`). One proptest per fixture
//! compiled in: `shm`, `ucx-tcp` and `ucx-shm` (feature `ucx`), `libfabric-tcp` and
//! `libfabric-shm` (feature `libfabric`).
//!
//! `cargo test -p blockwire-conformance --features ucx,libfabric --test model [-- FILTER]`.
//! Tests run one after another on the main thread (the leak checks count the whole process's
//! threads and fds). Knobs: `BLOCKWIRE_MODEL_CASES` (sequences per fixture, default 24),
//! `PROPTEST_RNG_SEED` (replay a run: each fixture prints its seed on failure),
//! `BLOCKWIRE_MODEL_SAVE=FILE` (write each sequence there before running it, so one that
//! crashes the process is left behind), `BLOCKWIRE_MODEL_REPLAY=FILE` (run that sequence,
//! `Debug`-printed ops one per line, instead of generating: `BLOCKWIRE_MODEL_CASES` times),
//! `PROPTEST_MAX_SHRINK_ITERS` (default 256 here), `PROPTEST_MAX_SHRINK_TIME` (ms, default
//! 120000 here). A failure prints the minimal sequence and the runner's trace of it.

use std::cell::RefCell;
use std::time::Instant;

use blockwire::CancelMode;
use blockwire_conformance::Fixture;
use blockwire_conformance::model::{self, Defect, Dir, Op, Report, Setup};
use libtest_mimic::{Failed, Trial};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};

/// Longest sequence: up to 3 initial adds, then up to 37 operations.
const MAX_OPS: usize = 37;

#[cfg(feature = "ucx")]
const UCX_SETTINGS: [(&str, &str); 2] = [
    ("tcp", "tls=tcp"),
    ("shm", "tls=posix,cma,peer_errors=false"),
];

#[cfg(feature = "libfabric")]
const LIBFABRIC_SETTINGS: [(&str, &str); 2] =
    [("tcp", "provider=tcp,domain=lo"), ("shm", "provider=shm")];

fn dir() -> impl Strategy<Value = Dir> {
    prop_oneof![3 => Just(Dir::Write), 2 => Just(Dir::Read)]
}

fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        Just(Defect::LengthMismatch),
        Just(Defect::Empty),
        Just(Defect::LocalOutOfRange),
        Just(Defect::RemoteOutOfRange),
        Just(Defect::DuplicateDestination),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let peer = || 0u8..3;
    let remote = || 0u8..3;
    let mode = prop_oneof![Just(CancelMode::Wait), Just(CancelMode::Immediate)];
    // Close is rare (about one sequence in five): every call after it is only `Err(Closed)`.
    prop_oneof![
        7 => (peer(), remote()).prop_map(|(peer, remote)| Op::Add { peer, remote }),
        6 => (peer(), remote()).prop_map(|(peer, remote)| Op::AddAsync { peer, remote }),
        5 => peer().prop_map(|peer| Op::Remove { peer }),
        40 => (dir(), peer(), 1u8..=4, any::<u64>())
            .prop_map(|(dir, peer, blocks, pick)| Op::Transfer { dir, peer, blocks, pick }),
        6 => (dir(), peer(), defect(), any::<u64>())
            .prop_map(|(dir, peer, defect, pick)| Op::Invalid { dir, peer, defect, pick }),
        12 => peer().prop_map(|p| Op::Poll { peer: Some(p) }),
        4 => Just(Op::Poll { peer: None }),
        12 => (mode, prop::collection::vec(any::<u32>(), 1..=4))
            .prop_map(|(mode, picks)| Op::Cancel { mode, picks }),
        4 => Just(Op::Drain),
        1 => Just(Op::Close),
    ]
}

/// A few synchronous adds first (so most sequences move data early), then anything.
fn sequence() -> impl Strategy<Value = Vec<Op>> {
    let adds = prop::collection::vec(
        (0u8..3, 0u8..3).prop_map(|(peer, remote)| Op::Add { peer, remote }),
        0..=3,
    );
    (adds, prop::collection::vec(op(), 1..=MAX_OPS)).prop_map(|(mut adds, ops)| {
        adds.extend(ops);
        adds
    })
}

// Contract violations this test found, fixed since:
// `cancel(&[id, id], Wait)` could return an id as running and then release it (never reported);
// `poll(None)` was not in id order; libfabric 1.17's shm provider crashed (SIGSEGV in
// `fi_cq_read`, SIGFPE in `fi_av_insert`) or lost writes once an address-vector entry had been
// removed.

/// Sixteen local blocks of `len` bytes.
fn setup(len: usize) -> Setup {
    Setup::new(16, len)
}

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn config() -> (Config, u64) {
    // `Config::default()` reads the PROPTEST_* variables.
    let mut config = Config {
        cases: env_u32("BLOCKWIRE_MODEL_CASES").unwrap_or(24),
        failure_persistence: None,
        ..Config::default()
    };
    if env_u32("PROPTEST_MAX_SHRINK_ITERS").is_none() {
        config.max_shrink_iters = 256;
    }
    if env_u32("PROPTEST_MAX_SHRINK_TIME").is_none() {
        config.max_shrink_time = 120_000;
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

/// One proptest over `fx`: `block_lens` are the block sizes a sequence may use (first one most
/// often).
fn model_trial<F: Fixture>(fx: F, block_lens: &'static [usize]) -> Trial {
    let name = format!("model::{}", fx.name());
    Trial::test(name.clone(), move || {
        let started = Instant::now();
        for &len in block_lens {
            model::warm_up(&fx, &setup(len))
                .map_err(|v| Failed::from(format!("warm-up failed: {v}")))?;
        }
        if let Ok(path) = std::env::var("BLOCKWIRE_MODEL_REPLAY") {
            return replay(&fx, &name, &path);
        }
        let save = std::env::var("BLOCKWIRE_MODEL_SAVE").ok();
        let (config, seed) = config();
        let mut runner = TestRunner::new(config);
        let lens = prop::sample::select(block_lens.to_vec());
        let len = (0..4usize, lens).prop_map(
            move |(first, other)| {
                if first < 3 { block_lens[0] } else { other }
            },
        );
        let runs = RefCell::new(0usize);
        let total = RefCell::new(Report::default());
        let result = runner.run(&(len, sequence()), |(len, ops)| {
            *runs.borrow_mut() += 1;
            if let Some(path) = &save {
                // Written before the run: a sequence that crashes the process stays there.
                std::fs::write(path, listing(&name, len, &ops)).expect("writing the sequence");
            }
            let setup = setup(len);
            let report = model::run(&fx, &setup, &ops).map_err(|v| {
                // The operations after the failing one never ran: list the ones that did.
                let ran = v.step.map_or(ops.len(), |s| s + 1);
                let listed: Vec<String> =
                    ops[..ran].iter().map(|op| format!("    {op:?},")).collect();
                TestCaseError::fail(format!(
                    "{v}\nthe {ran} operations that ran (block_len {len}):\n{}",
                    listed.join("\n")
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
            Err(TestError::Fail(reason, (len, ops))) => Err(format!(
                "{name}: the model found a contract violation (replay: \
                 PROPTEST_RNG_SEED={seed}); the minimal sequence proptest found has {} \
                 operations, block_len {len}:\n{reason}",
                ops.len()
            )
            .into()),
            Err(e) => Err(format!("{name}: {e}").into()),
        }
    })
}

/// A sequence as `BLOCKWIRE_MODEL_REPLAY` reads it.
fn listing(fixture: &str, len: usize, ops: &[Op]) -> String {
    let mut text = format!("// {fixture}\nblock_len {len}\n");
    for op in ops {
        text.push_str(&format!("{op:?},\n"));
    }
    text
}

/// Runs the sequence saved at `path` (`BLOCKWIRE_MODEL_CASES` times, default once).
fn replay<F: Fixture>(fx: &F, name: &str, path: &str) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    let mut len = 4096;
    let mut ops_text = String::new();
    for line in text.lines() {
        match line.trim().strip_prefix("block_len ") {
            Some(n) => len = n.trim().parse().map_err(|e| format!("block_len: {e}"))?,
            None => {
                ops_text.push_str(line);
                ops_text.push('\n');
            }
        }
    }
    let ops = Op::parse_list(&ops_text)?;
    let setup = setup(len);
    let times = env_u32("BLOCKWIRE_MODEL_CASES").unwrap_or(1);
    for i in 0..times {
        model::run(fx, &setup, &ops).map_err(|v| format!("{name}: replay {i}: {v}"))?;
    }
    eprintln!(
        "{name}: replayed {} operations {times} times: ok",
        ops.len()
    );
    Ok(())
}

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut args = libtest_mimic::Arguments::from_args();
    // On the main thread, one at a time: the leak checks count the whole process.
    args.test_threads = Some(1);
    #[allow(unused_mut)]
    let mut trials = Vec::new();
    #[cfg(feature = "shm")]
    {
        use blockwire_conformance::{Plain, ShmFactory};
        // 1 MiB blocks now and then, so transfers are really in flight when cancelled,
        // removed or closed.
        trials.push(model_trial(Plain(ShmFactory::default()), &[4096, 1 << 20]));
    }
    #[cfg(feature = "ucx")]
    {
        use blockwire_conformance::{Plain, UcxFactory};
        for (name, options) in UCX_SETTINGS {
            trials.push(model_trial(Plain(UcxFactory::new(name, options)), &[4096]));
        }
    }
    #[cfg(feature = "libfabric")]
    {
        use blockwire_conformance::{LibfabricFactory, Plain};
        for (name, options) in LIBFABRIC_SETTINGS {
            trials.push(model_trial(
                Plain(LibfabricFactory::new(name, options)),
                &[4096],
            ));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
