//! Resident memory stays flat over many one-block transfers on this backend's settings
//! (`settings`): see `blockwire_conformance::memory`. 100,000 transfers per setting after a
//! warm-up by default; `BLOCKWIRE_MEMORY_TRANSFERS=1000000` (CI) runs more. Then open file
//! descriptors and resident memory stay flat over cycles of adding, using and removing the same
//! live peer (`blockwire_conformance::churn`: 500, `BLOCKWIRE_CHURN_CYCLES` sets it). The trials
//! run one after another: each measures the whole process.

use blockwire_conformance::{Plain, memory};

mod settings;

fn main() {
    memory::main(settings::settings().into_iter().map(Plain));
}
