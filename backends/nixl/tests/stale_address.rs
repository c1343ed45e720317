//! A peer's descriptor of a closed transport whose TCP port a new transport took.
//!
//! Known bug, not fixed; the ucx backend had it until its connect checked the identity of the
//! worker it reached (`backends/ucx/tests/stale_address.rs`), which needs a message NIXL's
//! plugin would answer: over TCP, NIXL's UCX plugin connects to whichever worker now listens at the address the agent
//! metadata names, and UCX emulates puts with active messages that the worker serves by
//! copying to the address the message names. A WRITE through such a descriptor is copied by
//! the new transport's worker to the closed transport's region address: here, memory the
//! caller still holds, so the bytes land there and the WRITE is reported done. With no
//! worker at the port, the connect fails (checked by hand). `UCX_TLS=tcp` and
//! `UCX_TCP_PORT_RANGE` (read at each open) make the new worker take the old one's port; in
//! this test binary alone. Run it with `--ignored`.

use std::time::Duration;

use blockwire_conformance::stale::{Role, stale_write};
use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
use blockwire_nixl::NixlBackend;

fn open(role: Role, span: RegionSpan) -> NixlBackend {
    // The closed target and the new one on one port, the initiator on another.
    let base = 50_000 + (std::process::id() % 900) as u16 * 2;
    let port = if role == Role::Initiator {
        base
    } else {
        base + 1
    };
    // SAFETY: this test binary's one test sets them, with no other thread of its own reading
    // the environment meanwhile (UCX reads it when an agent opens, on this thread).
    unsafe {
        std::env::set_var("UCX_TLS", "tcp");
        std::env::set_var("UCX_TCP_PORT_RANGE", format!("{port}-{port}"));
    }
    // SAFETY: `stale_write` keeps the span's memory allocated until the backend is dropped.
    unsafe { NixlBackend::open(span, BackendOptions::new()) }.expect("open")
}

#[test]
#[ignore = "known bug: a stale descriptor's WRITE is copied by the worker that took its port (see the file's docs)"]
fn a_stale_descriptor_at_a_reused_port_moves_nothing() {
    let outcome = stale_write(open, |desc, _| desc, Duration::from_secs(5));
    assert!(outcome.moved_nothing(), "{outcome:?}");
}
