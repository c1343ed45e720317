//! The libfabric providers that the backend's shared tests (suite, model, memory) run: TCP on
//! loopback through `ofi_rxm` (`tcp`) and through the TCP provider's own RDM endpoints (`net`,
//! libfabric 1.17's, for many peers), and shared memory; TCP again with the progress threads
//! spinning before they sleep (`wait_spin_us`).

use blockwire_conformance::Setting;
use blockwire_libfabric::OfiBackend;

/// `libfabric-tcp`, `libfabric-shm`, `libfabric-net` and `libfabric-tcp-spin`.
pub fn settings() -> Vec<Setting<OfiBackend>> {
    vec![
        Setting::new("tcp", "provider=tcp,domain=lo"),
        Setting::new("shm", "provider=shm"),
        Setting::new("net", "provider=net,domain=lo"),
        Setting::new("tcp-spin", "provider=tcp,domain=lo,wait_spin_us=50"),
    ]
}
