//! The dead-peer check: a peer process is killed with `SIGKILL` while large transfers to it and
//! from it are in flight. Every one of them must surface (failed, as a remote disconnect where
//! the backend detects one) within a bound; cancel-wait must drain; another peer's transfers
//! must be unaffected; the peer, restarted with a new descriptor, can be added again and
//! written to; and once every transport that knew the dead peer has closed, no file in
//! `/dev/shm` that it mapped or held is left (libfabric's `shm` provider keeps its endpoints' regions
//! there: a killed process's stay until its peers or the next transport to open remove them).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blockwire::{CancelMode, FailureReason, PeerId, TransferId, Transport};

use crate::peer::{Opener, Request, SpawnedPeer};
use crate::support::pattern;

type Fallible<T> = Result<T, String>;

/// What one dead-peer run observed.
#[derive(Debug, Clone, Default)]
pub struct DeadPeerReport {
    /// Transfers to or from the killed peer posted before the kill (some may have finished).
    pub in_flight_at_kill: usize,
    /// Of those, how many failed with a remote disconnect.
    pub disconnects: usize,
    /// Of those, how many completed anyway (their bytes had left before the kill). The half
    /// drained by cancel-wait is counted in none of these.
    pub done: usize,
    /// Of those, how many failed for another reason.
    pub other_failures: usize,
    /// From the kill to the last of them surfacing (through poll or cancel-wait).
    pub surfaced_after: Duration,
    /// Whether a post to the dead peer after the kill was refused (rather than accepted).
    pub post_after_kill_refused: bool,
    /// Transfers to the healthy peer that failed (as a remote disconnect, at the stall
    /// timeout): always 0 where the backend isolates peers
    /// ([`blockwire::Capabilities::isolates_peers`]); elsewhere the kill may have stopped the
    /// whole transport, which the check then reopens to reach the restarted peer.
    pub healthy_failed: usize,
    /// The files in `/dev/shm` the peer mapped or held open when it was killed (its own, and
    /// its peers'; nixl's published close fence),
    /// every one of which must be gone at the end (see [`crate::dev_shm::left_behind`]).
    pub victim_shm_files: usize,
}

const BLOCKS: u32 = 32;
const LEN: usize = 1 << 20;
/// Blocks per transfer: 8 MiB each.
const BATCH: u32 = 8;

/// A transport from `open` whose blocks hold pattern seed 1.
fn open_patterned(open: Opener, backend: &str, opts: &str) -> Fallible<Box<dyn Transport>> {
    let me = open(backend, BLOCKS, LEN, opts)?;
    for i in 0..BLOCKS {
        me.region()
            .write_block(i, &pattern(1, i, LEN))
            .map_err(|e| e.report())?;
    }
    Ok(me)
}

fn range(first: u32) -> Vec<u32> {
    (first..first + BATCH).collect()
}

