//! Cross-process testing: a peer process ([`serve`], the `blockwire-peer` binary) and the
//! driver a test runs against it ([`drive`], [`SpawnedPeer`]).
//!
//! The peer opens a transport (`blockwire-peer <backend> <num_blocks> <block_len> <seed>
//! [backend options k=v,...]`), fills its blocks with `pattern(seed, i)`, prints its
//! descriptor ([`Reply::Descriptor`]), then answers [`Request`]s: one JSON value per line on
//! its stdin, one JSON [`Reply`] per line on its stdout, until [`Request::Quit`]. Any error is
//! [`Reply::Err`] and exit status 1.
//!
//! ```
//! use blockwire_conformance::peer::{Request, Reply};
//! use blockwire::Op;
//! let post = Request::Post { op: Op::Read, name: "parent".into(), pairs: vec![(1, 2)] };
//! assert_eq!(post.to_line(), r#"{"Post":{"op":"Read","name":"parent","pairs":[[1,2]]}}"#);
//! assert_eq!(Reply::from_line(r#"{"Id":{"id":5}}"#)?, Reply::Id { id: 5 });
//! # Ok::<(), serde_json::Error>(())
//! ```

mod protocol;
mod server;
mod spawned;

use std::process::ExitCode;

use blockwire::{BackendOptions, PeerId, Region, Transport, TransportOptions};

pub use protocol::{Pair, Reply, Request};
pub use spawned::SpawnedPeer;

use crate::support::{pattern, wait_done};

type Fallible<T> = Result<T, String>;

/// Opens a transport for the peer protocol: backend name, blocks, block length, backend
/// options (`k=v,...`).
pub type Opener = fn(&str, u32, usize, &str) -> Fallible<Box<dyn Transport>>;

/// The [`Opener`] of every backend compiled into `blockwire` ([`blockwire::open`]). One key of
/// the option list is its own, not the backend's: `region=shared` allocates the region in
/// shared memory ([`Region::new_shared`]), `region=private` (the default) with
/// [`Region::new`]. Both processes of a cross-process check get the same list.
///
/// ```
/// let t = blockwire_conformance::peer::open_any("shm", 2, 64, "").unwrap();
/// assert_eq!(t.num_blocks(), 2);
/// let t = blockwire_conformance::peer::open_any("shm", 2, 64, "region=shared").unwrap();
/// assert!(t.region().span().shared_memory().is_some());
/// assert!(blockwire_conformance::peer::open_any("shm", 2, 64, "region=elsewhere").is_err());
/// ```
pub fn open_any(
    backend: &str,
    blocks: u32,
    len: usize,
    opts: &str,
) -> Fallible<Box<dyn Transport>> {
    let mut backend_opts = BackendOptions::parse_list(opts).map_err(|e| e.to_string())?;
    let region = match backend_opts
        .take::<String>("region")
        .map_err(|e| e.to_string())?
        .as_deref()
    {
        None | Some("private") => Region::new(blocks, len),
        Some("shared") => Region::new_shared(blocks, len),
        Some(other) => return Err(format!("region={other}: expected private or shared")),
    }
    .map_err(|e| e.report())?;
    let t = blockwire::open(
        backend,
        region,
        TransportOptions::default().with_backend_options(backend_opts),
    )
    .map_err(|e| e.report())?;
    Ok(Box::new(t))
}

/// The peer process's main: `blockwire-peer <backend> <num_blocks> <block_len> <seed>
/// [backend options k=v,...]`.
///
/// ```no_run
/// // src/bin/blockwire-peer.rs
/// fn main() -> std::process::ExitCode {
///     blockwire_conformance::peer::serve()
/// }
/// ```
pub fn serve() -> ExitCode {
    serve_with(open_any)
}

/// [`serve`] with transports from `open` (a backend that must not share a process with the
/// others, like NIXL, brings its own peer binary).
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     blockwire_conformance::peer::serve_with(blockwire_conformance::peer::open_any)
/// }
/// ```
pub fn serve_with(open: Opener) -> ExitCode {
    match server::serve_inner(open) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Best effort: the driver reads this, or sees the output close.
            let _ = server::say(&Reply::Err { message });
            ExitCode::FAILURE
        }
    }
}

