//! The target's side: once a transport's close returns, no peer's WRITE lands in its region
//! and no peer's READ reads it; a peer transport that goes away never crashes this one.
//!
//! The target is closed but kept (not dropped), so its memory stays mapped and is checked
//! against a canary pattern written right after close returned: any byte a peer moves after
//! close shows. The initiator's transfers must surface within its stall bound, as failed (or
//! refused at submission), and no post may hold the caller.

use std::time::{Duration, Instant};

use blockwire::{Error, FailureReason, Op, PeerId, TransferId, Transport};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Outcomes, check_blocks, connect, fill_all, open, pattern, settle, wait_for};

/// The initiator's stall timeout in these cases: transfers to a closed target that the
/// library never ends are cut after it. Real time, not a `ManualClock`: these cases check
/// that no byte lands after close, which takes the real time a late byte would need, and what
/// ends each transfer (the backend noticing, or the watchdog) is the backend's own timing.
const STALL: Duration = Duration::from_secs(2);
/// How long the initiator's transfers may take to surface: the stall timeout, plus margin.
const BOUND: Duration = Duration::from_secs(10);
/// No post may hold the caller this long (a retry loop on a peer that went away did, 3 s).
const POST_LIMIT: Duration = Duration::from_secs(1);
/// The canary's seed.
const CANARY: u8 = 0xCA;

/// Times one post; fails the case if it held the caller.
fn timed<T>(what: &str, longest: &mut Duration, post: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = post();
    let took = started.elapsed();
    *longest = (*longest).max(took);
    assert!(took < POST_LIMIT, "{what} held the caller for {took:?}");
    out
}

/// Posts `op` of every block to `peer`, `times` times; returns the ids of those accepted. A
/// refusal must say the peer is gone.
fn post_all<T: Transport>(
    a: &T,
    peer: &PeerId,
    op: Op,
    blocks: u32,
    times: usize,
    longest: &mut Duration,
) -> Vec<TransferId> {
    let list: Vec<u32> = (0..blocks).collect();
    let mut ids = Vec::new();
    for _ in 0..times {
        let tracked = a.in_flight(Some(peer));
        let posted = timed(&format!("{op} to a closed target"), longest, || match op {
            Op::Write => a.write_blocks(peer, &list, &list),
            Op::Read => a.read_blocks(peer, &list, &list),
        });
        match posted {
            Ok(id) => ids.push(id),
            Err(e) => {
                assert!(gone(&e), "{op} to a closed target refused with {e:?}");
                assert_eq!(
                    a.in_flight(Some(peer)),
                    tracked,
                    "a refused post is tracked"
                );
            }
        }
    }
    ids
}

/// How the transport words a post the backend refused on its posting thread.
const POST_FAILED: &str = "posting it failed";

/// A refusal by the backend (which should say the peer is gone, but nixl-sys cannot: it
/// reports every NIXL error alike) or by the transport (the peer is faulted).
fn gone(e: &Error) -> bool {
    matches!(e, Error::PeerFaulted { .. } | Error::Submit { .. })
}

/// Waits for `ids` (bounded by [`BOUND`]); each must have failed unless `may_finish` (posted
/// before the target closed).
fn surfaced<T: Transport>(a: &T, peer: &PeerId, ids: &[TransferId], may_finish: bool) -> Outcomes {
    let started = Instant::now();
    let seen = wait_for(a, Some(peer), ids);
    let took = started.elapsed();
    assert!(took < BOUND, "the transfers took {took:?} to surface");
    for (id, outcome) in &seen {
        match outcome {
            Ok(()) => assert!(may_finish, "transfer {id} to a closed target reported done"),
            Err(FailureReason::RemoteDisconnect(_)) => {}
            // nixl-sys reports every NIXL error as a failed state check: it cannot say the
            // peer is gone (which the check faults the peer for all the same).
            Err(FailureReason::StateCheck(_)) => {}
            // Refused by the backend on the transport's posting thread (`posts_in_caller`):
            // the deferred form of the refusal `gone` accepts at submit.
            Err(FailureReason::Backend(m)) if m.starts_with(POST_FAILED) => {}
            Err(other) => panic!("transfer {id}: {other:?}, expected a remote disconnect"),
        }
    }
    seen
}

fn pair_with_stall<F: Fixture>(fx: &F, spec: &Spec) -> (F::Transport, F::Transport, PeerId) {
    let a = open(fx, &spec.clone().with_stall_timeout(Some(STALL))).transport;
    let b = open(fx, spec).transport;
    let peer = connect(&a, "b", &b);
    (a, b, peer)
}

/// `op`s posted after the target closed: refused or failed, and its canary intact; a READ
/// brings none of it back.
fn after_close<F: Fixture>(fx: &F, op: Op) {
    let spec = Spec::new(8, 64 * 1024);
    let (a, b, peer) = pair_with_stall(fx, &spec);
    fill_all(&a, 1);
    b.close().expect("close the target");
    fill_all(&b, CANARY);
    let mut longest = Duration::ZERO;
    let ids = post_all(&a, &peer, op, 8, 2, &mut longest);
    surfaced(&a, &peer, &ids, false);
    settle();
    check_blocks(&b, "the closed target", |i| pattern(CANARY, i, 64 * 1024));
    for i in 0..8 {
        assert!(
            a.region().block(i).expect("block") != pattern(CANARY, i, 64 * 1024),
            "block {i} of the closed target was read after its close"
        );
    }
    eprintln!("{op} after the target's close: longest post {longest:?}");
}