/// Runs the dead-peer check for `backend` with transports from `open` and peers from `exe`
/// (a binary serving [`crate::peer`]'s protocol). `bound` is how long the killed peer's
/// transfers may take to surface. Where the backend detects remote disconnects
/// ([`blockwire::Capabilities::remote_disconnect`]), each must fail as one (or have completed
/// before the kill) and at least one must have failed; elsewhere each must merely surface.
/// Where the backend isolates peers ([`blockwire::Capabilities::isolates_peers`]) the
/// healthy peer's transfers must all succeed; elsewhere they may fail, as a remote disconnect
/// within the bound (none hangs), and the restarted peer is then reached from a transport
/// opened again.
///
/// ```no_run
/// use blockwire_conformance::{dead_peer::dead_peer_with, peer::open_any};
/// fn main() -> Result<(), String> {
///     let r = dead_peer_with(open_any, "target/debug/blockwire-peer", "shm", "",
///                            std::time::Duration::from_secs(5))?;
///     assert!(r.surfaced_after < std::time::Duration::from_secs(5));
///     Ok(())
/// }
/// ```
pub fn dead_peer_with(
    open: Opener,
    exe: &str,
    backend: &str,
    opts: &str,
    bound: Duration,
) -> Fallible<DeadPeerReport> {
    let err = |e: blockwire::Error| e.report();
    let me = open_patterned(open, backend, opts)?;
    let detects = me.capabilities().remote_disconnect;
    let isolates = me.capabilities().isolates_peers;
    let mut victim = SpawnedPeer::spawn(exe, backend, BLOCKS, LEN, 2, opts)?;
    let mut healthy = SpawnedPeer::spawn(exe, backend, BLOCKS, LEN, 3, opts)?;
    let (v, h) = (PeerId::from("victim"), PeerId::from("healthy"));
    me.add_remote_peer(&v, &victim.descriptor).map_err(err)?;
    me.add_remote_peer(&h, &healthy.descriptor).map_err(err)?;

    // Local blocks 0..8 are written to the victim, 8..16 read from it, 16..24 written to the
    // healthy peer (its blocks 0..8).
    let mut to_victim: Vec<TransferId> = Vec::new();
    let mut to_healthy: Vec<TransferId> = Vec::new();
    let mut outcomes: HashMap<TransferId, Result<(), FailureReason>> = HashMap::new();
    let record = |r: blockwire::PollResult, out: &mut HashMap<_, _>| -> Fallible<()> {
        for id in r.done {
            if out.insert(id, Ok(())).is_some() {
                return Err(format!("transfer {id} reported twice"));
            }
        }
        for (id, why) in r.failed {
            if out.insert(id, Err(why)).is_some() {
                return Err(format!("transfer {id} reported twice"));
            }
        }
        Ok(())
    };
    for _ in 0..4 {
        to_victim.push(me.write_blocks(&v, &range(0), &range(0)).map_err(err)?);
        to_victim.push(me.read_blocks(&v, &range(8), &range(8)).map_err(err)?);
        to_healthy.push(me.write_blocks(&h, &range(16), &range(0)).map_err(err)?);
    }
    // No poll before the kill: whatever finished meanwhile is reported as done afterwards.
    let victim_files = crate::dev_shm::mapped_or_held_by(victim.pid());
    let kill_at = Instant::now();
    victim.kill()?;

    // A post to the dead peer: refused, or accepted and then surfacing like the others.
    let mut post_after_kill_refused = false;
    let in_flight = to_victim.len();
    let mut watched = to_victim;
    match me.write_blocks(&v, &range(0), &range(0)) {
        Ok(id) => watched.push(id),
        Err(_) => post_after_kill_refused = true,
    }
    // Cancel-wait half of them, again and again, until none is left tracked: each call
    // releases those that stopped (never to be reported) and returns the rest; it must drain
    // within the bound.
    let (cancelled, polled) = watched.split_at(watched.len() / 2);
    let mut tracked = cancelled.to_vec();
    while !tracked.is_empty() {
        if kill_at.elapsed() > bound {
            return Err(format!(
                "{backend}: cancel-wait still tracks {tracked:?} {bound:?} after the peer was \
                 killed"
            ));
        }
        tracked = me.cancel(&tracked, CancelMode::Wait).map_err(err)?;
        std::thread::yield_now();
    }
    let mut last = kill_at.elapsed();
    let pending = |o: &HashMap<TransferId, _>| {
        polled
            .iter()
            .chain(to_healthy.iter())
            .any(|id| !o.contains_key(id))
    };
    while pending(&outcomes) {
        if kill_at.elapsed() > bound {
            let missing: Vec<_> = polled
                .iter()
                .chain(to_healthy.iter())
                .filter(|id| !outcomes.contains_key(id))
                .collect();
            return Err(format!(
                "{backend}: transfers {missing:?} still unreported {bound:?} after the peer \
                 was killed"
            ));
        }
        let r = me.poll(None).map_err(err)?;
        if r.done
            .iter()
            .chain(r.failed.iter().map(|(id, _)| id))
            .any(|id| watched.contains(id))
        {
            last = kill_at.elapsed();
        }
        record(r, &mut outcomes)?;
        std::thread::yield_now();
    }
    let mut report = DeadPeerReport {
        in_flight_at_kill: in_flight,
        surfaced_after: last,
        post_after_kill_refused,
        victim_shm_files: victim_files.len(),
        ..Default::default()
    };
    for id in &watched {
        if cancelled.contains(id) {
            if let Some(o) = outcomes.get(id) {
                return Err(format!(
                    "{backend}: transfer {id} was released by cancel-wait, then polled: {o:?}"
                ));
            }
            continue;
        }
        match outcomes.get(id) {
            Some(Ok(())) => report.done += 1,
            Some(Err(FailureReason::RemoteDisconnect(_))) => report.disconnects += 1,
            Some(Err(other)) => {
                report.other_failures += 1;
                if detects {
                    return Err(format!(
                        "{backend}: transfer {id} failed as {other:?}, not a remote disconnect"
                    ));
                }
            }
            None => return Err(format!("{backend}: transfer {id} never surfaced")),
        }
    }
    if detects && !polled.is_empty() && report.disconnects == 0 && report.done < polled.len() {
        return Err(format!(
            "{backend}: no transfer failed as a remote disconnect: {report:?}"
        ));
    }
    // The healthy peer is unaffected, every write landed; or, where the backend does not
    // isolate peers, its transfers may have failed as a remote disconnect.
    for id in &to_healthy {
        if let Some(Err(why)) = outcomes.get(id) {
            if isolates || !why.is_remote_disconnect() {
                return Err(format!(
                    "{backend}: a transfer to the healthy peer failed: {why:?}"
                ));
            }
            report.healthy_failed += 1;
        }
    }
    let me = if report.healthy_failed == 0 {
        let written = (0..BATCH).map(|i| (i, 16 + i)).collect();
        healthy
            .expect_ok(&Request::Verify { seed: 1, written })
            .map_err(|e| format!("{backend}: the healthy peer after the kill: {e}"))?;
        me
    } else {
        // What the backend's documentation tells its users: reopen the transport.
        eprintln!(
            "{backend} {opts}: the kill stopped {} transfers to the healthy peer (the backend \
             does not isolate peers): reopening the transport",
            report.healthy_failed
        );
        me.close().map_err(err)?;
        drop(me);
        open_patterned(open, backend, opts)?
    };
    // The victim restarted: a new descriptor under the same name, and writes reach it.
    let mut restarted = SpawnedPeer::spawn(exe, backend, BLOCKS, LEN, 4, opts)?;
    me.add_remote_peer(&v, &restarted.descriptor)
        .map_err(|e| format!("{backend}: adding the restarted peer: {}", e.report()))?;
    let id = me.write_blocks(&v, &range(0), &range(8)).map_err(err)?;
    let deadline = Instant::now() + bound;
    loop {
        let r = me.poll(Some(&v)).map_err(err)?;
        if r.done.contains(&id) {
            break;
        }
        if let Some((_, why)) = r.failed.iter().find(|(x, _)| *x == id) {
            return Err(format!(
                "{backend}: a write to the restarted peer failed: {why:?}"
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{backend}: a write to the restarted peer did not finish"
            ));
        }
        std::thread::yield_now();
    }
    let written = (0..BATCH).map(|i| (8 + i, i)).collect();
    restarted
        .expect_ok(&Request::Verify { seed: 1, written })
        .map_err(|e| format!("{backend}: the restarted peer: {e}"))?;
    restarted.quit()?;
    healthy.quit()?;
    me.close().map_err(err)?;
    drop(me);
    // Nothing of the dead peer is left in /dev/shm: its files were removed by the transports
    // that knew it, or by the first to open (or publish a fence) after its death (the
    // restarted peer's).
    let left = crate::dev_shm::left_behind_after(&victim_files, Duration::from_secs(5));
    if !left.is_empty() {
        return Err(format!(
            "{backend}: files the killed peer mapped or held are still in /dev/shm: {left:?}"
        ));
    }
    Ok(report)
}
