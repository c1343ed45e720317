//! A peer process for cross-process tests: see `blockwire_conformance::peer`.

fn main() -> std::process::ExitCode {
    blockwire_conformance::peer::serve()
}
