//! Peer faults (vLLM 0.33's failure model): a peer judged unusable is reported on every
//! scoped poll until it is removed, and posts to it are refused with the verdict.

use blockwire::{Error, FailureReason, PeerFault, PeerId, Transport};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Pair, connect, open, pair, wait_done, wait_for};

/// The fault of `peer` a scoped poll reports now.
fn fault<T: Transport>(a: &T, peer: &PeerId) -> Option<PeerFault> {
    a.poll(Some(peer)).expect("poll").peer_fault
}

/// A remote disconnect faults the peer at once: every scoped poll says so (an unscoped one
/// does not), posts are refused with it, another peer is unaffected, and a remove forgets it
/// (the peer added again is healthy).
///
/// Rules: R-PEER-FAULT.
pub(crate) fn reported_until_removed<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    let c = open(fx, &spec).transport;
    let other = connect(a, "c", &c);
    let plan = p.plan();
    plan.hold_transfers();
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    crate::support::posted(plan, 1);
    plan.disconnect(true);
    let seen = wait_for(a, Some(&peer), &[id]);
    plan.release_transfers();
    assert!(
        matches!(&seen[&id], Err(FailureReason::RemoteDisconnect(_))),
        "{seen:?}"
    );
    plan.disconnect(false);
    for _ in 0..3 {
        let f = fault(a, &peer);
        assert!(
            matches!(&f, Some(PeerFault::RemoteDisconnect(m)) if m.contains("injected")),
            "{f:?}"
        );
    }
    assert_eq!(a.poll(None).expect("poll").peer_fault, None);
    match a.write_blocks(&peer, &[1], &[1]) {
        Err(Error::PeerFaulted { peer: p, fault }) => {
            assert_eq!(p, peer);
            assert!(matches!(fault, PeerFault::RemoteDisconnect(_)), "{fault}");
        }
        other => panic!("a post to a faulted peer: {other:?}"),
    }
    assert_eq!(a.in_flight(Some(&peer)), 0, "a refused post is tracked");
    // Another peer is healthy.
    assert_eq!(fault(a, &other), None);
    let id = a
        .write_blocks(&other, &[2], &[2])
        .expect("write to another peer");
    wait_done(a, &other, &[id]);
    // Removed: forgotten; added again: healthy.
    a.remove_remote_peer(&peer).expect("remove");
    assert_eq!(fault(a, &peer), None);
    connect(a, "b", &p.b);
    assert_eq!(fault(a, &peer), None);
    let id = a
        .write_blocks(&peer, &[3], &[3])
        .expect("write after re-adding");
    wait_done(a, &peer, &[id]);
}

/// `max_consecutive_failures` failures in a row fault the peer (here refused posts, the
/// default 3); a success between resets the count; `0` never faults for failures alone.
///
/// Rules: R-PEER-FAULT.
pub(crate) fn consecutive_failures<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    // Refused at submit; or, where the posting thread posts (`posts_in_caller`), a failed
    // transfer.
    let refused = |n: u32| {
        for _ in 0..n {
            plan.fail_nth_post(1);
            match a.write_blocks(&peer, &[0], &[0]) {
                Err(Error::Submit { .. }) if !a.capabilities().posts_in_caller => {}
                Ok(id) if a.capabilities().posts_in_caller => {
                    let seen = wait_for(a, Some(&peer), &[id]);
                    assert!(
                        matches!(seen[&id], Err(FailureReason::Backend(_))),
                        "{seen:?}"
                    );
                }
                r => panic!("a refused post: {r:?}"),
            }
        }
    };
    refused(2);
    assert_eq!(fault(a, &peer), None, "two failures fault the peer");
    let id = a.write_blocks(&peer, &[1], &[1]).expect("write");
    wait_done(a, &peer, &[id]);
    refused(2);
    assert_eq!(
        fault(a, &peer),
        None,
        "a success between did not reset the count"
    );
    refused(1);
    let f = fault(a, &peer);
    assert!(
        matches!(&f, Some(PeerFault::ConsecutiveFailures { count: 3, last: FailureReason::Backend(m) }) if m.contains("injected")),
        "{f:?}"
    );
    assert!(matches!(
        a.write_blocks(&peer, &[1], &[1]),
        Err(Error::PeerFaulted { .. })
    ));

    // Never, with 0.
    let spec = Spec::new(4, 4096).with_max_consecutive_failures(0);
    let Pair {
        a,
        b: _b,
        peer,
        faults,
    } = pair(fx, &spec);
    let plan = faults.expect("a fault-injecting fixture");
    for _ in 0..5 {
        plan.fail_nth_post(1);
        match a.write_blocks(&peer, &[0], &[0]) {
            Ok(id) => {
                let seen = wait_for(&a, Some(&peer), &[id]);
                assert!(seen[&id].is_err(), "{seen:?}");
            }
            Err(e) => assert!(matches!(e, Error::Submit { .. }), "{e:?}"),
        }
    }
    assert_eq!(fault(&a, &peer), None);
    let id = a.write_blocks(&peer, &[1], &[1]).expect("write");
    wait_done(&a, &peer, &[id]);
}
