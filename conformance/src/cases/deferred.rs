//! Deferred posting ([`blockwire::Capabilities::posts_in_caller`]): transfers queued for the
//! posting thread keep every rule of the contract. The cases force the posting thread on
//! (`Spec::with_deferred_posting`), so they run on every backend, and hold the wrapper's posts
//! to keep transfers queued for as long as they look.

use std::time::{Duration, Instant};

use blockwire::{CancelMode, FailureReason, Transport};

use crate::fixture::Spec;
use crate::support::{
    Outcomes, TIMEOUT, fill_all, pair, pattern, poll_for, record, wait_done, wait_for,
};
use crate::{Fixture, INJECTED};

fn spec() -> Spec {
    Spec::new(8, 4096).with_deferred_posting(true)
}

/// The transport posts through its posting thread: a post held inside the backend does not
/// hold the caller, and the ids queued behind it are tracked (counted in flight).
///
/// Rules: R-POST-DEFERRED, R-POST-NO-WAIT, R-IN-FLIGHT.
pub(crate) fn held_post_does_not_hold_the_caller<F: Fixture>(fx: &F) {
    let p = pair(fx, &spec());
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    assert!(a.capabilities().posts_in_caller);
    fill_all(a, 3);
    plan.hold_posts();
    let ids: Vec<_> = (0..4)
        .map(|i| a.write_blocks(&peer, &[i], &[i]).expect("write"))
        .collect();
    assert!(
        plan.wait_posts(1, TIMEOUT),
        "the posting thread never posted"
    );
    assert_eq!(
        a.in_flight(Some(&peer)),
        4,
        "queued transfers are in flight"
    );
    assert!(poll_for(a, Some(&peer), Duration::from_millis(20)).is_empty());
    assert_eq!(plan.posts(), 1, "posts past a held one");
    plan.release_posts();
    wait_done(a, &peer, &ids);
    for i in 0..4 {
        assert_eq!(
            p.b.region().block(i).expect("block"),
            pattern(3, i, a.block_len())
        );
    }
    assert_eq!(a.in_flight(None), 0);
}

/// A post that fails on the posting thread is a failed transfer whose reason says the post
/// failed, with the backend's text; it counts toward the peer's consecutive failures; the ids
/// around it are unaffected.
///
/// Rules: R-POST-DEFERRED, R-ID-ONCE, R-PEER-FAULT.
pub(crate) fn failed_post_surfaces_as_failed<F: Fixture>(fx: &F) {
    let p = pair(fx, &spec().with_max_consecutive_failures(2));
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    plan.fail_nth_post(2);
    let ids: Vec<_> = (0..3)
        .map(|i| a.write_blocks(&peer, &[i], &[i]).expect("write"))
        .collect();
    let seen = wait_for(a, Some(&peer), &ids);
    assert_eq!(seen[&ids[0]], Ok(()));
    assert_eq!(seen[&ids[2]], Ok(()));
    match &seen[&ids[1]] {
        Err(FailureReason::Backend(m)) => {
            assert!(m.contains("posting it failed"), "{m}");
            assert!(m.contains(INJECTED), "{m}");
        }
        other => panic!("expected the failed post, got {other:?}"),
    }
    // Two failed posts in a row fault the peer (the success above reset the count).
    for i in 0..2 {
        plan.fail_nth_post(1);
        let id = a.write_blocks(&peer, &[i], &[i]).expect("write");
        let seen = wait_for(a, Some(&peer), &[id]);
        assert!(
            matches!(seen[&id], Err(FailureReason::Backend(_))),
            "{seen:?}"
        );
    }
    let fault = a.poll(Some(&peer)).expect("poll").peer_fault;
    assert!(fault.is_some(), "two failed posts did not fault the peer");
    assert!(matches!(
        a.write_blocks(&peer, &[0], &[0]),
        Err(blockwire::Error::PeerFaulted { .. })
    ));
    assert_eq!(plan.live_transfers(), 0);
}

