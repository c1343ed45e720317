//! What an idle transport costs: its waiting progress thread sleeps until a queue has an
//! event, and with `wait_spin_us` keeps reading its queues that long before each sleep. Its
//! own test binary: it measures the process's CPU time, which other tests running beside it
//! would add to.

use std::ptr::NonNull;
use std::time::Duration;

use blockwire_conformance::idle::cores_while_asleep;
use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
use blockwire_libfabric::OfiBackend;

/// The cores this process uses over a second while a TCP transport with `options` (beside
/// `provider=tcp,domain=lo`) is open and idle.
fn cores_while_idle(options: BackendOptions) -> f64 {
    let mut memory = vec![0u8; 4 * 4096];
    let span = RegionSpan::new(
        NonNull::new(memory.as_mut_ptr()).expect("non-null"),
        4,
        4096,
    )
    .expect("span");
    let options = options.with("provider", "tcp").with("domain", "lo");
    // SAFETY: `memory` outlives the backend, dropped before it.
    let backend = unsafe { OfiBackend::open(span, options) }.expect("open over TCP on lo");
    let cores = cores_while_asleep(Duration::from_millis(200), Duration::from_secs(1));
    drop(backend);
    cores
}

/// Idle, the waiting thread sleeps: well under half a core over a second (a loaded machine can
/// only make it look idler). With the longest spin (a second, then a sleep of at most the
/// thread's 100 ms wait) it reads its queues nearly all the time: at least 0.3 of a core more,
/// which only a machine too loaded to give one thread a third of a core would miss.
#[test]
fn an_idle_transport_sleeps_unless_told_to_spin() {
    let sleeping = cores_while_idle(BackendOptions::new());
    assert!(
        sleeping < 0.5,
        "an idle transport used {sleeping:.2} of a core"
    );
    let spinning = cores_while_idle(BackendOptions::new().with("wait_spin_us", "1000000"));
    assert!(
        spinning > sleeping + 0.3,
        "with wait_spin_us a second, an idle transport used {spinning:.2} of a core \
         ({sleeping:.2} without)"
    );
}
