//! The conformance suite on NIXL, in its own test binary: NIXL's bundled UCX cannot share a
//! process with Debian's (the ucx backend), so the suite's shared binary leaves NIXL out.

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = blockwire_conformance::trials(blockwire_conformance::Plain(
        blockwire_conformance::NixlFactory::default(),
    ));
    trials.extend(blockwire_conformance::trials(
        blockwire_conformance::Faulty(blockwire_conformance::NixlFactory::default()),
    ));
    libtest_mimic::run(&args, trials).exit();
}
