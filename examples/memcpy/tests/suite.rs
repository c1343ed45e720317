//! The whole conformance suite on the memcpy backend, plain and with injected faults:
//! `cargo test -p blockwire-example-memcpy --test suite [-- FILTER]`.

use blockwire_conformance::{Setting, suite_main};
use blockwire_example_memcpy::MemcpyBackend;

fn main() {
    suite_main([Setting::<MemcpyBackend>::default()]);
}