/// Whether this process runs as root.
///
/// ```
/// use blockwire_conformance::peer::is_root;
/// if is_root() {
///     eprintln!("root keeps access to every process: a `DropAccess` test proves nothing here");
/// }
/// ```
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Spawns a `blockwire-peer` (`exe`, its blocks holding `pattern(7, i)`), opens this side
/// with `open` (its blocks holding `pattern(1, i)`) and adds the child as peer `"child"`.
pub(crate) fn connected_child(
    open: Opener,
    exe: &str,
    backend: &str,
    opts: &str,
    blocks: u32,
    len: usize,
) -> Fallible<(SpawnedPeer, Box<dyn Transport>, PeerId)> {
    let child = SpawnedPeer::spawn(exe, backend, blocks, len, 7, opts)?;
    let me = open(backend, blocks, len, opts)?;
    for i in 0..blocks {
        me.region()
            .write_block(i, &pattern(1, i, len))
            .map_err(|e| e.report())?;
    }
    let peer = PeerId::from("child");
    me.add_remote_peer(&peer, &child.descriptor)
        .map_err(|e| format!("add_remote_peer: {}", e.report()))?;
    Ok((child, me, peer))
}

/// The cross-process check for `backend`: this process writes blocks into a spawned peer and
/// reads others back, the peer verifies every one of its blocks, then the peer writes into this
/// process. `exe` is the `blockwire-peer` binary.
///
/// ```no_run
/// fn main() -> Result<(), String> {
///     let exe = "target/debug/blockwire-peer";
///     blockwire_conformance::peer::drive(exe, "shm", "chunk_bytes=65536")
/// }
/// ```
pub fn drive(exe: &str, backend: &str, opts: &str) -> Fallible<()> {
    drive_with(open_any, exe, backend, opts)
}

/// [`drive`] with this side's transport from `open`.
///
/// ```no_run
/// use blockwire_conformance::peer::{drive_with, open_any};
/// fn main() -> Result<(), String> {
///     drive_with(open_any, "target/debug/blockwire-peer", "shm", "")
/// }
/// ```
pub fn drive_with(open: Opener, exe: &str, backend: &str, opts: &str) -> Fallible<()> {
    const BLOCKS: u32 = 32;
    const LEN: usize = 256 * 1024 + 8;
    let (mut child, me, peer) = connected_child(open, exe, backend, opts, BLOCKS, LEN)?;
    // WRITE four blocks, permuted, one of them twice to two places.
    let (local, remote) = ([0u32, 1, 2, 3, 3], [10u32, 4, 7, 0, 31]);
    let id = me
        .write_blocks(&peer, &local, &remote)
        .map_err(|e| e.report())?;
    wait_done(&*me, &peer, &[id]);
    // READ two untouched blocks of the child.
    let id = me
        .read_blocks(&peer, &[20, 21], &[5, 6])
        .map_err(|e| e.to_string())?;
    wait_done(&*me, &peer, &[id]);
    for (l, r) in [(20u32, 5u32), (21, 6)] {
        if me.region().block(l).map_err(|e| e.to_string())? != pattern(7, r, LEN) {
            return Err(format!(
                "READ: local block {l} does not hold the child's block {r}"
            ));
        }
    }
    let written = remote.iter().copied().zip(local).collect();
    child
        .expect_ok(&Request::Verify { seed: 1, written })
        .map_err(|e| format!("child after WRITE: {e}"))?;
    // The other direction: the child writes into this process.
    let desc = me.descriptor().map_err(|e| e.to_string())?;
    child
        .expect_ok(&Request::add("parent", &desc))
        .map_err(|e| format!("child ADD: {e}"))?;
    child
        .expect_ok(&Request::Write {
            name: "parent".into(),
            pairs: vec![(8, 30), (9, 29)],
        })
        .map_err(|e| format!("child WRITE: {e}"))?;
    for (l, r) in [(30u32, 8u32), (29, 9)] {
        if me.region().block(l).map_err(|e| e.to_string())? != pattern(7, r, LEN) {
            return Err(format!(
                "child WRITE: block {l} does not hold the child's block {r}"
            ));
        }
    }
    child.quit()?;
    me.close().map_err(|e| e.to_string())
}
