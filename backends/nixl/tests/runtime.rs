//! The NIXL runtime: with it, the real library is loaded (not nixl-sys's stub); without it,
//! opening is a clear error, never the forwarder's abort. The runtime loads once per
//! process, so the missing-runtime case runs in a child process of this test binary.

use std::process::Command;
use std::ptr::NonNull;
use std::time::Duration;

use blockwire_conformance::idle::cores_while_asleep;
use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
use blockwire_nixl::NixlBackend;

fn open(options: BackendOptions) -> Result<NixlBackend, blockwire_core::Error> {
    let mem = Box::leak(vec![0u8; 4 * 4096].into_boxed_slice());
    let span =
        RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("non-null"), 4, 4096).expect("span");
    // SAFETY: `mem` is leaked: it outlives the backend.
    unsafe { NixlBackend::open(span, options) }
}

#[test]
fn the_real_runtime_is_loaded_not_the_stub() {
    let b = open(BackendOptions::new()).expect("the NIXL runtime must be installed");
    assert!(blockwire_nixl::runtime_loaded());
    drop(b);
}

/// Set in the child process this test runs itself in.
const CHILD: &str = "BLOCKWIRE_NIXL_CHILD";

/// Runs itself again in a fresh process (the runtime loads once per process, and other tests
/// of this binary load it), where it opens with a directory that has no runtime.
#[test]
fn a_missing_runtime_is_a_clear_error() {
    if std::env::var_os(CHILD).is_some() {
        let err = open(BackendOptions::new().with("lib_dir", "/nonexistent"))
            .err()
            .expect("opened without a runtime");
        let text = err.report();
        assert!(text.contains("setup-backends.sh"), "{text}");
        assert!(!blockwire_nixl::runtime_loaded());
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe)
        .args([
            "--exact",
            "a_missing_runtime_is_a_clear_error",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {text}");
    assert!(text.contains("1 passed"), "child did not run: {text}");
}

/// An idle agent's progress thread sleeps until its workers have an event: with NIXL's own
/// default (`pthrDelay` 0, which nixl-sys's `Agent::new` passes) it spins, a whole core per
/// agent. Over a second of idleness the process uses well under half a core. A loaded machine
/// can only make a spinning thread look idler, so noise never fails this; a spinning thread on
/// a quiet machine does.
#[test]
fn an_idle_agent_does_not_spin() {
    let b = open(BackendOptions::new()).expect("the NIXL runtime must be installed");
    let cores = cores_while_asleep(Duration::from_millis(200), Duration::from_secs(1));
    drop(b);
    assert!(cores < 0.5, "an idle agent used {cores:.2} of a core");
}
