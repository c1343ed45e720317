//! Failures are terminal and bounded: never stuck, never a hang.

use std::time::{Duration, Instant};

use blockwire::{
    BackendErrorKind, CancelMode, Error, FailureReason, ManualClock, PeerFault, TransferId,
    Transport,
};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{
    Outcomes, Pair, connect, eventually, pair, poll_for, record, wait_done, wait_for,
};

/// Real time a backend gets, once a write's bytes landed, to see it complete (the stall
/// cases advance a manual clock; this is the one real wait left in them).
const FINISH_GRACE: Duration = Duration::from_millis(250);

/// A state check that fails is a terminal failure with its reason, not a transfer stuck
/// running, and it faults the peer: later posts are refused until it is added again.
///
/// Rules: R-FAIL-BOUNDED, R-PEER-FAULT.
pub(crate) fn failing_state_check_is_terminal<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    p.plan().fail_state_checks(true);
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    let seen = wait_for(a, Some(&peer), &[id]);
    match &seen[&id] {
        Err(FailureReason::StateCheck(m)) => assert!(m.contains("injected"), "{m}"),
        other => panic!("expected a failed state check, got {other:?}"),
    }
    p.plan().fail_state_checks(false);
    let fault = a.poll(Some(&peer)).expect("poll").peer_fault;
    assert!(
        matches!(&fault, Some(PeerFault::StateCheck(m)) if m.contains("injected")),
        "{fault:?}"
    );
    assert!(matches!(
        a.write_blocks(&peer, &[1], &[1]),
        Err(Error::PeerFaulted {
            fault: PeerFault::StateCheck(_),
            ..
        })
    ));
    connect(a, "b", &p.b);
    let id = a.write_blocks(&peer, &[1], &[1]).expect("write");
    wait_done(a, &peer, &[id]);
}

/// A remote disconnect fails the peer's running transfers within a bounded time, with its own
/// reason, and later posts fail at submit.
///
/// Rules: R-FAIL-BOUNDED, R-PEER-FAULT.
pub(crate) fn remote_disconnect_fails_in_bounded_time<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    plan.hold_transfers();
    let ids = [
        a.write_blocks(&peer, &[0], &[0]).expect("write"),
        a.write_blocks(&peer, &[1], &[1]).expect("write"),
    ];
    crate::support::posted(plan, 2);
    let started = Instant::now();
    plan.disconnect(true);
    let seen = wait_for(a, Some(&peer), &ids);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    for id in ids {
        assert!(
            matches!(&seen[&id], Err(r) if r.is_remote_disconnect()),
            "transfer {id}: {:?}",
            seen[&id]
        );
    }
    // The peer is faulted: later posts are refused with the verdict.
    match a.write_blocks(&peer, &[2], &[2]) {
        Err(Error::PeerFaulted {
            fault: PeerFault::RemoteDisconnect(_),
            peer: p,
        }) => assert_eq!(p, peer),
        other => panic!("post to a disconnected peer: {other:?}"),
    }
    plan.disconnect(false);
    plan.release_transfers();
    assert_eq!(a.backend_stats().live_transfers, 0);
}

