//! The libfabric providers that the backend's shared tests (suite, model, memory) run: TCP
//! (`tcp;ofi_rxm`) on loopback, and shared memory.

use blockwire_conformance::Setting;
use blockwire_libfabric::OfiBackend;

/// `libfabric-tcp` and `libfabric-shm`.
pub fn settings() -> Vec<Setting<OfiBackend>> {
    vec![
        Setting::new("tcp", "provider=tcp,domain=lo"),
        Setting::new("shm", "provider=shm"),
    ]
}
