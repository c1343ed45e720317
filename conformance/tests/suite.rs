//! The conformance suite against every backend compiled in, plain and with injected faults.
//!
//! `cargo test -p blockwire-conformance --test suite` (filters work as usual:
//! `-- shm+faults::cancel`). Cases a fixture cannot run are listed as ignored, with the reason.

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let args = libtest_mimic::Arguments::from_args();
    #[allow(unused_mut)]
    let mut trials = Vec::new();
    #[cfg(feature = "shm")]
    {
        use blockwire_conformance::{Faulty, Plain, ShmFactory, trials as suite};
        trials.extend(suite(Plain(ShmFactory::default())));
        trials.extend(suite(Faulty(ShmFactory::default())));
    }
    libtest_mimic::run(&args, trials).exit();
}
