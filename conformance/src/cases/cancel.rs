//! Cancel: immediate forgets; wait never releases a transfer that may still move bytes.

use std::time::Duration;

use blockwire::{CancelMode, Transport};
use blockwire_core::TransferId;

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{
    Pair, check_blocks, connect, faults, open, pair, pattern, poll_for, settle, wait_for,
};

/// Immediate returns `[]`; the cancelled ids never appear; unknown ids are ignored.
///
/// Rules: R-CANCEL-IMMEDIATE, R-ID-ONCE.
pub(crate) fn immediate_forgets_ids<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 64 * 1024);
    let Pair { a, b: _b, peer, .. } = pair(fx, &spec);
    let ids: Vec<_> = (0..6)
        .map(|i| a.write_blocks(&peer, &[i], &[i]).expect("write"))
        .collect();
    let cancelled = [ids[0], ids[2], ids[5], TransferId(u64::MAX)];
    assert_eq!(a.cancel(&cancelled, CancelMode::Immediate), Ok(vec![]));
    wait_for(&a, Some(&peer), &[ids[1], ids[3], ids[4]]);
    let later = poll_for(&a, None, Duration::from_millis(100));
    assert!(later.is_empty(), "cancelled ids reported: {later:?}");
    assert_eq!(a.cancel(&ids, CancelMode::Immediate), Ok(vec![]));
    crate::support::eventually("every handle is released", || {
        let _ = a.poll(None);
        a.backend_stats().live_transfers == 0
    });
}

/// A running transfer stays tracked: wait returns its id (again and again), and it surfaces
/// through poll once it stops. A finished id in the same call is released; unknown ids are
/// ignored.
///
/// Rules: R-CANCEL-WAIT.
pub(crate) fn wait_keeps_running_transfer<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    let finished = a.write_blocks(&peer, &[1], &[1]).expect("write");
    std::thread::sleep(Duration::from_millis(50));
    p.plan().hold_transfers();
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    crate::support::posted(p.plan(), 2);
    let unknown = TransferId(u64::MAX);
    let still = a.cancel(&[id, unknown], CancelMode::Wait).expect("cancel");
    assert_eq!(still, vec![id]);
    assert_eq!(a.cancel(&[id], CancelMode::Wait), Ok(vec![id]));
    assert!(
        poll_for(a, Some(&peer), Duration::from_millis(50))
            .keys()
            .all(|k| *k != id)
    );
    // The finished one is released by a wait cancel (if it really finished) and never reported.
    let finished_still = a.cancel(&[finished], CancelMode::Wait).expect("cancel");
    p.plan().release_transfers();
    let mut expect = vec![id];
    expect.extend(finished_still);
    wait_for(a, Some(&peer), &expect);
}

/// A transfer that has stopped is released by a wait cancel and never reported.
///
/// Rules: R-CANCEL-WAIT, R-ID-ONCE.
pub(crate) fn wait_releases_finished_transfer<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let Pair { a, b: _b, peer, .. } = pair(fx, &spec);
    // A small write finishes in microseconds, but a loaded machine may be slower: retry until
    // one is seen finished by the cancel (a running one is legitimately returned).
    for attempt in 0..50 {
        let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
        std::thread::sleep(Duration::from_millis(20 + attempt * 10));
        let still = a.cancel(&[id], CancelMode::Wait).expect("cancel");
        if still.is_empty() {
            let later = poll_for(&a, None, Duration::from_millis(50));
            assert!(later.is_empty(), "a released id was reported: {later:?}");
            return;
        }
        assert_eq!(still, vec![id]);
        wait_for(&a, Some(&peer), &[id]);
    }
    panic!("no small write finished within a second, 50 times");
}

/// The late-bytes invariant on the real data path: once a wait cancel no longer returns an id
/// (or poll reported it), a sentinel written into its target blocks is never overwritten.
///
/// Rules: R-CANCEL-WAIT.
pub(crate) fn wait_no_late_bytes<F: Fixture>(fx: &F) {
    let n = 32u32;
    let len = 1 << 20;
    let spec = Spec::new(n, len);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    let blocks: Vec<u32> = (0..n).collect();
    for round in 0..6u64 {
        for i in 0..n {
            a.region().fill_block(i, 0x11).expect("fill");
        }
        let id = a.write_blocks(&peer, &blocks, &blocks).expect("write");
        std::thread::sleep(Duration::from_micros(round * round * 300));
        let mut caught_running = false;
        loop {
            let still = a.cancel(&[id], CancelMode::Wait).expect("cancel");
            if still.is_empty() {
                break;
            }
            caught_running = true;
            if a.poll(Some(&peer)).expect("poll").ids().any(|x| x == id) {
                break;
            }
        }
        for i in 0..n {
            b.region().fill_block(i, 0xEE).expect("fill");
        }
        std::thread::sleep(Duration::from_millis(30));
        check_blocks(
            &b,
            &format!("round {round} (caught running: {caught_running})"),
            |_| vec![0xEE; len],
        );
    }
    assert_eq!(a.backend_stats().live_transfers, 0);
}

/// While the backend refuses to release, a wait cancel keeps returning the id and poll does
/// not report it; once release works, the cancel takes it and nothing is reported.
///
/// Rules: R-CANCEL-WAIT.
pub(crate) fn wait_while_release_busy<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, p.peer.clone());
    p.plan().release_busy(true);
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(a.cancel(&[id], CancelMode::Wait), Ok(vec![id]));
    assert!(poll_for(a, Some(&peer), Duration::from_millis(50)).is_empty());
    assert_eq!(a.backend_stats().live_transfers, 1);
    p.plan().release_busy(false);
    crate::support::eventually("the cancel releases the transfer", || {
        a.cancel(&[id], CancelMode::Wait)
            .expect("cancel")
            .is_empty()
    });
    assert!(poll_for(a, None, Duration::from_millis(50)).is_empty());
    assert_eq!(a.backend_stats().live_transfers, 0);
}

/// An immediate cancel of a transfer that cannot stop forgets its id at once but keeps its
/// handle until the backend can release it; the bytes it was moving still land whole.
///
/// Rules: R-CANCEL-IMMEDIATE.
pub(crate) fn immediate_defers_release_of_running<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let o = open(fx, &spec);
    let a = &o.transport;
    let b = open(fx, &spec).transport;
    a.region()
        .write_block(2, &pattern(9, 2, 4096))
        .expect("write_block");
    let peer = connect(a, "b", &b);
    faults(&o).hold_transfers();
    let id = a.write_blocks(&peer, &[2], &[3]).expect("write");
    crate::support::posted(faults(&o), 1);
    assert_eq!(a.cancel(&[id], CancelMode::Immediate), Ok(vec![]));
    // `posted` returns once the backend's post has begun; until that post returns, the
    // transfer may count twice (the transport's `in_post` and the backend's own count, as
    // `backend_stats` documents), never zero.
    assert!(
        a.backend_stats().live_transfers >= 1,
        "released while running"
    );
    crate::support::eventually("the post returns and the transfer counts once", || {
        a.backend_stats().live_transfers == 1
    });
    faults(&o).release_transfers();
    crate::support::eventually("the detached handle is released", || {
        assert!(a.poll(Some(&peer)).expect("poll").is_empty());
        a.backend_stats().live_transfers == 0
    });
    settle();
    assert_eq!(b.region().block(3).expect("block"), pattern(9, 2, 4096));
}
