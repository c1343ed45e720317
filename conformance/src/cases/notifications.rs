//! Notifications: they travel with a transfer (or alone), reach the target only once the data is
//! in place, are drained per sender exactly once, and none is sent for a transfer that did not
//! complete.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use blockwire::{CancelMode, Error, FailureReason, Notification, Transport};
use blockwire_core::MAX_NOTIFICATION_LEN;

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{
    Pair, TIMEOUT, check_blocks, fill_all, open, pair, pattern, settle, wait_done, wait_for,
};

/// Drains `t` until `n` notifications from `from` arrived (failing after the suite's timeout);
/// checks no more than `n` came.
fn drain_n<T: Transport>(t: &T, from: &str, n: usize) -> Vec<Notification> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "timed out: {} of {n} notifications from {from:?} arrived",
            got.len()
        );
        got.extend(t.notifications(Some(from)).expect("notifications"));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got.len(), n, "more notifications than sent: {got:?}");
    got
}

/// Waits a while and checks that nothing arrived from `from`.
fn none_arrives<T: Transport>(t: &T, from: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        let got = t.notifications(Some(from)).expect("notifications");
        assert!(got.is_empty(), "{what}: a notification arrived: {got:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The name is in the descriptor, generated names differ, and a given one is kept.
///
/// Rules: R-NAME.
pub(crate) fn names_are_unique_and_described<F: Fixture>(fx: &F) {
    let spec = Spec::new(2, 4096);
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    assert!(!a.name().is_empty());
    assert_ne!(a.name(), b.name(), "generated names must differ");
    let desc = a.descriptor().expect("descriptor");
    assert_eq!(desc.name, a.name());
    let parsed = blockwire::PeerDescriptor::from_bytes(&desc.to_bytes()).expect("parse");
    assert_eq!(parsed.name, a.name());
}

/// A WRITE's notification reaches the target, which never added the sender, only once every
/// byte is in place; the write is done, and the notification is drained once.
///
/// Rules: R-NOTIFY-AFTER-DATA, R-NOTIFY-DONE, R-NOTIFY-DRAIN.
pub(crate) fn write_notification_follows_the_data<F: Fixture>(fx: &F) {
    let spec = Spec::new(64, 64 * 1024);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 11);
    let blocks: Vec<u32> = (0..64).collect();
    let id = a
        .write_blocks_notify(&peer, &blocks, &blocks, b"64 blocks written")
        .expect("write_blocks_notify");
    // Whenever the target sees the notification, the bytes are there.
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    let mut outcome = None;
    while got.is_empty() || outcome.is_none() {
        assert!(Instant::now() < deadline, "timed out: {got:?} {outcome:?}");
        let drained = b.notifications(Some(a.name())).expect("notifications");
        if !drained.is_empty() {
            check_blocks(&b, "the target at its notification", |i| {
                pattern(11, i, spec.block_len)
            });
            got.extend(drained);
        }
        let r = a.poll(Some(&peer)).expect("poll");
        if r.done.contains(&id) {
            outcome = Some(Ok(()));
        } else if let Some((_, reason)) = r.failed.first() {
            outcome = Some(Err(reason.clone()));
        }
    }
    assert_eq!(outcome, Some(Ok(())));
    assert_eq!(
        got,
        vec![Notification::new(a.name(), b"64 blocks written".to_vec())]
    );
    none_arrives(&b, a.name(), "after the one drain");
    assert_eq!(b.notification_stats().drained, 1);
}

/// A READ's notification reaches the peer whose blocks were read (the producer) once the
/// consumer has them; done means the producer was told.
///
/// Rules: R-NOTIFY-AFTER-DATA, R-NOTIFY-DONE.
pub(crate) fn read_notification_reaches_the_producer<F: Fixture>(fx: &F) {
    let spec = Spec::new(16, 64 * 1024);
    let Pair {
        a: consumer,
        b: producer,
        peer,
        ..
    } = pair(fx, &spec);
    fill_all(&producer, 23);
    let blocks: Vec<u32> = (0..16).collect();
    let id = consumer
        .read_blocks_notify(&peer, &blocks, &blocks, b"free 0..16")
        .expect("read_blocks_notify");
    wait_done(&consumer, &peer, &[id]);
    check_blocks(&consumer, "the consumer after its read", |i| {
        pattern(23, i, spec.block_len)
    });
    let got = drain_n(&producer, consumer.name(), 1);
    assert_eq!(got[0].message, b"free 0..16");
    assert_eq!(got[0].sender, consumer.name());
}

/// A standalone notification is done once delivered and drained once; the largest message
/// allowed arrives whole; many in a row all arrive, each once.
///
/// Rules: R-NOTIFY-ALONE, R-NOTIFY-DRAIN.
pub(crate) fn standalone_notifications_arrive_once<F: Fixture>(fx: &F) {
    let spec = Spec::new(2, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    let big: Vec<u8> = (0..MAX_NOTIFICATION_LEN).map(|i| (i * 7) as u8).collect();
    let first = a.notify(&peer, &big).expect("notify");
    wait_done(&a, &peer, &[first]);
    let got = drain_n(&b, a.name(), 1);
    assert_eq!(got[0].message, big);
    let ids: Vec<_> = (0..50u32)
        .map(|i| a.notify(&peer, &i.to_le_bytes()).expect("notify"))
        .collect();
    wait_done(&a, &peer, &ids);
    let got = drain_n(&b, a.name(), 50);
    let messages: HashSet<Vec<u8>> = got.into_iter().map(|n| n.message).collect();
    let sent: HashSet<Vec<u8>> = (0..50u32).map(|i| i.to_le_bytes().to_vec()).collect();
    assert_eq!(messages, sent);
    none_arrives(&b, a.name(), "after every one was drained");
    // An empty message is a notification too.
    let empty = a.notify(&peer, b"").expect("notify");
    wait_done(&a, &peer, &[empty]);
    assert!(drain_n(&b, a.name(), 1)[0].message.is_empty());
}

/// Draining one sender leaves the others' queued; an unscoped drain takes the rest.
///
/// Rules: R-NOTIFY-DRAIN.
pub(crate) fn drained_per_sender<F: Fixture>(fx: &F) {
    let spec = Spec::new(2, 4096);
    let target = open(fx, &spec).transport;
    let a = open(fx, &spec).transport;
    let c = open(fx, &spec).transport;
    let pa = crate::support::connect(&a, "target", &target);
    let pc = crate::support::connect(&c, "target", &target);
    let xa: Vec<_> = (0..3)
        .map(|_| a.notify(&pa, b"from a").expect("notify"))
        .collect();
    let xc: Vec<_> = (0..2)
        .map(|_| c.notify(&pc, b"from c").expect("notify"))
        .collect();
    wait_done(&a, &pa, &xa);
    wait_done(&c, &pc, &xc);
    let from_c = drain_n(&target, c.name(), 2);
    assert!(from_c.iter().all(|n| n.message == b"from c"));
    // a's stayed for their own drain.
    let deadline = Instant::now() + TIMEOUT;
    let mut rest = Vec::new();
    while rest.len() < 3 {
        assert!(Instant::now() < deadline, "a's notifications: {rest:?}");
        rest.extend(target.notifications(None).expect("notifications"));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rest.len(), 3, "{rest:?}");
    assert!(
        rest.iter()
            .all(|n| n.sender == a.name() && n.message == b"from a")
    );
    assert!(
        target
            .notifications(None)
            .expect("notifications")
            .is_empty()
    );
    assert!(
        target
            .notifications(Some("nobody"))
            .expect("notifications")
            .is_empty()
    );
}

/// A message over the limit, a bad index, an unknown peer: refused, nothing moves, nothing is
/// tracked, nothing reaches the peer. After close every call is `Err(Closed)`.
///
/// Rules: R-NOTIFY-CHECK, R-CLOSE.
pub(crate) fn bad_input_sends_nothing<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 3);
    fill_all(&b, 4);
    let long = vec![1u8; MAX_NOTIFICATION_LEN + 1];
    let too_long = Error::NotificationTooLong {
        len: MAX_NOTIFICATION_LEN + 1,
        max: MAX_NOTIFICATION_LEN,
    };
    assert_eq!(
        a.write_blocks_notify(&peer, &[0], &[0], &long),
        Err(too_long.clone())
    );
    assert_eq!(
        a.read_blocks_notify(&peer, &[0], &[0], &long),
        Err(too_long.clone())
    );
    assert_eq!(a.notify(&peer, &long), Err(too_long));
    assert!(matches!(
        a.write_blocks_notify(&peer, &[0], &[4], b"x"),
        Err(Error::RemoteIndexOutOfRange { .. })
    ));
    assert!(matches!(
        a.write_blocks_notify(&peer, &[0, 1], &[2, 2], b"x"),
        Err(Error::DuplicateDestination { .. })
    ));
    let stranger = "stranger".into();
    assert_eq!(
        a.notify(&stranger, b"x"),
        Err(Error::UnknownPeer(stranger.clone()))
    );
    assert_eq!(
        a.write_blocks_notify(&stranger, &[0], &[0], b"x"),
        Err(Error::UnknownPeer(stranger))
    );
    assert_eq!(a.in_flight(None), 0);
    none_arrives(&b, a.name(), "after refused calls");
    check_blocks(&b, "the target after refused calls", |i| {
        pattern(4, i, spec.block_len)
    });
    a.close().expect("close");
    assert_eq!(a.notify(&peer, b"x"), Err(Error::Closed));
    assert_eq!(
        a.write_blocks_notify(&peer, &[0], &[0], b"x"),
        Err(Error::Closed)
    );
    assert_eq!(a.notifications(None), Err(Error::Closed));
}