/// A WRITE posted after the target closed lands nothing: it is refused or fails.
///
/// Rules: R-CLOSE-REVOKE, R-POST-NO-WAIT.
pub(crate) fn write_after_close<F: Fixture>(fx: &F) {
    after_close(fx, Op::Write);
}

/// A READ posted after the target closed reads nothing of its memory.
///
/// Rules: R-CLOSE-REVOKE, R-POST-NO-WAIT.
pub(crate) fn read_after_close<F: Fixture>(fx: &F) {
    after_close(fx, Op::Read);
}

/// The target closes while large WRITEs (and READs) to it run: from the moment close
/// returns, nothing lands in its memory (nor is read from it); every transfer surfaces within
/// the initiator's stall bound, done (finished before) or failed as a remote disconnect.
///
/// Rules: R-CLOSE-REVOKE, R-POST-NO-WAIT.
pub(crate) fn close_during_long_transfers<F: Fixture>(fx: &F) {
    for op in [Op::Write, Op::Read] {
        let needs_read = op == Op::Read;
        let n = 16u32;
        let spec = Spec::new(n, 1 << 20);
        let (a, b, peer) = pair_with_stall(fx, &spec);
        if needs_read && !a.capabilities().read {
            continue;
        }
        fill_all(&a, 1);
        fill_all(&b, 2);
        let mut longest = Duration::ZERO;
        let list: Vec<u32> = (0..n).collect();
        let ids: Vec<TransferId> = (0..4)
            .map(|_| {
                timed("a post", &mut longest, || match op {
                    Op::Write => a.write_blocks(&peer, &list, &list),
                    Op::Read => a.read_blocks(&peer, &list, &list),
                })
                .expect("post")
            })
            .collect();
        b.close().expect("close the target");
        fill_all(&b, CANARY);
        let seen = surfaced(&a, &peer, &ids, true);
        settle();
        check_blocks(&b, &format!("the target closed during {op}s"), |i| {
            pattern(CANARY, i, 1 << 20)
        });
        if op == Op::Read {
            for i in 0..n {
                assert!(
                    a.region().block(i).expect("block") != pattern(CANARY, i, 1 << 20),
                    "block {i} was read from the target after its close"
                );
            }
        }
        let failed = seen.values().filter(|o| o.is_err()).count();
        eprintln!(
            "target closed during {op}s: {failed} of {} failed, longest post {longest:?}",
            ids.len()
        );
    }
}

/// A peer transport dropped (closed and freed) before the initiator posts to it, and while
/// large transfers to it run: no crash, every transfer refused or failed as a remote
/// disconnect within the stall bound, and the initiator stays usable for other peers. (A
/// backend that can neither revoke nor detect a disconnect, UCX over shared memory it
/// allocated, may report a transfer after the drop done: it landed in memory the gone peer
/// no longer maps.)
///
/// Rules: R-CLOSE-REVOKE, R-FAIL-BOUNDED, R-POST-NO-WAIT.
pub(crate) fn dropped_before_and_during_transfers<F: Fixture>(fx: &F) {
    let (read, undetected) = {
        let caps = open(fx, &Spec::new(1, 64)).transport.capabilities();
        (caps.read, !caps.revoke && !caps.remote_disconnect)
    };
    let ops: &[Op] = if read {
        &[Op::Write, Op::Read]
    } else {
        &[Op::Write]
    };
    let mut longest = Duration::ZERO;
    for &op in ops {
        // Before.
        let spec = Spec::new(8, 64 * 1024);
        let (a, b, peer) = pair_with_stall(fx, &spec);
        drop(b);
        let ids = post_all(&a, &peer, op, 8, 3, &mut longest);
        surfaced(&a, &peer, &ids, undetected);
        // During.
        let spec = Spec::new(16, 1 << 20);
        let (a2, b, peer) = pair_with_stall(fx, &spec);
        let ids = post_all(&a2, &peer, op, 16, 4, &mut longest);
        drop(b);
        let more = post_all(&a2, &peer, op, 16, 2, &mut longest);
        let all: Vec<TransferId> = ids.iter().chain(&more).copied().collect();
        let seen = surfaced(&a2, &peer, &all, true);
        for id in more.iter().filter(|_| !undetected) {
            assert!(
                seen[id].is_err(),
                "{op} {id} posted after the drop reported done"
            );
        }
        // The initiators still work with a live peer.
        for (t, spec) in [(&a, Spec::new(8, 64 * 1024)), (&a2, Spec::new(16, 1 << 20))] {
            let c = open(fx, &spec).transport;
            let pc = connect(t, "c", &c);
            let id = t
                .write_blocks(&pc, &[0], &[0])
                .expect("write to a live peer");
            let seen = wait_for(t, Some(&pc), &[id]);
            assert!(seen[&id].is_ok(), "{seen:?}");
        }
    }
    eprintln!("peer dropped before and during transfers: longest post {longest:?}");
}
