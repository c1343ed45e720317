//! Long random runs on this backend's settings (`settings`): proptest generates sequences of
//! operations and `blockwire_conformance::model` runs each against fresh transports, checks it
//! against its reference model, then checks that nothing leaked (backend live counts, threads,
//! fds, `/dev/shm`). `cargo test -p blockwire-shm --test model [-- FILTER]`; the knobs
//! (`BLOCKWIRE_MODEL_CASES`, `PROPTEST_RNG_SEED`, `BLOCKWIRE_MODEL_SAVE`,
//! `BLOCKWIRE_MODEL_REPLAY`, the shrink limits) are `blockwire_conformance::model::random`'s.

use blockwire_conformance::Plain;
use blockwire_conformance::model::random;

mod settings;

fn main() {
    // 1 MiB blocks now and then, so transfers are really in flight when cancelled, removed
    // or closed.
    random::main(
        settings::settings().into_iter().map(Plain),
        &[4096, 1 << 20],
    );
}