/// A queued transfer that is cancelled is never posted: `Immediate` forgets it, `Wait`
/// releases it at once (nothing of it can land); one inside its post is still running for
/// `Wait`. Every other id is reported once.
///
/// Rules: R-POST-DEFERRED, R-CANCEL-IMMEDIATE, R-CANCEL-WAIT, R-ID-ONCE.
pub(crate) fn cancel_of_queued_never_posts<F: Fixture>(fx: &F) {
    let p = pair(fx, &spec());
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    fill_all(a, 5);
    fill_all(&p.b, 6);
    plan.hold_posts();
    let ids: Vec<_> = (0..4)
        .map(|i| a.write_blocks(&peer, &[i], &[i]).expect("write"))
        .collect();
    assert!(plan.wait_posts(1, TIMEOUT));
    // ids[0] is inside its post; the others are queued.
    assert_eq!(a.cancel(&[ids[1]], CancelMode::Wait).expect("cancel"), []);
    assert_eq!(
        a.cancel(&[ids[2]], CancelMode::Immediate).expect("cancel"),
        []
    );
    assert_eq!(
        a.cancel(&[ids[0]], CancelMode::Wait).expect("cancel"),
        [ids[0]],
        "a transfer inside its post was released"
    );
    assert_eq!(a.in_flight(Some(&peer)), 2);
    plan.release_posts();
    let seen = wait_for(a, Some(&peer), &[ids[0], ids[3]]);
    assert_eq!(seen[&ids[3]], Ok(()));
    assert!(
        matches!(seen[&ids[0]], Ok(()) | Err(FailureReason::Aborted)),
        "{seen:?}"
    );
    assert!(poll_for(a, Some(&peer), Duration::from_millis(20)).is_empty());
    assert_eq!(plan.posts(), 2, "a cancelled queued transfer was posted");
    for i in [1, 2] {
        assert_eq!(
            p.b.region().block(i).expect("block"),
            pattern(6, i, a.block_len()),
            "block {i} of a cancelled queued transfer changed"
        );
    }
    assert_eq!(plan.live_transfers(), 0);
}

