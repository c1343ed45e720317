//! The settings of the shm backend that its shared tests (suite, model, memory) run.

use blockwire_conformance::Setting;
use blockwire_shm::ShmBackend;

/// The default setting (a copy thread per core up to four, sleeping when idle), named `shm`,
/// and `shm-spin`, whose copy threads spin 100 µs for the next transfer before they sleep
/// (`idle_spin_us`: submits then hand transfers to a spinning thread, not a sleeping one),
/// and `shm-no-assist`, whose waiting callers only sleep (`assist_bytes=0`: every transfer
/// is copied by the copy threads).
pub fn settings() -> Vec<Setting<ShmBackend>> {
    vec![
        Setting::default(),
        Setting::new("spin", "idle_spin_us=100"),
        Setting::new("no-assist", "assist_bytes=0"),
    ]
}