/// The stall watchdog: transfers to a peer that complete nothing for the stall timeout (held
/// running here) make the transport ask the backend, once, to cut the peer: not a millisecond
/// before the timeout, and at the first poll once it has passed. They then fail as a remote
/// disconnect, and later posts fail. With no timeout, nothing is cut. The watchdog reads a
/// [`ManualClock`] the case advances: no real time needs to pass.
///
/// Rules: R-STALL, R-PEER-FAULT.
pub(crate) fn stalled_peer_is_cut<F: Fixture>(fx: &F) {
    let (p, clock, limit) = watched_pair(fx);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    plan.hold_transfers();
    // The stall clock starts at the first post.
    let ids = [
        a.write_blocks(&peer, &[0], &[0]).expect("write"),
        a.write_blocks(&peer, &[1], &[1]).expect("write"),
    ];
    crate::support::posted(plan, 2);
    // Just short of the timeout: polled (and cancel-waited on nothing) a while, nothing is cut.
    clock.advance(limit - Duration::from_millis(1));
    assert!(a.cancel(&[], CancelMode::Wait).expect("cancel").is_empty());
    let early = poll_for(a, Some(&peer), Duration::from_millis(20));
    assert!(early.is_empty(), "reported before the timeout: {early:?}");
    assert_eq!(plan.peers_failed(), 0, "cut before the timeout");
    // At the timeout: the next poll cuts, once.
    clock.advance(Duration::from_millis(1));
    let mut seen = Outcomes::new();
    record(&mut seen, a.poll(Some(&peer)).expect("poll"));
    assert_eq!(
        plan.peers_failed(),
        1,
        "the backend was asked to cut the peer once, by the first poll after the timeout"
    );
    for (id, outcome) in wait_for(a, Some(&peer), &ids) {
        assert!(seen.insert(id, outcome).is_none(), "id {id} reported twice");
    }
    assert_eq!(plan.peers_failed(), 1, "the backend was asked once");
    for id in ids {
        assert!(
            matches!(&seen[&id], Err(FailureReason::RemoteDisconnect(why)) if why.contains("no transfer")),
            "transfer {id}: {:?}",
            seen[&id]
        );
    }
    let fault = a.poll(Some(&peer)).expect("poll").peer_fault;
    assert_eq!(
        fault,
        Some(PeerFault::Stalled(limit)),
        "the cut faults the peer"
    );
    assert!(
        matches!(
            a.write_blocks(&peer, &[2], &[2]),
            Err(Error::PeerFaulted { .. })
        ),
        "a post to a cut peer"
    );
    plan.disconnect(false);
    plan.release_transfers();
    assert_eq!(a.backend_stats().live_transfers, 0);

    // No stall timeout: held transfers stay running however long, nothing is cut.
    let clock = ManualClock::new();
    let spec = Spec::new(4, 4096)
        .with_stall_timeout(None)
        .with_clock(clock.clone());
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    plan.hold_transfers();
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    crate::support::posted(plan, 1);
    clock.advance(limit * 1000);
    assert!(a.cancel(&[], CancelMode::Wait).expect("cancel").is_empty());
    let seen = poll_for(a, Some(&peer), Duration::from_millis(20));
    assert!(seen.is_empty(), "reported while held: {seen:?}");
    assert_eq!(plan.peers_failed(), 0);
    plan.release_transfers();
    wait_done(a, &peer, &[id]);
}

/// The stall watchdog counts what the backend finished, polled or not: a peer whose
/// transfers finished while the caller only cancel-waited on others is not cut (it was, and
/// a healthy peer lost its connection in the dead-peer test under load). The watchdog reads
/// a [`ManualClock`], advanced far past the timeout once the write had real time to finish.
///
/// Rules: R-STALL.
pub(crate) fn finished_unpolled_peer_is_not_cut<F: Fixture>(fx: &F) {
    let (p, clock, limit) = watched_pair(fx);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    let id = write_and_let_land(&p, 0x5A);
    // Long past the timeout for the watchdog.
    clock.advance(limit * 4);
    // A cancel-wait that names no transfer of this peer runs the watchdog over every peer.
    assert!(a.cancel(&[], CancelMode::Wait).expect("cancel").is_empty());
    assert_eq!(
        plan.peers_failed(),
        0,
        "a peer whose transfer finished was cut"
    );
    let seen = wait_for(a, Some(&peer), &[id]);
    assert!(matches!(seen[&id], Ok(())), "{seen:?}");
    let again = a
        .write_blocks(&peer, &[1], &[1])
        .expect("a post after the check");
    wait_done(a, &peer, &[again]);
}

