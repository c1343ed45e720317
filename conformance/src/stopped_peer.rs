//! The stopped-peer check: a peer process that does not run (stopped with `SIGSTOP`, as a hung
//! process or a paused VM: its sockets accept, nothing answers) while this one registers it.
//!
//! A registration must end within a bound (connected, where the backend's connect does not
//! wait for the peer, or failed as a connect error); a close while a registration of it is in
//! flight must return promptly, not wait for that registration, and resolve it; and once the
//! peer resumes it must be intact (it may have to answer what reached it meanwhile, from a
//! transport that closed) and reachable from a new transport.

use std::time::{Duration, Instant};

use blockwire::{Error, PeerId, Transport};

use crate::peer::{Opener, Request, SpawnedPeer};
use crate::support::pattern;

type Fallible<T> = Result<T, String>;

const BLOCKS: u32 = 8;
const LEN: usize = 64 << 10;
/// The longest a close with a registration of the stopped peer in flight may take: less than
/// a connect's wait for an answer (ucx: 5 s), which close must not sit out. (ucx's close
/// takes about 2 s here: its teardown waits that long for the messages its worker queued for
/// the stopped peer, then leaves the worker undestroyed, never progressed again.)
pub const CLOSE_LIMIT: Duration = Duration::from_secs(3);

/// What one run observed.
#[derive(Debug, Clone)]
pub struct StoppedPeerReport {
    /// How long `add_remote_peer` of the stopped peer took.
    pub add_took: Duration,
    /// How it ended: `Ok`, or the error's report (a connect error).
    pub add: Result<(), String>,
    /// How long close took with a registration of the stopped peer in flight.
    pub close_took: Duration,
    /// How that registration resolved: `Ok` where it connected before the close, else the
    /// error's report (the transport closed).
    pub pending: Result<(), String>,
}

/// Runs the check for `backend` with transports from `open` and a peer from `exe` (a binary
/// serving [`crate::peer`]'s protocol). `bound` is how long an `add_remote_peer` of the
/// stopped peer may take; the close must take at most [`CLOSE_LIMIT`].
///
/// ```no_run
/// use std::time::Duration;
/// use blockwire_conformance::{peer::open_any, stopped_peer::stopped_peer_with};
/// fn main() -> Result<(), String> {
///     let exe = "target/debug/blockwire-peer";
///     let r = stopped_peer_with(open_any, exe, "shm", "", Duration::from_secs(10))?;
///     assert!(r.add.is_ok(), "shm's connect does not wait for the peer");
///     Ok(())
/// }
/// ```
pub fn stopped_peer_with(
    open: Opener,
    exe: &str,
    backend: &str,
    opts: &str,
    bound: Duration,
) -> Fallible<StoppedPeerReport> {
    let mut peer = SpawnedPeer::spawn(exe, backend, BLOCKS, LEN, 2, opts)?;
    let me = open(backend, BLOCKS, LEN, opts)?;
    let mut report = StoppedPeerReport {
        add_took: Duration::ZERO,
        add: Ok(()),
        close_took: Duration::ZERO,
        pending: Ok(()),
    };
    peer.stop()?;
    let stopped = registrations(me.as_ref(), &peer, bound, &mut report);
    // Resumed whatever happened, so that a failure still lets it quit.
    peer.resume()?;
    stopped.map_err(|e| format!("{backend} {opts:?}: {e}; {report:?}"))?;

    // Resumed: intact, and reachable from a new transport.
    peer.expect_ok(&Request::Verify {
        seed: 2,
        written: vec![],
    })
    .map_err(|e| format!("{backend} {opts:?}: the resumed peer: {e}"))?;
    let again = open(backend, BLOCKS, LEN, opts)?;
    let name = PeerId::from("resumed");
    again
        .add_remote_peer(&name, &peer.descriptor)
        .map_err(|e| {
            format!(
                "{backend} {opts:?}: adding the resumed peer: {}",
                e.report()
            )
        })?;
    let blocks: Vec<u32> = (0..BLOCKS).collect();
    for &b in &blocks {
        again
            .region()
            .write_block(b, &pattern(1, b, LEN))
            .map_err(|e| e.report())?;
    }
    write_done(again.as_ref(), &name, &blocks, bound)
        .map_err(|e| format!("{backend} {opts:?}: a WRITE to the resumed peer: {e}"))?;
    peer.expect_ok(&Request::Verify {
        seed: 1,
        written: blocks.iter().map(|&b| (b, b)).collect(),
    })
    .map_err(|e| format!("{backend} {opts:?}: the resumed peer after the WRITE: {e}"))?;
    again.close().map_err(|e| e.report())?;
    peer.quit()?;
    Ok(report)
}

/// While the peer is stopped: an add, bounded; then a close with a registration in flight.
fn registrations(
    me: &dyn Transport,
    peer: &SpawnedPeer,
    bound: Duration,
    report: &mut StoppedPeerReport,
) -> Fallible<()> {
    let started = Instant::now();
    let added = me.add_remote_peer(&PeerId::from("stopped"), &peer.descriptor);
    report.add_took = started.elapsed();
    report.add = added.as_ref().map_err(Error::report).cloned();
    if matches!(&added, Err(e) if !matches!(e, Error::Connect { .. })) {
        return Err("the add failed, not as a connect error".into());
    }
    if report.add_took > bound {
        return Err(format!(
            "add_remote_peer of a stopped peer took {:?} (bound {bound:?})",
            report.add_took
        ));
    }
    let pending = me.add_remote_peer_async(&PeerId::from("stopped again"), &peer.descriptor);
    // Long enough for the registration worker to be inside the connect.
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    me.close().map_err(|e| e.report())?;
    report.close_took = started.elapsed();
    let resolved = pending.wait_timeout(bound).map_err(|_| {
        format!("the registration in flight at close still pending {bound:?} after it")
    })?;
    report.pending = resolved.as_ref().map_err(Error::report).cloned();
    if report.close_took > CLOSE_LIMIT {
        return Err(format!(
            "close with a registration of a stopped peer in flight took {:?} (limit {CLOSE_LIMIT:?})",
            report.close_took
        ));
    }
    match resolved {
        Ok(()) | Err(Error::Closed) | Err(Error::Connect { .. }) => Ok(()),
        Err(e) => Err(format!(
            "the registration in flight at close ended as {}",
            e.report()
        )),
    }
}

/// WRITEs `blocks` to the same blocks of `peer` and polls until it is done, within `bound`.
fn write_done(t: &dyn Transport, peer: &PeerId, blocks: &[u32], bound: Duration) -> Fallible<()> {
    let id = t
        .write_blocks(peer, blocks, blocks)
        .map_err(|e| e.report())?;
    let deadline = Instant::now() + bound;
    loop {
        let r = t.poll(Some(peer)).map_err(|e| e.report())?;
        if r.done.contains(&id) {
            return Ok(());
        }
        if let Some((_, why)) = r.failed.iter().find(|(x, _)| *x == id) {
            return Err(format!("failed: {why:?}"));
        }
        if Instant::now() > deadline {
            return Err(format!("not done within {bound:?}"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}
