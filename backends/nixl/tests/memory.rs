//! Resident memory stays flat over many one-block transfers on NIXL (see
//! `blockwire_conformance::memory`), in its own test binary like the suite: NIXL's bundled
//! UCX cannot share a process with Debian's. `BLOCKWIRE_MEMORY_TRANSFERS=1000000` (CI) runs
//! more than the default 100,000 after the warm-up. Then open file descriptors and resident
//! memory stay flat over cycles of adding, using and removing the same live peer
//! (`blockwire_conformance::churn`).

use blockwire_conformance::{Plain, Setting, memory};
use blockwire_nixl::NixlBackend;

fn main() {
    memory::main([Plain(Setting::<NixlBackend>::default())]);
}