/// The stall watchdog asks for certain before it cuts: a peer whose transfer finished, but
/// whose backend's `state` cannot see it (a lock another thread holds across long library
/// calls: nixl's posting thread, posting one large transfer after another for longer than the
/// stall timeout), is not cut. Before the cut the watchdog observes with `state_blocking`, which
/// waits for the lock; the transfer is then reported done, even while `state` still cannot see
/// it. Injected with [`FaultPlan::state_busy`](crate::FaultPlan::state_busy).
///
/// Rules: R-STALL.
pub(crate) fn finished_behind_a_busy_state_check_is_not_cut<F: Fixture>(fx: &F) {
    let (p, clock, limit) = watched_pair(fx);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    plan.state_busy(true);
    let id = write_and_let_land(&p, 0x3C);
    // Before the timeout a poll cannot see it: `state` reports it running.
    let early = poll_for(a, Some(&peer), Duration::from_millis(20));
    assert!(
        early.is_empty(),
        "seen through a busy state check: {early:?}"
    );
    clock.advance(limit * 4);
    let seen = poll_for(a, Some(&peer), Duration::from_millis(20));
    assert_eq!(
        plan.peers_failed(),
        0,
        "a peer whose transfer finished was cut for a busy state check"
    );
    assert!(
        matches!(seen.get(&id), Some(Ok(()))),
        "the watchdog's certain look reports it done: {seen:?}"
    );
    plan.state_busy(false);
    let again = a
        .write_blocks(&peer, &[1], &[1])
        .expect("a post after the check");
    wait_done(a, &peer, &[again]);
}

/// The watchdog's look for certain waits for the backend (nixl: for its agent's lock), so it
/// is made only while a cut is still to be decided: once the backend was asked to cut the
/// stalled peer and could not, later polls look without waiting, and the peer stays faulted.
/// Injected with [`FaultPlan::refuse_cuts`](crate::FaultPlan::refuse_cuts), counted with
/// [`FaultPlan::certain_looks`](crate::FaultPlan::certain_looks).
///
/// Rules: R-STALL, R-PEER-FAULT.
pub(crate) fn uncut_stall_is_looked_at_for_certain_once<F: Fixture>(fx: &F) {
    let (p, clock, limit) = watched_pair(fx);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    plan.hold_transfers();
    plan.refuse_cuts(true);
    let ids = [
        a.write_blocks(&peer, &[0], &[0]).expect("write"),
        a.write_blocks(&peer, &[1], &[1]).expect("write"),
    ];
    // Handed over, not only begun: a transfer still inside its post is running but cannot be
    // looked at through the backend yet, so it would get no look for certain.
    crate::support::handed_over(a, plan, 2);
    clock.advance(limit * 2);
    let fault = a.poll(Some(&peer)).expect("poll").peer_fault;
    assert_eq!(plan.peers_failed(), 1, "the backend was asked to cut once");
    assert_eq!(
        fault,
        Some(PeerFault::Stalled(limit)),
        "the stall faults the peer"
    );
    let looks = plan.certain_looks();
    assert_eq!(
        looks,
        ids.len(),
        "one look for certain at each running transfer before the cut"
    );
    clock.advance(limit * 2);
    let later = poll_for(a, Some(&peer), Duration::from_millis(20));
    assert!(later.is_empty(), "held transfers reported: {later:?}");
    assert_eq!(
        plan.certain_looks(),
        looks,
        "polls after the refused cut still waited for a look for certain"
    );
    assert_eq!(plan.peers_failed(), 1, "the backend was asked again");
    plan.refuse_cuts(false);
    plan.release_transfers();
    let seen = wait_for(a, Some(&peer), &ids);
    assert_eq!(seen.len(), 2, "{seen:?}");
    eventually("every transfer released", || {
        a.poll(None).is_ok() && a.backend_stats().live_transfers == 0
    });
}

/// A pair of 4 blocks of 4 KiB whose initiator's stall watchdog cuts after 300 ms (the
/// timeout, returned) of a [`ManualClock`] (returned) that the case advances.
fn watched_pair<F: Fixture>(fx: &F) -> (Pair<F::Transport>, ManualClock, Duration) {
    let limit = Duration::from_millis(300);
    let clock = ManualClock::new();
    let spec = Spec::new(4, 4096)
        .with_stall_timeout(Some(limit))
        .with_clock(clock.clone());
    (pair(fx, &spec), clock, limit)
}

