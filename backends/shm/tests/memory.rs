//! Resident memory stays flat over many one-block transfers on this backend's settings
//! (`settings`): see `blockwire_conformance::memory`. 100,000 transfers per setting after a
//! warm-up by default; `BLOCKWIRE_MEMORY_TRANSFERS=1000000` (CI) runs more. The settings run
//! one after another: each measures the whole process.

use blockwire_conformance::{Plain, memory};

mod settings;

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = Some(1);
    let trials = settings::settings()
        .into_iter()
        .map(|s| memory::trial(Plain(s)))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
