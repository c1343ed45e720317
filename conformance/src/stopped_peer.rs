//! The stopped-peer check: a peer process that does not run (stopped with `SIGSTOP`, as a hung
//! process or a paused VM: its sockets accept, nothing answers) while this one moves blocks to
//! and from it, and while this one registers it.
//!
//! Transfers posted to it must surface within a bound (done, where the backend needs nothing
//! of the peer's threads, or failed, by the stall watchdog at the latest), and a READ reported
//! failed must not land in this side's region once the peer resumes. A registration must end
//! within the bound (connected, where the backend's connect does not wait for the peer, or
//! failed as a connect error); a close while a registration of it is in flight must return
//! promptly, not wait for that registration, and resolve it; and once the peer resumes it must
//! be alive (it may have to answer what reached it meanwhile, from transports that closed)
//! and reachable from a new transport.

use std::time::{Duration, Instant};

use blockwire::{Error, FailureReason, PeerId, Transport};

use crate::peer::{Opener, Reply, Request, SpawnedPeer};
use crate::support::{Outcomes, pattern, record};

type Fallible<T> = Result<T, String>;

const BLOCKS: u32 = 8;
const LEN: usize = 64 << 10;
/// The longest a close with a registration of the stopped peer in flight may take, and a
/// registration of it to resolve once the peer was removed: less than a connect's wait for
/// an answer (ucx: 5 s), which neither may sit out. (ucx's close
/// takes about 2 s here: its teardown waits that long for the messages its worker queued for
/// the stopped peer, then leaves the worker undestroyed, never progressed again.)
pub const CLOSE_LIMIT: Duration = Duration::from_secs(3);

/// What one run observed.
#[derive(Debug, Clone)]
pub struct StoppedPeerReport {
    /// How the WRITE and the READ posted to the stopped peer ended: `Ok`, or the failure.
    pub write: Result<(), FailureReason>,
    /// See [`StoppedPeerReport::write`].
    pub read: Result<(), FailureReason>,
    /// From their post to the later of the two surfacing.
    pub surfaced_after: Duration,
    /// Whether both surfaced while the peer was stopped (the stall watchdog cut it, or they
    /// needed nothing of it); otherwise they surfaced once it resumed (a backend that cannot
    /// cut a peer: nixl).
    pub surfaced_while_stopped: bool,
    /// How long `add_remote_peer` of the stopped peer took.
    pub add_took: Duration,
    /// How it ended: `Ok`, or the error's report (a connect error).
    pub add: Result<(), String>,
    /// How long a registration of the stopped peer took to resolve once the peer was removed
    /// (`Superseded`), or `None` where it had connected before.
    pub removed_after: Option<Duration>,
    /// How long close took with a registration of the stopped peer in flight.
    pub close_took: Duration,
    /// How that registration resolved: `Ok` where it connected before the close, else the
    /// error's report (the transport closed).
    pub pending: Result<(), String>,
}

/// Runs the check for `backend` with transports from `open` and a peer from `exe` (a binary
/// serving [`crate::peer`]'s protocol). `bound` is how long transfers to the stopped peer and
/// an `add_remote_peer` of it may take; the close and the remove, at most [`CLOSE_LIMIT`].
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
    let mut report = StoppedPeerReport {
        write: Ok(()),
        read: Ok(()),
        surfaced_after: Duration::ZERO,
        surfaced_while_stopped: false,
        add_took: Duration::ZERO,
        add: Ok(()),
        removed_after: None,
        close_took: Duration::ZERO,
        pending: Ok(()),
    };
    transfers(open, backend, opts, &mut peer, bound, &mut report)
        .map_err(|e| format!("{backend} {opts:?}: {e}; {report:?}"))?;

    let me = open(backend, BLOCKS, LEN, opts)?;
    peer.stop()?;
    let stopped = registrations(me.as_ref(), &peer, bound, &mut report);
    // Resumed whatever happened, so that a failure still lets it quit.
    peer.resume()?;
    stopped.map_err(|e| format!("{backend} {opts:?}: {e}; {report:?}"))?;

    // Resumed: alive (its READ source blocks untouched), and reachable from a new transport.
    match peer.request(&Request::Holds { seed: 2 })? {
        Reply::Holds { blocks } if blocks >= (BLOCKS / 2) as usize => {}
        other => {
            return Err(format!(
                "{backend} {opts:?}: the resumed peer's own blocks: {other:?}"
            ));
        }
    }
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

/// The local blocks a READ from the stopped peer goes to (from its blocks 4..8), and the
/// blocks a WRITE to it comes from (to its blocks 0..4).
const READ_INTO: std::ops::Range<u32> = 4..8;
const WRITE_FROM: std::ops::Range<u32> = 0..4;
/// The pattern of the local READ destinations before the READ.
const CANARY: u8 = 203;

