//! Asynchronous registration and generations: a late registration never revives a removed or
//! superseded peer.

use std::time::{Duration, Instant};

use blockwire::{Error, Registration, Transport};
use blockwire_core::PeerId;

use crate::Fixture;
use crate::fixture::{Opened, Spec};
use crate::support::{TIMEOUT, connect, faults, fill_all, open, pattern, wait_done};

/// `a` (fault-injecting) with a registration of peer `"b"` (transport `b`) held in connect.
struct Held<T> {
    a: Opened<T>,
    _b: T,
    peer: PeerId,
    handle: Registration,
}

fn held_registration<F: Fixture>(fx: &F) -> Held<F::Transport> {
    let spec = Spec::new(4, 4096);
    let a = open(fx, &spec);
    let b = open(fx, &spec).transport;
    faults(&a).hold_registrations();
    let peer = PeerId::from("b");
    let handle = a
        .transport
        .add_remote_peer_async(&peer, &b.descriptor().expect("descriptor"));
    assert!(faults(&a).wait_connects_started(1, TIMEOUT));
    Held {
        a,
        _b: b,
        peer,
        handle,
    }
}

/// Remove while the registration is still connecting: the handle resolves `Superseded`, the
/// peer stays unknown and the backend holds no connection.
///
/// Rules: R-ADD-SUPERSEDED, R-REMOVE.
pub(crate) fn remove_supersedes_in_flight<F: Fixture>(fx: &F) {
    let Held {
        a: opened,
        _b,
        peer,
        handle,
    } = held_registration(fx);
    let (a, plan) = (&opened.transport, faults(&opened));
    assert!(!handle.is_finished());
    a.remove_remote_peer(&peer)
        .expect("remove of a peer being registered");
    plan.release_registrations();
    assert_eq!(handle.wait(), Err(Error::Superseded { peer: peer.clone() }));
    assert!(a.peers().is_empty());
    assert_eq!(
        a.write_blocks(&peer, &[0], &[0]),
        Err(Error::UnknownPeer(peer.clone()))
    );
    assert_eq!(a.backend_stats().connected_peers, 0);
    assert_eq!(plan.connected_peers(), 0);
    assert_eq!(a.remove_remote_peer(&peer), Err(Error::UnknownPeer(peer)));
}

/// A registration superseded while its connect waits for the peer (removed, or added again)
/// tells that connect to give up (`Backend::cancel_connect`; ucx's waits up to 5 s for a
/// stopped peer's answer): its handle resolves `Superseded` while connects are still held,
/// and the registration worker moves on to the next.
///
/// Rules: R-ADD-SUPERSEDED, R-REMOVE.
pub(crate) fn superseded_connect_gives_up<F: Fixture>(fx: &F) {
    let Held {
        a: opened,
        _b: b,
        peer,
        handle,
    } = held_registration(fx);
    let (a, plan) = (&opened.transport, faults(&opened));
    let desc = b.descriptor().expect("descriptor");
    a.remove_remote_peer(&peer).expect("remove");
    let removed = handle.wait_timeout(TIMEOUT);
    assert!(
        matches!(removed, Ok(Err(Error::Superseded { .. }))),
        "a removed registration's connect went on waiting: {removed:?}"
    );
    let first = a.add_remote_peer_async(&peer, &desc);
    assert!(plan.wait_connects_started(2, TIMEOUT));
    let second = a.add_remote_peer_async(&peer, &desc);
    let first = first.wait_timeout(TIMEOUT);
    assert!(
        matches!(first, Ok(Err(Error::Superseded { .. }))),
        "a registration added again went on waiting: {first:?}"
    );
    assert!(
        plan.wait_connects_started(3, TIMEOUT),
        "the worker did not move on"
    );
    plan.release_registrations();
    assert_eq!(second.wait(), Ok(()));
    assert_eq!(a.peers(), vec![peer]);
}

