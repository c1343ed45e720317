//! A peer's descriptor of a closed transport whose TCP port a new transport took.
//!
//! Over TCP, UCX 1.13 emulates puts with active messages that the target's worker serves by
//! copying to the address the message names, whatever registration it was packed for, and its
//! wireup connects to whichever worker now listens at the address the descriptor names. So,
//! before the backend's connect checked the worker's identity (`notify::hello`), a WRITE
//! through such a descriptor was copied by the new transport's worker to the closed
//! transport's region address, here memory the caller still holds, and reported done (this
//! test's outcome then: `state: Some(Done), landed_closed: 2048`). Now the new worker answers
//! the check "not me" and connect fails: nothing lands. (A target with `progress=caller` is
//! not checked, as it answers only when polled; not tested here, where nobody polls the new
//! target, so its worker would not serve the WRITE anyway.) `UCX_TCP_PORT_RANGE` makes the new
//! worker take the old one's port; set in this test binary only, as it is read at each open.

use std::sync::Mutex;
use std::time::Duration;

use blockwire_conformance::stale::{Role, stale_write};
use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
use blockwire_ucx::UcxBackend;

/// Serializes the tests: each sets `UCX_TCP_PORT_RANGE` before each open.
static PORTS: Mutex<()> = Mutex::new(());

/// Opens a backend of the check, the initiator with `progress=initiator_progress`; `test`
/// picks the test's two ports.
fn open(role: Role, span: RegionSpan, test: u16, initiator_progress: &str) -> UcxBackend {
    let base = 47_000 + (std::process::id() % 500) as u16 * 4 + test * 2;
    // The closed target and the new one on one port, the initiator on another.
    let port = if role == Role::Initiator {
        base
    } else {
        base + 1
    };
    // SAFETY: this test binary's tests set it only while they hold `PORTS`, with no other
    // thread of theirs reading the environment meanwhile (UCX reads it in `open`, on this
    // thread).
    unsafe { std::env::set_var("UCX_TCP_PORT_RANGE", format!("{port}-{port}")) };
    let mut options = BackendOptions::new().with("tls", "tcp");
    if role == Role::Initiator {
        options = options.with("progress", initiator_progress);
    }
    // SAFETY: `stale_write` keeps the span's memory allocated until the backend is dropped.
    unsafe { UcxBackend::open(span, options) }.expect("open")
}

/// Runs the check with the initiator on `progress=initiator_progress`: connect must refuse
/// the stale descriptor, and nothing may land.
fn refused(test: u16, initiator_progress: &str) {
    let _one = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let open = |role: Role, span: RegionSpan| open(role, span, test, initiator_progress);
    let outcome = stale_write(open, |desc, _| desc, Duration::from_secs(5));
    assert!(outcome.moved_nothing(), "{outcome:?}");
    assert_eq!(outcome.state, None, "connect refuses it: {outcome:?}");
}

#[test]
fn a_stale_descriptor_at_a_reused_port_moves_nothing() {
    refused(0, "thread");
}

/// An initiator without a progress thread progresses its worker itself while it waits for
/// the answer (its state checks would otherwise serve nothing before the connect returns).
#[test]
fn a_caller_progressed_initiator_refuses_it_too() {
    refused(1, "caller");
}
