//! The UCX transport settings that the backend's shared tests (suite, model, memory) run: TCP,
//! and shared memory. UCX 1.13's shared-memory transports cannot detect a peer's failure, so
//! they run without peer error handling.

use blockwire_conformance::Setting;
use blockwire_ucx::UcxBackend;

/// `ucx-tcp` and `ucx-shm`.
pub fn settings() -> Vec<Setting<UcxBackend>> {
    vec![
        Setting::new("tcp", "tls=tcp"),
        Setting::new("shm", "tls=posix,cma,peer_errors=false"),
    ]
}
