//! Telemetry: off by default and then silent; on, a record with each reported id and per-peer
//! counters that add up.

use blockwire::{CancelMode, FailureReason, TransferKind, Transport};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Pair, connect, open, pair, wait_for};

/// Off: no records, no snapshot. On: each id reported comes with its record (kind, blocks,
/// bytes, outcome), and the snapshot's counters match what was reported and cancelled.
///
/// Rules: R-TELEMETRY.
pub(crate) fn records_and_counters<F: Fixture>(fx: &F) {
    let spec = Spec::new(8, 4096);
    let Pair { a, b: _b, peer, .. } = pair(fx, &spec);
    assert!(a.telemetry().is_none(), "telemetry is off by default");
    let id = a.write_blocks(&peer, &[0], &[0]).expect("write");
    let mut records = Vec::new();
    let mut seen = false;
    while !seen {
        let r = a.poll(Some(&peer)).expect("poll");
        seen = r.done.contains(&id);
        records.extend(r.records);
    }
    assert!(records.is_empty(), "records while off: {records:?}");

    let on = spec.clone();
    let t = fx_with_telemetry(fx, &on);
    let target = open(fx, &on).transport;
    let p = connect(&t, "target", &target);
    let w = t.write_blocks(&p, &[0, 1, 2], &[3, 4, 5]).expect("write");
    let mut reported = Vec::new();
    while reported
        .iter()
        .all(|r: &blockwire::TransferRecord| r.id != w)
    {
        reported.extend(t.poll(Some(&p)).expect("poll").records);
    }
    let rec = reported.iter().find(|r| r.id == w).expect("record");
    assert_eq!(rec.kind, TransferKind::Write);
    assert_eq!((rec.blocks, rec.bytes), (3, 3 * 4096));
    assert_eq!(rec.outcome, Ok(()));
    assert!(rec.latency >= rec.submit, "{rec:?}");
    let cancelled = t.write_blocks(&p, &[6], &[6]).expect("write");
    let still = t
        .cancel(&[cancelled], CancelMode::Immediate)
        .expect("cancel");
    assert!(still.is_empty());
    let snap = t.telemetry().expect("telemetry on");
    let fig = snap.peer(&p).expect("the peer's figures");
    assert_eq!(fig.transfers, 2);
    assert_eq!(
        (fig.done, fig.cancelled, fig.failures()),
        (1, 1, 0),
        "{fig:?}"
    );
    assert_eq!(fig.bytes, 3 * 4096);
    assert_eq!(fig.latency.count, 1);
    assert_eq!(fig.submit.count, 2);
    if t.capabilities().notifications {
        let n = t.notify(&p, b"hi").expect("notify");
        let outcomes = wait_for(&t, Some(&p), &[n]);
        assert_eq!(outcomes[&n], Ok(()));
        let fig = t.telemetry().expect("on");
        assert_eq!(fig.peer(&p).expect("figures").done, 2);
    }
    // A removed peer's running transfer fails as removed, and is counted so.
    let r = t.write_blocks(&p, &[7], &[7]).expect("write");
    t.remove_remote_peer(&p).expect("remove");
    let outcome = wait_for(&t, Some(&p), &[r]);
    let fig = t.telemetry().expect("on");
    let fig = fig.peer(&p).expect("figures");
    match &outcome[&r] {
        Ok(()) => assert!(fig.failures() == 0),
        Err(FailureReason::PeerRemoved) => {
            assert_eq!(fig.failed.get("peer_removed"), Some(&1), "{fig:?}")
        }
        other => panic!("{other:?}"),
    }
}

/// Opens a transport of the fixture with telemetry on.
fn fx_with_telemetry<F: Fixture>(fx: &F, spec: &Spec) -> F::Transport {
    open(fx, &spec.clone().with_telemetry(true)).transport
}
