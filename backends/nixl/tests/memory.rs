//! Resident memory stays flat over many one-block transfers on NIXL (see
//! `blockwire_conformance::memory`), in its own test binary like the suite: NIXL's bundled
//! UCX cannot share a process with Debian's. `BLOCKWIRE_MEMORY_TRANSFERS=1000000` (CI) runs
//! more than the default 100,000 after the warm-up.

use blockwire_conformance::{Plain, Setting, memory};
use blockwire_nixl::NixlBackend;

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = Some(1);
    libtest_mimic::run(
        &args,
        vec![memory::trial(Plain(Setting::<NixlBackend>::default()))],
    )
    .exit();
}