/// A transfer that fails sends no notification.
///
/// Rules: R-NOTIFY-DONE.
pub(crate) fn failed_transfer_sends_none<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    p.plan().fail_state_checks(true);
    let id =
        p.a.write_blocks_notify(&p.peer, &[0], &[0], b"never")
            .expect("write");
    let seen = wait_for(&p.a, Some(&p.peer), &[id]);
    assert!(
        matches!(seen[&id], Err(FailureReason::StateCheck(_))),
        "{seen:?}"
    );
    p.plan().fail_state_checks(false);
    none_arrives(&p.b, p.a.name(), "for a failed transfer");
}

/// A transfer cancelled before it completed sends no notification, whether the cancel waits
/// (the id surfaces failed, aborted) or not.
///
/// Rules: R-NOTIFY-DONE, R-CANCEL-WAIT.
pub(crate) fn cancelled_transfer_sends_none<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    p.plan().hold_transfers();
    let waited =
        p.a.write_blocks_notify(&p.peer, &[0], &[0], b"waited")
            .expect("write");
    let forgotten =
        p.a.write_blocks_notify(&p.peer, &[1], &[1], b"forgotten")
            .expect("write");
    crate::support::posted(p.plan(), 2);
    assert_eq!(p.a.cancel(&[waited], CancelMode::Wait), Ok(vec![waited]));
    assert_eq!(p.a.cancel(&[forgotten], CancelMode::Immediate), Ok(vec![]));
    p.plan().release_transfers();
    let seen = wait_for(&p.a, Some(&p.peer), &[waited]);
    assert!(
        seen[&waited].is_err(),
        "a cancelled transfer is not done: {seen:?}"
    );
    crate::support::eventually("every handle is released", || {
        let _ = p.a.poll(None);
        p.a.backend_stats().live_transfers == 0
    });
    none_arrives(&p.b, p.a.name(), "for cancelled transfers");
}