/// Writes `a`'s block 0, filled with `byte`, to the peer's block 0, waits until it landed,
/// then gives the backend a grace to see its completion (a 4 KiB write finishes within it on
/// any backend); nobody polls meanwhile.
fn write_and_let_land<T: Transport>(p: &Pair<T>, byte: u8) -> TransferId {
    p.a.region().fill_block(0, byte).expect("fill");
    let id = p.a.write_blocks(&p.peer, &[0], &[0]).expect("write");
    eventually("the write landed at the peer", || {
        p.b.region().block(0).is_ok_and(|b| b == vec![byte; 4096])
    });
    std::thread::sleep(FINISH_GRACE);
    id
}

/// The real thing: the peer transport closes while large transfers to it run. Every transfer
/// is reported within a bounded time, done (finished first) or failed as a remote disconnect;
/// nothing hangs.
///
/// Rules: R-FAIL-BOUNDED.
pub(crate) fn remote_close_fails_transfers<F: Fixture>(fx: &F) {
    let n = 16u32;
    let spec = Spec::new(n, 1 << 20);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    let blocks: Vec<u32> = (0..n).collect();
    let ids: Vec<_> = (0..4)
        .map(|_| a.write_blocks(&peer, &blocks, &blocks).expect("write"))
        .collect();
    let started = Instant::now();
    b.close().expect("close remote");
    drop(b);
    let seen = wait_for(&a, Some(&peer), &ids);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    for (id, outcome) in &seen {
        assert!(
            matches!(outcome, Ok(()) | Err(FailureReason::RemoteDisconnect(_))),
            "transfer {id}: {outcome:?}"
        );
    }
    // Later: refused at submit (the peer is faulted by a failed transfer, or the backend
    // refuses), or failed as a disconnect; never done, never stuck.
    match a.write_blocks(&peer, &[0], &[0]) {
        Err(Error::PeerFaulted { fault, .. }) => {
            assert!(matches!(fault, PeerFault::RemoteDisconnect(_)), "{fault}")
        }
        Err(Error::Submit { source, .. }) => {
            assert_eq!(
                source.kind(),
                BackendErrorKind::RemoteDisconnect,
                "{source}"
            )
        }
        Ok(id) => {
            let seen = wait_for(&a, Some(&peer), &[id]);
            assert!(
                matches!(&seen[&id], Err(r) if r.is_remote_disconnect()),
                "{seen:?}"
            );
        }
        Err(e) => panic!("write to a closed peer: {}", e.report()),
    }
}

/// A post the backend refuses is an error with context and leaves nothing tracked; where the
/// transport posts on its posting thread (`posts_in_caller`), it is a failed transfer whose
/// reason carries the backend's error.
///
/// Rules: R-POST-CHECK, R-POST-DEFERRED, R-ID-UNIQUE.
pub(crate) fn failed_submit_leaves_nothing_tracked<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    p.plan().fail_nth_post(2);
    let first = a.write_blocks(&peer, &[0], &[0]).expect("write");
    match a.write_blocks(&peer, &[1], &[1]) {
        Ok(id) if a.capabilities().posts_in_caller => {
            let seen = wait_for(a, Some(&peer), &[first, id]);
            assert_eq!(seen[&first], Ok(()));
            assert!(
                matches!(&seen[&id], Err(FailureReason::Backend(m)) if m.contains(crate::INJECTED)),
                "{seen:?}"
            );
        }
        Err(Error::Submit {
            source, peer: p, ..
        }) if !a.capabilities().posts_in_caller => {
            assert_eq!(source.kind(), BackendErrorKind::Other);
            assert!(source.message().starts_with(crate::INJECTED), "{source}");
            assert_eq!(p, peer);
        }
        other => panic!("expected the injected submit failure, got {other:?}"),
    }
    let third = a.write_blocks(&peer, &[2], &[2]).expect("write");
    assert!(third.get() > first.get());
    if a.capabilities().posts_in_caller {
        wait_done(a, &peer, &[third]);
    } else {
        wait_done(a, &peer, &[first, third]);
    }
    assert_eq!(a.backend_stats().live_transfers, 0);
}