/// A WRITE and a READ posted to the peer while it is stopped: both must surface within
/// `bound`, or, where the backend cannot cut a peer (nixl), once the peer resumes; a READ
/// that failed must not land afterwards, one that is done brought the peer's blocks, and a
/// WRITE that is done is in the peer's region.
fn transfers(
    open: Opener,
    backend: &str,
    opts: &str,
    peer: &mut SpawnedPeer,
    bound: Duration,
    report: &mut StoppedPeerReport,
) -> Fallible<()> {
    let me = open(backend, BLOCKS, LEN, opts)?;
    for b in 0..BLOCKS {
        let seed = if READ_INTO.contains(&b) { CANARY } else { 1 };
        me.region()
            .write_block(b, &pattern(seed, b, LEN))
            .map_err(|e| e.report())?;
    }
    let name = PeerId::from("stopped");
    me.add_remote_peer(&name, &peer.descriptor)
        .map_err(|e| format!("adding the peer before it stopped: {}", e.report()))?;
    let from: Vec<u32> = WRITE_FROM.collect();
    let into: Vec<u32> = READ_INTO.collect();
    peer.stop()?;
    let started = Instant::now();
    let posted = me
        .write_blocks(&name, &from, &from)
        .and_then(|w| Ok((w, me.read_blocks(&name, &into, &into)?)));
    let mut seen = Outcomes::new();
    let surfaced = posted.map_err(|e| e.report()).and_then(|(w, r)| {
        surface(me.as_ref(), &name, &[w, r], bound, &mut seen).map(|all| (w, r, all))
    });
    report.surfaced_after = started.elapsed();
    peer.resume()?;
    let (write, read, all) = surfaced?;
    report.surfaced_while_stopped = all;
    // Where the backend could not cut the peer, its transfers end once it runs again.
    if !all && !surface(me.as_ref(), &name, &[write, read], bound, &mut seen)? {
        return Err(format!(
            "transfers to the stopped peer surfaced neither within {bound:?} nor within \
             {bound:?} of its resuming: {seen:?}"
        ));
    }
    report.surfaced_after = started.elapsed();
    report.write = seen[&write].clone();
    report.read = seen[&read].clone();
    // Whatever the resumed peer still sends for a failed READ has time to arrive.
    let settle = Instant::now() + Duration::from_millis(500);
    while Instant::now() < settle {
        me.poll(None).map_err(|e| e.report())?;
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut now = vec![0; LEN];
    for b in READ_INTO {
        me.region()
            .read_block(b, &mut now)
            .map_err(|e| e.report())?;
        let (expected, what) = match report.read {
            Ok(()) => (
                pattern(2, b, LEN),
                "the READ reported done did not bring the peer's",
            ),
            Err(_) => (
                pattern(CANARY, b, LEN),
                "the READ reported failed landed once the peer resumed, in",
            ),
        };
        if now != expected {
            return Err(format!("{what} block {b}"));
        }
    }
    if report.write.is_ok() {
        peer.expect_ok(&Request::Verify {
            seed: 1,
            written: from.iter().map(|&b| (b, b)).collect(),
        })
        .map_err(|e| format!("the WRITE reported done: {e}"))?;
    }
    me.close().map_err(|e| e.report())
}

/// Polls until each of `ids` is in `seen` (`true`), for at most `bound` (`false`).
fn surface(
    me: &dyn Transport,
    name: &PeerId,
    ids: &[blockwire::TransferId],
    bound: Duration,
    seen: &mut Outcomes,
) -> Fallible<bool> {
    let started = Instant::now();
    while !ids.iter().all(|id| seen.contains_key(id)) {
        if started.elapsed() > bound {
            return Ok(false);
        }
        record(seen, me.poll(Some(name)).map_err(|e| e.report())?);
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(true)
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
    // Removed while its connect waits: the registration resolves promptly.
    let removed = PeerId::from("removed");
    let pending = me.add_remote_peer_async(&removed, &peer.descriptor);
    // Long enough for the registration worker to be inside the connect.
    std::thread::sleep(Duration::from_millis(200));
    if !pending.is_finished() {
        let started = Instant::now();
        me.remove_remote_peer(&removed).map_err(|e| e.report())?;
        let resolved = pending.wait_timeout(bound).map_err(|_| {
            format!("the registration of a removed peer still pending {bound:?} after the remove")
        })?;
        let took = started.elapsed();
        report.removed_after = Some(took);
        if !matches!(resolved, Err(Error::Superseded { .. })) {
            return Err(format!("a removed registration ended as {resolved:?}"));
        }
        if took > CLOSE_LIMIT {
            return Err(format!(
                "a registration of a stopped peer took {took:?} to resolve once removed \
                 (limit {CLOSE_LIMIT:?})"
            ));
        }
    }
    let pending = me.add_remote_peer_async(&PeerId::from("stopped again"), &peer.descriptor);
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