/// A transfer whose peer is removed while it runs sends no notification and fails as removed.
///
/// Rules: R-NOTIFY-DONE, R-REMOVE-RUNNING.
pub(crate) fn removed_peer_gets_none<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    p.plan().hold_transfers();
    let id =
        p.a.write_blocks_notify(&p.peer, &[0], &[0], b"removed")
            .expect("write");
    crate::support::posted(p.plan(), 1);
    p.a.remove_remote_peer(&p.peer).expect("remove");
    p.plan().release_transfers();
    let seen = wait_for(&p.a, Some(&p.peer), &[id]);
    assert_eq!(seen[&id], Err(FailureReason::PeerRemoved));
    none_arrives(&p.b, p.a.name(), "for a removed peer");
}

/// Data that landed with a notification the backend would not post, or lost in flight, fails
/// as undelivered; a standalone one the backend refuses is an error with nothing tracked.
///
/// Rules: R-NOTIFY-DONE, R-NOTIFY-ALONE.
pub(crate) fn undelivered_notification_fails<F: Fixture>(fx: &F) {
    // Three failures in a row would fault the peer (R-PEER-FAULT); this case wants the path back.
    let spec = Spec::new(4, 4096).with_max_consecutive_failures(0);
    let p = pair(fx, &spec);
    fill_all(&p.a, 9);
    for (i, refuse) in [(0u32, true), (1, false)] {
        p.plan().refuse_notifications(refuse);
        p.plan().lose_notifications(!refuse);
        let id =
            p.a.write_blocks_notify(&p.peer, &[i], &[i], b"lost")
                .expect("write");
        let seen = wait_for(&p.a, Some(&p.peer), &[id]);
        assert!(
            matches!(seen[&id], Err(FailureReason::NotificationUndelivered(_))),
            "refuse={refuse}: {seen:?}"
        );
        // The data did land.
        assert_eq!(
            p.b.region().block(i).expect("block"),
            pattern(9, i, spec.block_len)
        );
    }
    p.plan().lose_notifications(false);
    p.plan().refuse_notifications(true);
    // Refused at submit; or, posted on the posting thread (`posts_in_caller`), undelivered.
    match p.a.notify(&p.peer, b"refused") {
        Err(Error::Notify { .. }) if !p.a.capabilities().posts_in_caller => {}
        Ok(id) if p.a.capabilities().posts_in_caller => {
            let seen = wait_for(&p.a, Some(&p.peer), &[id]);
            assert!(
                matches!(&seen[&id], Err(FailureReason::NotificationUndelivered(m)) if m.contains(crate::INJECTED)),
                "{seen:?}"
            );
        }
        r => panic!("a refused notification: {r:?}"),
    }
    assert_eq!(p.a.in_flight(None), 0);
    p.plan().refuse_notifications(false);
    none_arrives(&p.b, p.a.name(), "for undelivered notifications");
    // And the path works again.
    let id = p.a.notify(&p.peer, b"now").expect("notify");
    wait_done(&p.a, &p.peer, &[id]);
    drain_n(&p.b, p.a.name(), 1);
}

