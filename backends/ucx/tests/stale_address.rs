//! A peer's descriptor of a closed transport whose TCP port a new transport took.
//!
//! Known bug, not fixed: over TCP, UCX 1.13 emulates puts with active messages that the
//! target's worker serves by copying to the address the message names, whatever registration
//! it was packed for, and its wireup connects to whichever worker now listens at the address
//! the descriptor names. So a WRITE through such a descriptor is copied by the new transport's
//! worker to the closed transport's region address: here, memory the caller still holds, so the
//! bytes land there and the WRITE is reported done; in another process, into whatever that
//! process mapped at the address, or a crash where it mapped nothing. With no worker at the
//! port nothing lands and the WRITE is not done (checked by hand): the new worker serves it. A fix needs the target
//! to prove it is the registration the descriptor names before the first put (a handshake
//! the backend does not have). `UCX_TCP_PORT_RANGE` makes the new worker take the old one's
//! port; in this test binary alone, as it is read at each open. Run it with `--ignored`.

use std::ptr::NonNull;
use std::time::Duration;

use blockwire_conformance::stale::{BLOCK_LEN, BLOCKS, Role, stale_write};
use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
use blockwire_ucx::UcxBackend;

fn open(role: Role, mem: &mut [u8]) -> UcxBackend {
    // The closed target and the new one on one port, the initiator on another.
    let base = 47_000 + (std::process::id() % 1000) as u16 * 2;
    let port = if role == Role::Initiator {
        base
    } else {
        base + 1
    };
    // SAFETY: this test binary's one test sets it, with no other thread of its own reading the
    // environment meanwhile (UCX reads it in `open`, on this thread).
    unsafe { std::env::set_var("UCX_TCP_PORT_RANGE", format!("{port}-{port}")) };
    let span = RegionSpan::new(
        NonNull::new(mem.as_mut_ptr()).expect("mem"),
        BLOCKS,
        BLOCK_LEN,
    )
    .expect("span");
    let options = BackendOptions::new().with("tls", "tcp");
    // SAFETY: `stale_write` keeps `mem` allocated until the backend is dropped.
    unsafe { UcxBackend::open(span, options) }.expect("open")
}

#[test]
#[ignore = "known bug: a stale descriptor's WRITE is copied by the worker that took its port (see the file's docs)"]
fn a_stale_descriptor_at_a_reused_port_moves_nothing() {
    let outcome = stale_write(open, |desc, _| desc, Duration::from_secs(5));
    assert!(outcome.moved_nothing(), "{outcome:?}");
}
