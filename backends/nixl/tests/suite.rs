//! The conformance suite on NIXL (UCX plugin, DRAM), plain and with injected faults, in its
//! own test binary: NIXL's bundled UCX cannot share a process with Debian's (the ucx backend).
//!
//! The cases run one at a time unless `--test-threads` says otherwise: with two cases at once
//! (two pairs of NIXL agents in one process), one pair destroying an agent while transfers
//! to it ran corrupted the heap inside NIXL 1.5.1's UCX plugin in 2 of 16 runs of
//! `target::dropped_before_and_during_transfers` (a crash in `malloc` on a UCX thread). One
//! case at a time: 0 of 12 runs; the two cases in two processes at once: 0 of 20; every
//! blockwire call into NIXL under one process-wide lock did not help (2 of 16). See the crate
//! docs ("Several agents in one process").

use blockwire_conformance::Setting;
use blockwire_nixl::NixlBackend;

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads.get_or_insert(1);
    let trials = blockwire_conformance::suite(Setting::<NixlBackend>::default());
    blockwire_conformance::run(args, trials);
}