/// A transfer that `cancel(Immediate)` forgot while it was inside its post (the backend
/// holds no handle of it yet) still counts as live in `backend_stats()`, so a caller waiting
/// for `live_transfers == 0` before reusing its blocks never reuses them under it; once its
/// post returns, polls release it.
///
/// Rules: R-POST-DEFERRED, R-CANCEL-IMMEDIATE.
pub(crate) fn forgotten_inside_its_post_stays_live<F: Fixture>(fx: &F) {
    let p = pair(fx, &spec());
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    plan.hold_posts();
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    assert!(
        plan.wait_posts(1, TIMEOUT),
        "the posting thread never posted"
    );
    assert_eq!(a.cancel(&[id], CancelMode::Immediate).expect("cancel"), []);
    assert_eq!(a.in_flight(None), 0, "a forgotten id is not in flight");
    assert!(
        a.backend_stats().live_transfers >= 1,
        "a transfer inside its post counted as not live: {:?}",
        a.backend_stats()
    );
    plan.release_posts();
    let deadline = Instant::now() + TIMEOUT;
    while a.backend_stats().live_transfers > 0 {
        let polled = a.poll(None).expect("poll");
        assert!(polled.is_empty(), "a forgotten id was reported: {polled:?}");
        assert!(
            Instant::now() < deadline,
            "the forgotten transfer was never released"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(plan.live_transfers(), 0);
    assert_eq!(a.backend_stats().connected_peers, 1);
}

/// Removing a peer fails its queued transfers as `PeerRemoved` without posting them; the
/// backend's peer stays connected while the one inside its post runs, and is freed after.
///
/// Rules: R-POST-DEFERRED, R-REMOVE-RUNNING, R-ID-ONCE.
pub(crate) fn remove_fails_queued_unposted<F: Fixture>(fx: &F) {
    let p = pair(fx, &spec());
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    plan.hold_posts();
    let ids: Vec<_> = (0..3)
        .map(|i| a.write_blocks(&peer, &[i], &[i]).expect("write"))
        .collect();
    assert!(plan.wait_posts(1, TIMEOUT));
    a.remove_remote_peer(&peer).expect("remove");
    assert_eq!(plan.connected_peers(), 1, "peer freed under a post");
    plan.release_posts();
    let seen = wait_for(a, Some(&peer), &ids);
    for id in &ids[1..] {
        assert_eq!(seen[id], Err(FailureReason::PeerRemoved), "transfer {id}");
    }
    assert!(
        matches!(seen[&ids[0]], Ok(()) | Err(FailureReason::PeerRemoved)),
        "{seen:?}"
    );
    assert_eq!(
        plan.posts(),
        1,
        "a removed peer's queued transfer was posted"
    );
    assert_eq!(plan.connected_peers(), 0);
    assert_eq!(plan.live_transfers(), 0);
}

/// Close never posts a queued transfer and does not wait on a post held inside the backend
/// beyond its timeout; what it left running is freed once the post returns.
///
/// Rules: R-POST-DEFERRED, R-CLOSE, R-CLOSE-REAPER.
pub(crate) fn close_never_posts_queued<F: Fixture>(fx: &F) {
    let timeout = Duration::from_millis(200);
    let p = pair(fx, &spec().with_close_timeout(timeout));
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan().clone());
    plan.hold_posts();
    for i in 0..3 {
        a.write_blocks(&peer, &[i], &[i]).expect("write");
    }
    assert!(plan.wait_posts(1, TIMEOUT));
    let started = Instant::now();
    a.close().expect("close");
    let took = started.elapsed();
    assert!(
        took < timeout + Duration::from_secs(5),
        "close waited {took:?} on a held post"
    );
    plan.release_posts();
    let deadline = Instant::now() + TIMEOUT;
    while plan.connected_peers() + plan.live_transfers() > 0 {
        assert!(
            Instant::now() < deadline,
            "nothing freed after the post returned"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(p);
    assert_eq!(plan.posts(), 1, "close posted a queued transfer");
}

/// Many transfers, some queued behind a held post, cancelled in both modes and polled: every
/// id is reported exactly once, by a poll or a cancel, and nothing stays tracked.
///
/// Rules: R-POST-DEFERRED, R-ID-ONCE, R-IN-FLIGHT.
pub(crate) fn queued_ids_reported_once<F: Fixture>(fx: &F) {
    let p = pair(fx, &spec());
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    plan.hold_posts();
    let ids: Vec<_> = (0..24)
        .map(|i| a.write_blocks(&peer, &[i % 8], &[i % 8]).expect("write"))
        .collect();
    let note = a
        .capabilities()
        .notifications
        .then(|| a.notify(&peer, b"queued").expect("notify"));
    // Forgotten by `Immediate`, or released by `Wait`: never reported by a poll.
    let mut taken = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        match n % 3 {
            0 => {
                let still = a.cancel(&[*id], CancelMode::Immediate).expect("cancel");
                assert!(still.is_empty(), "an Immediate cancel returned {still:?}");
                taken.push(*id);
            }
            1 if a
                .cancel(&[*id], CancelMode::Wait)
                .expect("cancel")
                .is_empty() =>
            {
                taken.push(*id);
            }
            _ => {}
        }
    }
    // At most the one inside its post was still running for `Wait`.
    assert!(
        taken.len() >= 15,
        "queued transfers were not released: {taken:?}"
    );
    plan.release_posts();
    let mut seen = Outcomes::new();
    let deadline = Instant::now() + TIMEOUT;
    while a.in_flight(None) > 0 {
        assert!(Instant::now() < deadline, "transfers stayed in flight");
        record(&mut seen, a.poll(None).expect("poll"));
        std::thread::sleep(Duration::from_millis(1));
    }
    record(&mut seen, a.poll(None).expect("poll"));
    for id in ids.iter().chain(&note) {
        assert!(
            taken.contains(id) != seen.contains_key(id),
            "transfer {id}: taken by a cancel: {}, reported: {:?}",
            taken.contains(id),
            seen.get(id)
        );
    }
    for id in ids.iter().skip(2).step_by(3).chain(&note) {
        assert_eq!(seen.get(id), Some(&Ok(())), "transfer {id}");
    }
    assert_eq!(plan.live_transfers(), 0);
}

/// A transfer the backend ends inside its post (as a library whose post moves the data
/// does) ends, and rings, before the transport counts it as posted: a `poll_wait` that
/// drained in between and went back to sleep is still woken once it counts as posted, and
/// reports it, each time, long before its timeout. (Over a backend that does not ring, the
/// waiter's naps find it.)
///
/// Rules: R-POLL-WAIT, R-POST-DEFERRED.
pub(crate) fn ended_inside_its_post_wakes_the_waiter<F: Fixture>(fx: &F) {
    // No stall timeout: a waiter over a ringing backend then drains again only when rung.
    let p = pair(fx, &spec().with_stall_timeout(None));
    let (a, peer, plan) = (&p.a, p.peer.clone(), p.plan());
    // Otherwise the post would run in this thread, before the wait, and the case would
    // check nothing.
    assert!(a.capabilities().posts_in_caller);
    fill_all(a, 5);
    plan.end_inside_post(Some(Duration::from_millis(50)));
    for i in 0..4 {
        let id = a.write_blocks(&peer, &[i], &[i]).expect("write");
        let started = Instant::now();
        let r = a.poll_wait(Some(&peer), TIMEOUT * 2).expect("poll_wait");
        let slept = started.elapsed();
        assert!(
            slept < TIMEOUT,
            "poll_wait slept {slept:?} past a transfer that ended inside its post (a lost ring)"
        );
        assert_eq!(r.done, vec![id], "transfer {i}: {r:?}");
        assert_eq!(
            p.b.region().block(i).expect("block"),
            pattern(5, i, a.block_len())
        );
    }
    plan.end_inside_post(None);
    assert_eq!(a.in_flight(None), 0);
}
