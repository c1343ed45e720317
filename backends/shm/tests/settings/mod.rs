//! The settings of the shm backend that its shared tests (suite, model, memory) run.

use blockwire_conformance::Setting;
use blockwire_shm::ShmBackend;

/// The default setting (a copy thread per core up to four), named `shm`.
pub fn settings() -> Vec<Setting<ShmBackend>> {
    vec![Setting::default()]
}
