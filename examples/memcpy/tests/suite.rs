//! The whole conformance suite on the memcpy backend, plain and with injected faults.

use blockwire_conformance::{Setting, run, suite};
use blockwire_example_memcpy::MemcpyBackend;

fn main() {
    run(
        libtest_mimic::Arguments::from_args(),
        suite(Setting::<MemcpyBackend>::default()),
    );
}
