//! The conformance suite on this backend's settings (`settings`), plain and with injected
//! faults: `cargo test -p blockwire-libfabric --test suite [-- FILTER]`. Cases a setting cannot run
//! are listed as ignored, with the reason.

mod settings;

fn main() {
    blockwire_conformance::suite_main(settings::settings());
}
