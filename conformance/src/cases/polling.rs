//! Per-peer polling: one session never consumes another's completions.

use std::time::Duration;

use blockwire::Transport;
use blockwire_core::PeerId;

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{connect, open, poll_for, wait_for};

/// `poll(Some(a))` returns only a's transfers, however often it is called; b's wait for b.
///
/// Rules: R-POLL-PEER.
pub(crate) fn scoped_to_peer<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let t = open(fx, &spec).transport;
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    let pa = connect(&t, "a", &a);
    let pb = connect(&t, "b", &b);
    let ids_b: Vec<_> = (0..4)
        .map(|i| t.write_blocks(&pb, &[i], &[i]).expect("write"))
        .collect();
    let ids_a: Vec<_> = (0..4)
        .map(|i| t.write_blocks(&pa, &[i], &[i + 4]).expect("write"))
        .collect();
    wait_for(&t, Some(&pa), &ids_a);
    // b's transfers finish meanwhile; a's poll must still never see them.
    let more = poll_for(&t, Some(&pa), Duration::from_millis(100));
    assert!(more.is_empty(), "a's poll returned {more:?}");
    wait_for(&t, Some(&pb), &ids_b);
    assert!(t.poll(Some(&pb)).expect("poll").is_empty());
}

/// `poll(None)` drains every peer's transfers; afterwards each peer's poll is empty.
///
/// Rules: R-POLL-ALL.
pub(crate) fn none_drains_every_peer<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let t = open(fx, &spec).transport;
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    let pa = connect(&t, "a", &a);
    let pb = connect(&t, "b", &b);
    let ids = vec![
        t.write_blocks(&pa, &[0], &[0]).expect("write"),
        t.write_blocks(&pb, &[1], &[1]).expect("write"),
        t.write_blocks(&pa, &[2], &[2]).expect("write"),
    ];
    wait_for(&t, None, &ids);
    assert!(t.poll(Some(&pa)).expect("poll").is_empty());
    assert!(t.poll(Some(&pb)).expect("poll").is_empty());
}

/// Polling a peer that has nothing (never added) is empty, not an error: a removed peer's
/// transfers are still polled by its id.
///
/// Rules: R-POLL-PEER.
pub(crate) fn unknown_peer_is_empty<F: Fixture>(fx: &F) {
    let t = open(fx, &Spec::new(2, 4096)).transport;
    let r = t.poll(Some(&PeerId::from("nobody"))).expect("poll");
    assert!(r.is_empty());
}
