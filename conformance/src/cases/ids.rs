//! Transfer ids: unique, increasing, reported exactly once.

use std::collections::HashSet;
use std::time::Duration;

use blockwire::{CancelMode, Transport};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Outcomes, Pair, TwoPeers, pair, poll_for, record, two_peers, wait_for};

/// Ids are unique and increase across writes to different peers.
///
/// Rules: R-ID-UNIQUE.
pub(crate) fn unique_and_increasing_across_peers<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let peers = two_peers(fx, &spec);
    let TwoPeers { a, pb, pc, .. } = &peers;
    let mut ids = Vec::new();
    for i in 0..40u32 {
        let peer = if i % 2 == 0 { &pb } else { &pc };
        ids.push(
            a.write_blocks(peer, &[i % 8], &[(i / 2) % 8])
                .expect("write"),
        );
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids not increasing: {ids:?}"
    );
    let seen = wait_for(a, None, &ids);
    assert_eq!(seen.len(), ids.len());
}

/// Every id is reported once, whether done, failed or taken by a cancel, and never again.
///
/// Rules: R-ID-ONCE.
pub(crate) fn each_reported_exactly_once<F: Fixture>(fx: &F) {
    let spec = Spec::new(32, 256 * 1024);
    let Pair { a, b: _b, peer, .. } = pair(fx, &spec);
    let ids: Vec<_> = (0..30u32)
        .map(|i| a.write_blocks(&peer, &[i % 32], &[i]).expect("write"))
        .collect();
    let immediate: Vec<_> = ids.iter().copied().step_by(3).collect();
    assert!(
        a.cancel(&immediate, CancelMode::Immediate)
            .expect("cancel")
            .is_empty()
    );
    let waited: Vec<_> = ids.iter().copied().skip(1).step_by(3).collect();
    let still = a.cancel(&waited, CancelMode::Wait).expect("cancel");
    let taken: HashSet<_> = immediate
        .iter()
        .chain(waited.iter().filter(|id| !still.contains(id)))
        .copied()
        .collect();
    let rest: Vec<_> = ids
        .iter()
        .copied()
        .filter(|id| !taken.contains(id))
        .collect();
    let mut seen: Outcomes = wait_for(&a, Some(&peer), &rest);
    record(&mut seen, a.poll(None).expect("poll"));
    let again = poll_for(&a, None, Duration::from_millis(100));
    assert!(again.is_empty(), "ids reported again: {again:?}");
    for id in &ids {
        let n = usize::from(taken.contains(id)) + usize::from(seen.contains_key(id));
        assert_eq!(n, 1, "id {id} accounted {n} times");
    }
}

/// `in_flight` counts transfers posted and not yet reported (or taken by a cancel), per peer
/// and in all; a poll that reports them, and a cancel that takes them, uncount them.
///
/// Rules: R-IN-FLIGHT.
pub(crate) fn in_flight_counts<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let peers = two_peers(fx, &spec);
    let TwoPeers { a, pb, pc, .. } = &peers;
    let to_b: Vec<_> = (0..3u32)
        .map(|i| a.write_blocks(pb, &[i], &[i]).expect("write"))
        .collect();
    let to_c: Vec<_> = (0..2u32)
        .map(|i| a.write_blocks(pc, &[i], &[i]).expect("write"))
        .collect();
    // Finished or not, nothing is reported yet.
    assert_eq!(
        (
            a.in_flight(Some(pb)),
            a.in_flight(Some(pc)),
            a.in_flight(None)
        ),
        (3, 2, 5)
    );
    assert_eq!(a.in_flight(Some(&"nobody".into())), 0);
    assert!(
        a.cancel(&to_b[..1], CancelMode::Immediate)
            .expect("cancel")
            .is_empty()
    );
    assert_eq!(a.in_flight(Some(pb)), 2);
    wait_for(a, Some(pc), &to_c);
    assert_eq!((a.in_flight(Some(pc)), a.in_flight(None)), (0, 2));
    wait_for(a, Some(pb), &to_b[1..]);
    assert_eq!(a.in_flight(None), 0);
    a.write_blocks(pb, &[7], &[7]).expect("write");
    a.close().expect("close");
    assert_eq!(a.in_flight(None), 0, "close drops every transfer");
}
