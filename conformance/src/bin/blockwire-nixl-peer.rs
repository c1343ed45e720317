//! The cross-process peer for NIXL (`--drive` makes it the parent side, `--dead-peer`,
//! `--target-side`, `--notifications` and `--stopped-peer` run those checks against children
//! of itself): `blockwire_conformance::peer`'s protocol over a NIXL
//! transport, in a binary that never loads Debian's UCX (NIXL brings its own).

use std::time::Duration;

use blockwire::BackendOptions;
use blockwire::{BlockTransport, Region, Transport, TransportOptions};
use blockwire_conformance::peer::Opener;

/// Opens a NIXL transport (the backend name is ignored: this binary only speaks NIXL).
fn open_nixl(
    _backend: &str,
    blocks: u32,
    len: usize,
    opts: &str,
) -> Result<Box<dyn Transport>, String> {
    let region = Region::new(blocks, len).map_err(|e| e.to_string())?;
    let options = BackendOptions::parse_list(opts).map_err(|e| e.to_string())?;
    let t = BlockTransport::<blockwire_nixl::NixlBackend>::open(
        region,
        TransportOptions::default().with_backend_options(options),
    )
    .map_err(|e| e.report())?;
    Ok(Box::new(t))
}

/// Runs `check` (this process drives children of its own binary) and reports it.
fn run(name: &str, check: impl FnOnce(&str) -> Result<String, String>) -> std::process::ExitCode {
    let outcome = std::env::current_exe()
        .map_err(|e| e.to_string())
        .and_then(|exe| check(&exe.display().to_string()));
    match outcome {
        Ok(report) => {
            eprintln!("{name}, nixl: {report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}, nixl: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// How long a killed peer's transfers may take to surface (NIXL notices within milliseconds).
const DEAD_PEER_BOUND: Duration = Duration::from_secs(5);
/// How long transfers to a closed target may take to surface, and an add of a stopped peer.
const TARGET_SIDE_BOUND: Duration = Duration::from_secs(10);

/// Runs one of the checks against children of this binary (a transport from `open_nixl`
/// here), with `bound`, and reports it.
fn check<R: std::fmt::Debug>(
    name: &str,
    with: fn(Opener, &str, &str, &str, Duration) -> Result<R, String>,
    bound: Duration,
) -> std::process::ExitCode {
    run(name, |exe| {
        with(open_nixl, exe, "nixl", "", bound).map(|r| format!("{r:?}"))
    })
}

fn main() -> std::process::ExitCode {
    use blockwire_conformance::{dead_peer, notify_across, stopped_peer, target_side};
    match std::env::args().nth(1).as_deref() {
        // Used by the tests: the checks against children of this binary.
        Some("--dead-peer") => check("dead peer", dead_peer::dead_peer_with, DEAD_PEER_BOUND),
        Some("--target-side") => check(
            "target side",
            target_side::target_side_with,
            TARGET_SIDE_BOUND,
        ),
        Some("--notifications") => check(
            "notifications",
            notify_across::notifications_with,
            DEAD_PEER_BOUND,
        ),
        Some("--stopped-peer") => check(
            "stopped peer",
            stopped_peer::stopped_peer_with,
            TARGET_SIDE_BOUND,
        ),
        Some("--drive") => run("cross-process", |exe| {
            blockwire_conformance::peer::drive_with(open_nixl, exe, "nixl", "")
                .map(|()| "ok".into())
        }),
        _ => blockwire_conformance::peer::serve_with(open_nixl),
    }
}