/// Two registrations of one id: the first is superseded, the second is in effect and its
/// descriptor is the one used.
///
/// Rules: R-ADD-SUPERSEDED, R-ADD-PUBLISH.
pub(crate) fn second_supersedes_first<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let o = open(fx, &spec);
    let a = &o.transport;
    let b1 = open(fx, &spec).transport;
    let b2 = open(fx, &spec).transport;
    fill_all(a, 1);
    fill_all(&b1, 2);
    fill_all(&b2, 3);
    let plan = faults(&o);
    plan.hold_registrations();
    let peer = PeerId::from("b");
    let first = a.add_remote_peer_async(&peer, &b1.descriptor().expect("descriptor"));
    assert!(plan.wait_connects_started(1, TIMEOUT));
    let second = a.add_remote_peer_async(&peer, &b2.descriptor().expect("descriptor"));
    plan.release_registrations();
    assert_eq!(first.wait(), Err(Error::Superseded { peer: peer.clone() }));
    assert_eq!(second.wait(), Ok(()));
    assert_eq!(a.peers(), vec![peer.clone()]);
    assert_eq!(a.backend_stats().connected_peers, 1);
    let id = a.write_blocks(&peer, &[0], &[1]).expect("write");
    wait_done(a, &peer, &[id]);
    assert_eq!(b2.region().block(1).expect("block"), pattern(1, 0, 4096));
    assert_eq!(b1.region().block(1).expect("block"), pattern(2, 1, 4096));
}

/// Remove returns at once while a registration of the peer is held in connect.
///
/// Rules: R-REMOVE.
pub(crate) fn remove_does_not_wait<F: Fixture>(fx: &F) {
    let Held {
        a: opened,
        _b,
        peer,
        handle,
    } = held_registration(fx);
    let (a, plan) = (&opened.transport, faults(&opened));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let r = a.remove_remote_peer(&peer);
            let _ = tx.send(r);
        });
        // The registration stays held for the whole wait: remove must not need it.
        let r = rx.recv_timeout(Duration::from_secs(5));
        plan.release_registrations();
        assert_eq!(
            r,
            Ok(Ok(())),
            "remove waited for the registration in flight"
        );
    });
    assert!(matches!(handle.wait(), Err(Error::Superseded { .. })));
}

/// The handle is a `Future` any executor can drive, and has a blocking `wait`.
///
/// Rules: R-ADD-ASYNC.
pub(crate) fn handle_is_a_future<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    let c = open(fx, &spec).transport;
    let h = a.add_remote_peer_async(&"b".into(), &b.descriptor().expect("descriptor"));
    assert_eq!(futures::executor::block_on(h), Ok(()));
    let h = a.add_remote_peer_async(&"c".into(), &c.descriptor().expect("descriptor"));
    assert_eq!(h.wait(), Ok(()));
    assert_eq!(a.peers(), vec!["b".into(), "c".into()]);
}

/// A task waiting on a pending handle is woken when the registration finishes.
///
/// Rules: R-ADD-ASYNC.
pub(crate) fn handle_wakes_its_task<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let o = open(fx, &spec);
    let a = &o.transport;
    let b = open(fx, &spec).transport;
    let plan = faults(&o);
    plan.hold_registrations();
    let h = a.add_remote_peer_async(&"b".into(), &b.descriptor().expect("descriptor"));
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            plan.release_registrations();
        });
        assert_eq!(futures::executor::block_on(h), Ok(()));
    });
    assert!(started.elapsed() >= Duration::from_millis(100));
}

/// A descriptor that fails validation gives a handle that is already resolved.
///
/// Rules: R-ADD-ASYNC.
pub(crate) fn invalid_descriptor_resolves_at_once<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(4, 4096)).transport;
    let b = open(fx, &Spec::new(4, 512)).transport;
    let h = a.add_remote_peer_async(&"b".into(), &b.descriptor().expect("descriptor"));
    assert!(h.is_finished());
    assert!(matches!(h.wait(), Err(Error::BlockLenMismatch { .. })));
}

/// Adding a published id again replaces its registration: later writes go to the new peer.
///
/// Rules: R-ADD-PUBLISH.
pub(crate) fn add_replaces_published_peer<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let a = open(fx, &spec).transport;
    let b1 = open(fx, &spec).transport;
    let b2 = open(fx, &spec).transport;
    fill_all(&a, 1);
    fill_all(&b1, 2);
    fill_all(&b2, 3);
    let peer = connect(&a, "b", &b1);
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    wait_done(&a, &peer, &[id]);
    connect(&a, "b", &b2);
    let id = a.write_blocks(&peer, &[1], &[1]).expect("write");
    wait_done(&a, &peer, &[id]);
    assert_eq!(b2.region().block(1).expect("block"), pattern(1, 1, 4096));
    assert_eq!(b1.region().block(1).expect("block"), pattern(2, 1, 4096));
    assert_eq!(a.backend_stats().connected_peers, 1);
}
