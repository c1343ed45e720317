//! Long random runs on this backend's settings (`settings`): proptest generates sequences of
//! operations and `blockwire_conformance::model` runs each against fresh transports, checks it
//! against its reference model, then checks that nothing leaked (backend live counts, threads,
//! fds, `/dev/shm`). `cargo test -p blockwire-ucx --test model [-- FILTER]`; the knobs
//! (`BLOCKWIRE_MODEL_CASES`, `PROPTEST_RNG_SEED`, `BLOCKWIRE_MODEL_SAVE`,
//! `BLOCKWIRE_MODEL_REPLAY`, the shrink limits) are `blockwire_conformance::model::random`'s.

use blockwire_conformance::Plain;
use blockwire_conformance::model::random;

mod settings;

fn main() {
    random::main(settings::settings().into_iter().map(Plain), &[4096]);
}
