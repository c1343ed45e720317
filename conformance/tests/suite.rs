//! The conformance suite against every backend compiled in, plain and with injected faults.
//!
//! `cargo test -p blockwire-conformance --test suite` (filters work as usual:
//! `-- shm+faults::cancel`). Cases a fixture cannot run are listed as ignored, with the reason.

/// The UCX transport settings the suite runs: shared memory (UCX 1.13's shared-memory
/// transports cannot detect a peer's failure, so they run without peer error handling) and TCP.
#[cfg(feature = "ucx")]
const UCX_SETTINGS: [(&str, &str); 2] = [
    ("shm", "tls=posix,cma,peer_errors=false"),
    ("tcp", "tls=tcp"),
];

/// The libfabric providers the suite runs: shared memory, and TCP (`tcp;ofi_rxm`) on loopback.
#[cfg(feature = "libfabric")]
const LIBFABRIC_SETTINGS: [(&str, &str); 2] =
    [("shm", "provider=shm"), ("tcp", "provider=tcp,domain=lo")];

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
    #[cfg(feature = "ucx")]
    {
        use blockwire_conformance::{Faulty, Plain, UcxAllocated, UcxFactory, trials as suite};
        for (name, options) in UCX_SETTINGS {
            trials.extend(suite(Plain(UcxFactory::new(name, options))));
            trials.extend(suite(Faulty(UcxFactory::new(name, options))));
            trials.extend(suite(UcxAllocated::new(name, options)));
        }
    }
    #[cfg(feature = "libfabric")]
    {
        use blockwire_conformance::{Faulty, LibfabricFactory, Plain, trials as suite};
        for (name, options) in LIBFABRIC_SETTINGS {
            trials.extend(suite(Plain(LibfabricFactory::new(name, options))));
            trials.extend(suite(Faulty(LibfabricFactory::new(name, options))));
        }
    }
    let conclusion = libtest_mimic::run(&args, trials);
    // Every transport the cases opened is closed by now: none may leave a file behind (the
    // libfabric shm provider keeps one per endpoint in /dev/shm, named after the process).
    let pid = format!("{}:", std::process::id());
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&pid))
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        eprintln!("files left in /dev/shm by this run: {left:?}");
        std::process::exit(101);
    }
    conclusion.exit();
}
