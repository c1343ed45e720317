//! Long random runs: proptest generates sequences of operations (add, add-async, remove, write,
//! read, invalid transfers, poll, cancel, drain, close) and `blockwire_conformance::model` runs
//! each against fresh transports and checks it against its reference model, then checks that
//! nothing leaked (backend live counts, threads, fds, `/dev/shm`). One proptest per fixture
//! compiled in: `shm`, `ucx-tcp` and `ucx-shm` (feature `ucx`), `libfabric-tcp` and
//! `libfabric-shm` (feature `libfabric`). Nixl runs in its own process:
//! `cargo test -p blockwire-nixl --test nixl_model`.
//!
//! `cargo test -p blockwire-conformance --features ucx,libfabric --test model [-- FILTER]`.
//! The strategies, the trial and its knobs (`BLOCKWIRE_MODEL_CASES`, `PROPTEST_RNG_SEED`,
//! `BLOCKWIRE_MODEL_SAVE`, `BLOCKWIRE_MODEL_REPLAY`, the shrink limits) are
//! `blockwire_conformance::model::random`'s; this file only lists the fixtures.

use blockwire_conformance::model::random;

// Contract violations this test found, fixed since:
// `cancel(&[id, id], Wait)` could return an id as running and then release it (never reported);
// `poll(None)` was not in id order; libfabric 1.17's shm provider crashed (SIGSEGV in
// `fi_cq_read`, SIGFPE in `fi_av_insert`) or lost writes once an address-vector entry had been
// removed.

#[cfg(feature = "ucx")]
const UCX_SETTINGS: [(&str, &str); 2] = [
    ("tcp", "tls=tcp"),
    ("shm", "tls=posix,cma,peer_errors=false"),
];

#[cfg(feature = "libfabric")]
const LIBFABRIC_SETTINGS: [(&str, &str); 2] =
    [("tcp", "provider=tcp,domain=lo"), ("shm", "provider=shm")];

fn main() {
    #[allow(unused_mut)]
    let mut trials = Vec::new();
    #[cfg(feature = "shm")]
    {
        use blockwire_conformance::{Plain, ShmFactory};
        // 1 MiB blocks now and then, so transfers are really in flight when cancelled,
        // removed or closed.
        trials.push(random::trial(
            Plain(ShmFactory::default()),
            &[4096, 1 << 20],
        ));
    }
    #[cfg(feature = "ucx")]
    {
        use blockwire_conformance::{Plain, UcxFactory};
        for (name, options) in UCX_SETTINGS {
            trials.push(random::trial(
                Plain(UcxFactory::new(name, options)),
                &[4096],
            ));
        }
    }
    #[cfg(feature = "libfabric")]
    {
        use blockwire_conformance::{LibfabricFactory, Plain};
        for (name, options) in LIBFABRIC_SETTINGS {
            trials.push(random::trial(
                Plain(LibfabricFactory::new(name, options)),
                &[4096],
            ));
        }
    }
    random::run_trials(trials).exit();
}
