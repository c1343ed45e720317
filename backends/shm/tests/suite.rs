//! The conformance suite on this backend's settings (`settings`), plain and with injected
//! faults: `cargo test -p blockwire-shm --test suite [-- FILTER]`. Cases a setting cannot run are
//! listed as ignored, with the reason.

mod settings;

fn main() {
    let trials = settings::settings()
        .into_iter()
        .flat_map(blockwire_conformance::suite)
        .collect();
    blockwire_conformance::run(libtest_mimic::Arguments::from_args(), trials);
}
