//! The conformance suite on the ucx backend's settings (`settings`): each plain, with injected
//! faults, and over regions UCX allocates itself (`ucx-<setting>-alloc`, the path of true
//! one-sided puts on shared memory). `cargo test -p blockwire-ucx --test suite [-- FILTER]`.
//! Cases a setting cannot run are listed as ignored, with the reason.

use blockwire::{BlockTransport, Region};
use blockwire_conformance::{BackendFactory, Fixture, Opened, Setting, Spec, trials};
use blockwire_core::{BackendOptions, Result};
use blockwire_ucx::UcxBackend;

mod settings;

/// The ucx backend over regions UCX allocates (`ucp_mem_map` ALLOCATE), named
/// `<setting>-alloc`. Without fault injection: `FaultyBackend` wraps a backend opened over the
/// transport's region, and here the backend makes the region.
struct Allocated(Setting<UcxBackend>);

impl Fixture for Allocated {
    type Transport = BlockTransport<UcxBackend>;

    fn name(&self) -> String {
        format!("{}-alloc", self.0.name())
    }

    fn open(&self, spec: &Spec) -> Result<Opened<Self::Transport>> {
        let (backend, span) =
            UcxBackend::open_allocated(spec.num_blocks, spec.block_len, self.0.options())?;
        // SAFETY: the memory belongs to the backend, which the transport drops before the
        // region; the region never frees it.
        let region = unsafe {
            Region::from_raw_parts(span.base().as_ptr(), spec.num_blocks, spec.block_len)?
        };
        let options = spec.options(BackendOptions::new());
        let transport = BlockTransport::open_with(region, options, |_, transport_options| {
            // The backend was opened before the transport made its inbox and doorbell.
            backend.adopt_transport(&transport_options);
            Ok(backend)
        })?;
        Ok(Opened {
            transport,
            faults: None,
        })
    }
}

fn main() {
    let mut all = Vec::new();
    for setting in settings::settings() {
        all.extend(trials(Allocated(setting.clone())));
        all.extend(blockwire_conformance::suite(setting));
    }
    blockwire_conformance::run(libtest_mimic::Arguments::from_args(), all);
}
