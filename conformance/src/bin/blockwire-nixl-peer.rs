//! The cross-process peer for NIXL (`--drive` makes it the parent side, `--dead-peer` and
//! `--target-side` run those checks against children of itself): `blockwire_conformance::peer`'s protocol over a NIXL
//! transport, in a binary that never loads Debian's UCX (NIXL brings its own).

use blockwire::BackendOptions;
use blockwire::{BlockTransport, Region, Transport, TransportOptions};

/// Opens a NIXL transport (the backend name is ignored: this binary only speaks NIXL).
fn open_nixl(
    _backend: &str,
    blocks: u32,
    len: usize,
    opts: &str,
) -> Result<Box<dyn Transport>, String> {
    let region = Region::new(blocks, len).map_err(|e| e.to_string())?;
    let options = BackendOptions::parse_list(opts).map_err(|e| e.to_string())?;
    let t = BlockTransport::open_with(
        region,
        TransportOptions::default().with_backend_options(options),
        |span, o| {
            // SAFETY: the span of the region the transport owns, which outlives the backend.
            unsafe { blockwire_nixl::NixlBackend::open(span, o) }
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(Box::new(t))
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--dead-peer") {
        // Used by the test: the dead-peer check against children of this binary.
        let exe = std::env::current_exe().map(|p| p.display().to_string());
        let bound = std::time::Duration::from_secs(5);
        return match exe.and_then(|exe| {
            blockwire_conformance::dead_peer::dead_peer_with(open_nixl, &exe, "nixl", "", bound)
                .map_err(std::io::Error::other)
        }) {
            Ok(report) => {
                eprintln!("dead peer, nixl: {report:?}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dead peer, nixl: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if std::env::args().nth(1).as_deref() == Some("--target-side") {
        let exe = std::env::current_exe().map(|p| p.display().to_string());
        let bound = std::time::Duration::from_secs(10);
        return match exe.and_then(|exe| {
            blockwire_conformance::target_side::target_side_with(open_nixl, &exe, "nixl", "", bound)
                .map_err(std::io::Error::other)
        }) {
            Ok(report) => {
                eprintln!("target side, nixl: {report:?}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("target side, nixl: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if std::env::args().nth(1).as_deref() == Some("--drive") {
        // Used by the test: this process drives a child of the same binary.
        let exe = std::env::current_exe().map(|p| p.display().to_string());
        return match exe.and_then(|exe| {
            blockwire_conformance::peer::drive_with(open_nixl, &exe, "nixl", "")
                .map_err(std::io::Error::other)
        }) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cross-process nixl: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    blockwire_conformance::peer::serve_with(open_nixl)
}
