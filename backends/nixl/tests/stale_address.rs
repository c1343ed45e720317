//! A peer's descriptor of a closed transport whose TCP port a new transport took.
//!
//! Known bug, not fixed, as in the ucx backend (`backends/ucx/tests/stale_address.rs`): over
//! TCP, NIXL's UCX plugin connects to whichever worker now listens at the address the agent
//! metadata names, and UCX emulates puts with active messages that the worker serves by
//! copying to the address the message names. A WRITE through such a descriptor is copied by
//! the new transport's worker to the closed transport's region address: here, memory the
//! caller still holds, so the bytes land there and the WRITE is reported done. With no
//! worker at the port, the connect fails (checked by hand). `UCX_TLS=tcp` and
//! `UCX_TCP_PORT_RANGE` (read at each open) make the new worker take the old one's port; in
//! this test binary alone. Run it with `--ignored`.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire_core::{
    Backend, BackendOptions, Op, OpenBackend, PeerDescriptor, RegionSpan, XferState,
};
use blockwire_nixl::NixlBackend;

const BLOCK: usize = 1024;

fn open_on(port: u16, mem: &mut [u8]) -> NixlBackend {
    // SAFETY: this test binary's one test sets them, with no other thread of its own reading
    // the environment meanwhile (UCX reads it when an agent opens, on this thread).
    unsafe {
        std::env::set_var("UCX_TLS", "tcp");
        std::env::set_var("UCX_TCP_PORT_RANGE", format!("{port}-{port}"));
    }
    let span =
        RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("mem"), 4, BLOCK).expect("span");
    // SAFETY: `mem` outlives the backend: every backend is dropped before its memory.
    unsafe { NixlBackend::open(span, BackendOptions::new()) }.expect("open")
}

#[test]
#[ignore = "known bug: a stale descriptor's WRITE is copied by the worker that took its port (see the file's docs)"]
fn a_stale_descriptor_at_a_reused_port_moves_nothing() {
    let mut a = vec![7u8; 4 * BLOCK];
    let mut old = vec![0u8; 4 * BLOCK];
    let mut new = vec![0u8; 4 * BLOCK];
    let base = 48_000 + (std::process::id() % 900) as u16 * 2;
    let ba = open_on(base, &mut a);
    let b_old = open_on(base + 1, &mut old);
    let stale = PeerDescriptor::new(
        "nixl",
        b_old.address(),
        old.as_ptr() as u64,
        4,
        BLOCK as u64,
        "",
    );
    drop(b_old);
    let b_new = open_on(base + 1, &mut new);
    let state = match ba.connect(&stale) {
        Err(_) => None,
        Ok(peer) => {
            let state = match ba.post(&peer, Op::Write, &[0, 2], &[1, 3]) {
                Err(_) => None,
                Ok(mut x) => {
                    let started = Instant::now();
                    let state = loop {
                        let state = ba.state(&mut x);
                        if state != XferState::Running || started.elapsed() > Duration::from_secs(5)
                        {
                            break state;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    };
                    let _ = ba.release(x);
                    Some(state)
                }
            };
            ba.disconnect(peer);
            state
        }
    };
    drop((ba, b_new));
    let landed = |v: &[u8]| v.iter().filter(|&&b| b != 0).count();
    assert_eq!(
        (landed(&old), landed(&new)),
        (0, 0),
        "bytes landed (closed region, new region); the WRITE ended {state:?}"
    );
    assert_ne!(
        state,
        Some(XferState::Done),
        "a stale descriptor's WRITE reported done"
    );
}
