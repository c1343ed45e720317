//! Resident memory stays flat over many one-block transfers, on every backend setting compiled
//! in but nixl (`cargo test -p blockwire-nixl --test nixl_memory`): see
//! `blockwire_conformance::memory`. 100,000 transfers per setting after a warm-up by default;
//! `BLOCKWIRE_MEMORY_TRANSFERS=1000000` (CI) runs more. The settings run one after another:
//! each measures the whole process.

use blockwire_conformance::memory::trial;
use libtest_mimic::Arguments;

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    #[allow(unused_mut)]
    let mut trials = Vec::new();
    #[cfg(feature = "shm")]
    trials.push(trial(blockwire_conformance::Plain(
        blockwire_conformance::ShmFactory::default(),
    )));
    #[cfg(feature = "ucx")]
    for (name, options) in [
        ("tcp", "tls=tcp"),
        ("shm", "tls=posix,cma,peer_errors=false"),
    ] {
        trials.push(trial(blockwire_conformance::Plain(
            blockwire_conformance::UcxFactory::new(name, options),
        )));
    }
    #[cfg(feature = "libfabric")]
    for (name, options) in [("tcp", "provider=tcp,domain=lo"), ("shm", "provider=shm")] {
        trials.push(trial(blockwire_conformance::Plain(
            blockwire_conformance::LibfabricFactory::new(name, options),
        )));
    }
    libtest_mimic::run(&args, trials).exit();
}
