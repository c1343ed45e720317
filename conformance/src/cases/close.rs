//! Close: idempotent, bounded, and never frees memory under a running transfer.

use std::time::{Duration, Instant};

use blockwire::{Error, Transport};
use blockwire_core::PeerId;

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Pair, TIMEOUT, connect, faults, open, pair};

/// Close twice: both `Ok`.
///
/// Rules: R-CLOSE.
pub(crate) fn idempotent<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(2, 4096)).transport;
    assert_eq!(a.close(), Ok(()));
    assert_eq!(a.close(), Ok(()));
    assert!(a.is_closed());
}

/// Close with large transfers in flight returns within its bound and leaves no handle and no
/// peer behind.
///
/// Rules: R-CLOSE.
pub(crate) fn with_transfers_in_flight<F: Fixture>(fx: &F) {
    let n = 32u32;
    let spec = Spec::new(n, 1 << 20);
    let Pair { a, b: _b, peer, .. } = pair(fx, &spec);
    let blocks: Vec<u32> = (0..n).collect();
    for _ in 0..4 {
        a.write_blocks(&peer, &blocks, &blocks).expect("write");
    }
    let started = Instant::now();
    a.close().expect("close");
    assert!(started.elapsed() < spec.close_timeout + Duration::from_secs(1));
    assert_eq!(a.backend_stats().live_transfers, 0);
    assert_eq!(a.backend_stats().connected_peers, 0);
}

/// Close waits for a transfer that cannot be stopped, then frees it.
///
/// Rules: R-CLOSE.
pub(crate) fn waits_for_running_transfer<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    let plan = p.plan();
    plan.hold_transfers();
    a.write_blocks(&peer, &[0], &[0]).expect("write");
    crate::support::posted(plan, 1);
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            plan.release_transfers();
        });
        a.close().expect("close");
    });
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "close returned after {waited:?}"
    );
    assert!(
        waited < spec.close_timeout,
        "close hit its timeout: {waited:?}"
    );
    assert_eq!(plan.live_transfers(), 0);
    assert_eq!(plan.connected_peers(), 0);
}

/// At the deadline close stops waiting: it returns and logs, and a reaper keeps the running
/// transfer (and the memory under it) until it stops, then releases it.
///
/// Rules: R-CLOSE-REAPER.
pub(crate) fn forced_close_frees_only_after_transfers_stop<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096).with_close_timeout(Duration::from_millis(200));
    let o = open(fx, &spec);
    let a = &o.transport;
    let b = open(fx, &Spec::new(4, 4096)).transport;
    let peer = connect(a, "b", &b);
    let plan = faults(&o);
    plan.hold_transfers();
    a.write_blocks(&peer, &[0], &[0]).expect("write");
    // Handed over, not only begun: a post still inside the library when close gives up on
    // the posting thread has no transfer yet for the count below (the likely cause of two
    // failures on libfabric tcp-spin, "a running transfer was released", not reproduced in 60
    // runs after).
    crate::support::handed_over(a, plan, 1);
    let started = Instant::now();
    a.close().expect("close");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(plan.live_transfers(), 1, "a running transfer was released");
    assert_eq!(
        plan.connected_peers(),
        1,
        "the peer was freed under a running transfer"
    );
    assert_eq!(a.write_blocks(&peer, &[0], &[0]), Err(Error::Closed));
    // Once it stops, it is released after all, and so is its peer.
    plan.release_transfers();
    crate::support::eventually("the stopped transfer and its peer are released", || {
        plan.live_transfers() == 0 && plan.connected_peers() == 0
    });
}

/// Close resolves every registration: queued ones at once (`Closed`), the one in connect when
/// it returns (`Closed`); none is published. Here the connect cannot be cut short (see
/// [`stops_a_waiting_connect`] for one that can): close waits for it only until its close
/// timeout.
///
/// Rules: R-CLOSE, R-ADD-ASYNC.
pub(crate) fn resolves_pending_registrations<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096).with_close_timeout(Duration::from_millis(200));
    let o = open(fx, &spec);
    let a = &o.transport;
    let b = open(fx, &Spec::new(4, 4096)).transport;
    let desc = b.descriptor().expect("descriptor");
    let plan = faults(&o);
    plan.hold_registrations_uninterruptibly();
    let connecting = a.add_remote_peer_async(&PeerId::from("b1"), &desc);
    assert!(plan.wait_connects_started(1, TIMEOUT));
    let queued = a.add_remote_peer_async(&PeerId::from("b2"), &desc);
    a.close().expect("close");
    let queued = queued.wait_timeout(Duration::from_secs(2));
    assert!(matches!(queued, Ok(Err(Error::Closed))), "{queued:?}");
    plan.release_registrations();
    assert_eq!(connecting.wait(), Err(Error::Closed));
    assert!(a.peers().is_empty());
    crate::support::eventually("the late connection is released", || {
        plan.connected_peers() == 0
    });
}

/// Close tells a connect that waits for the peer to give up (`Backend::stop_connecting`; ucx's
/// waits for a stopped peer's answer up to 5 s) before it waits for the registration, so the
/// registration has resolved (`Closed`) when close returns, well within a long close timeout.
///
/// Rules: R-CLOSE, R-ADD-ASYNC.
pub(crate) fn stops_a_waiting_connect<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096).with_close_timeout(Duration::from_secs(10));
    let o = open(fx, &spec);
    let a = &o.transport;
    let b = open(fx, &Spec::new(4, 4096)).transport;
    let desc = b.descriptor().expect("descriptor");
    let plan = faults(&o);
    plan.hold_registrations();
    let connecting = a.add_remote_peer_async(&PeerId::from("b"), &desc);
    assert!(plan.wait_connects_started(1, TIMEOUT));
    a.close().expect("close");
    assert!(
        connecting.is_finished(),
        "close returned with the connect still waiting (its close timeout ran out)"
    );
    assert_eq!(connecting.wait(), Err(Error::Closed));
    assert!(a.peers().is_empty());
    assert_eq!(plan.connected_peers(), 0);
    plan.release_registrations();
}

/// Dropping a transport closes it: its peers and transfers are released.
///
/// Rules: R-CLOSE.
pub(crate) fn drop_closes<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 64 * 1024);
    let o = open(fx, &spec);
    let plan = faults(&o).clone();
    let b = open(fx, &spec).transport;
    let peer = connect(&o.transport, "b", &b);
    for i in 0..4 {
        o.transport.write_blocks(&peer, &[i], &[i]).expect("write");
    }
    assert_eq!(plan.connected_peers(), 1);
    drop(o);
    assert_eq!(plan.connected_peers(), 0);
    assert_eq!(plan.live_transfers(), 0);
}