/// A notification to a target that closed is not reported delivered: it fails, in bounded
/// time, and the target's close discarded what it had queued (counted).
///
/// Rules: R-NOTIFY-ALONE, R-NOTIFY-DRAIN, R-CLOSE.
pub(crate) fn closed_target_discards_and_refuses<F: Fixture>(fx: &F) {
    let spec = Spec::new(2, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    let ids: Vec<_> = (0..3)
        .map(|_| a.notify(&peer, b"queued").expect("notify"))
        .collect();
    wait_done(&a, &peer, &ids);
    crate::support::eventually("three are queued", || b.notification_stats().queued == 3);
    b.close().expect("close");
    let stats = b.notification_stats();
    assert_eq!((stats.queued, stats.discarded_closed), (0, 3), "{stats:?}");
    assert_eq!(b.notifications(None), Err(Error::Closed));
    match a.notify(&peer, b"too late") {
        Err(_) => {}
        Ok(id) => {
            let seen = wait_for(&a, Some(&peer), &[id]);
            assert!(
                seen[&id].is_err(),
                "delivered to a closed transport: {seen:?}"
            );
        }
    }
}

/// A full inbox drops what arrives beyond it, counted, and keeps what it holds.
///
/// Rules: R-NOTIFY-DRAIN.
pub(crate) fn full_inbox_counts_drops<F: Fixture>(fx: &F) {
    // A full inbox fails an in-process sender's notifications: not a reason to fault the peer
    // in this case.
    let spec = Spec::new(2, 4096).with_max_consecutive_failures(0);
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec.clone().with_notification_capacity(4)).transport;
    let peer = crate::support::connect(&a, "b", &b);
    let ids: Vec<_> = (0..10u8)
        .map(|i| a.notify(&peer, &[i]).expect("notify"))
        .collect();
    // Each one is reported exactly once, delivered or not (a backend that learns of the drop
    // reports it failed).
    let seen = wait_for(&a, Some(&peer), &ids);
    assert_eq!(seen.len(), 10);
    crate::support::eventually("every notification arrived or was dropped", || {
        let s = b.notification_stats();
        s.received + s.dropped_full == 10
    });
    settle();
    let got = b.notifications(None).expect("notifications");
    let stats = b.notification_stats();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(stats.dropped_full, 6, "{stats:?}");
    assert_eq!(stats.drained, 4);
    // Room again.
    let id = a.notify(&peer, b"room").expect("notify");
    wait_done(&a, &peer, &[id]);
    assert_eq!(drain_n(&b, a.name(), 1)[0].message, b"room");
}
