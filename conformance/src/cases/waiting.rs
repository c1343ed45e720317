//! `poll_wait`: a caller sleeps until a transfer ends, and gets what `poll` would give it.

use std::time::{Duration, Instant};

use blockwire::{Error, Transport};
use blockwire_core::{PeerId, PollResult, TransferId};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Outcomes, TIMEOUT, pair, posted, record, two_peers};

/// A wait far longer than any case: one that runs this long slept through a transfer's end.
const LONG: Duration = Duration::from_secs(60);

/// Waits on `peer` (or every peer) until each of `ids` is reported, failing the case if a
/// wait returns nothing before its timeout (it slept through an end: a lost ring), takes
/// longer than [`TIMEOUT`], or reports an id twice or one not in `ids`.
fn wait_all<T: Transport>(t: &T, peer: Option<&PeerId>, ids: &[TransferId]) -> Outcomes {
    let mut seen = Outcomes::new();
    while !ids.iter().all(|id| seen.contains_key(id)) {
        let started = Instant::now();
        let r: PollResult = t.poll_wait(peer, LONG).expect("poll_wait");
        let slept = started.elapsed();
        assert!(
            slept < TIMEOUT,
            "poll_wait slept {slept:?} while transfers ended (a missed wake-up?)"
        );
        assert!(
            !r.is_empty(),
            "poll_wait returned nothing before its timeout with {} in flight",
            t.in_flight(peer)
        );
        for id in r.ids() {
            assert!(ids.contains(&id), "unexpected id {id} reported");
        }
        record(&mut seen, r);
    }
    seen
}

/// A waiter on one peer wakes as its transfers end, gets only them, each once, and returns
/// at once, empty, when none is in flight; a waiter on every peer gets the other's.
///
/// Rules: R-POLL-WAIT.
pub(crate) fn wakes_for_its_peer_only<F: Fixture>(fx: &F) {
    // No stall timeout: a waiter on a backend that rings then drains again only when rung,
    // so a transfer that ends without a ring shows as a wait that runs to its timeout.
    let spec = Spec::new(16, 1 << 20).with_stall_timeout(None);
    let peers = two_peers(fx, &spec);
    let (a, pb, pc) = (&peers.a, &peers.pb, &peers.pc);
    let to_c: Vec<TransferId> = (0..4u32)
        .map(|i| a.write_blocks(pc, &[i], &[i]).expect("write to c"))
        .collect();
    let to_b: Vec<TransferId> = (0..4u32)
        .map(|i| {
            let blocks = [4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3];
            a.write_blocks(pb, &blocks, &blocks).expect("write to b")
        })
        .collect();
    for (id, outcome) in wait_all(a, Some(pb), &to_b) {
        assert!(outcome.is_ok(), "transfer {id} to b failed: {outcome:?}");
    }
    let started = Instant::now();
    let r = a.poll_wait(Some(pb), LONG).expect("poll_wait");
    assert!(r.is_empty(), "b has nothing in flight, yet: {r:?}");
    assert!(
        started.elapsed() < TIMEOUT,
        "with nothing in flight poll_wait waited {:?}",
        started.elapsed()
    );
    for (id, outcome) in wait_all(a, None, &to_c) {
        assert!(outcome.is_ok(), "transfer {id} to c failed: {outcome:?}");
    }
    assert!(a.poll(None).expect("poll").is_empty());
    assert_eq!(a.in_flight(None), 0);
}

/// A transfer that keeps running: the wait returns empty once its timeout has passed, not
/// before; once the transfer ends, a wait reports it.
///
/// Rules: R-POLL-WAIT.
pub(crate) fn times_out_then_reports_the_end<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, &p.peer);
    let plan = p.plan();
    plan.hold_transfers();
    let id = a.write_blocks(peer, &[0], &[1]).expect("write");
    posted(plan, 1);
    let timeout = Duration::from_millis(100);
    let started = Instant::now();
    let r = a.poll_wait(Some(peer), timeout).expect("poll_wait");
    let waited = started.elapsed();
    assert!(r.is_empty(), "a held transfer was reported: {r:?}");
    assert!(
        waited >= timeout,
        "poll_wait returned after {waited:?}, before its timeout"
    );
    assert!(
        waited < TIMEOUT,
        "poll_wait overran its timeout: {waited:?}"
    );
    plan.release_transfers();
    let seen = wait_all(a, Some(peer), &[id]);
    assert_eq!(seen.get(&id), Some(&Ok(())));
}

/// A close from another thread ends a wait with `Closed`; a wait after close is `Closed`.
///
/// Rules: R-POLL-WAIT, R-CLOSE.
pub(crate) fn close_ends_the_wait<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096).with_close_timeout(Duration::from_millis(50));
    let p = pair(fx, &spec);
    let (a, peer) = (&p.a, &p.peer);
    let plan = p.plan();
    plan.hold_transfers();
    a.write_blocks(peer, &[0], &[1]).expect("write");
    posted(plan, 1);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let started = Instant::now();
            (a.poll_wait(Some(peer), LONG), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        a.close().expect("close");
        let (result, waited) = waiter.join().expect("the waiting thread");
        assert_eq!(result.map(|r| r.len()), Err(Error::Closed));
        assert!(waited < TIMEOUT, "the wait outlived close by {waited:?}");
    });
    assert_eq!(a.poll_wait(None, LONG).map(|r| r.len()), Err(Error::Closed));
    // The forced close's reaper frees the held transfer once it stops.
    plan.release_transfers();
}
