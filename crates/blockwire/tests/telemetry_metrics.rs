//! What telemetry sends to the `metrics` facade: the documented names, with their labels, and
//! nothing when telemetry is off.

#![cfg(feature = "shm")]

use blockwire::telemetry::names;
use blockwire::{PeerId, Region, Transport, TransportOptions, open};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// A metric as the recorder saw it: name, labels, value.
type Seen = (String, Vec<(String, String)>, DebugValue);

fn one_write_and_one_notification(telemetry: bool) -> Vec<Seen> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let opts = TransportOptions::default().with_telemetry(telemetry);
        let a = open("shm", Region::new(4, 4096).expect("region"), opts).expect("open");
        let b = open(
            "shm",
            Region::new(4, 4096).expect("region"),
            TransportOptions::default(),
        )
        .expect("open");
        let p = PeerId::from("b");
        a.add_remote_peer(&p, &b.descriptor().expect("descriptor"))
            .expect("add");
        let w = a.write_blocks(&p, &[0, 1], &[2, 3]).expect("write");
        let n = a.notify(&p, b"x").expect("notify");
        let mut seen = 0;
        while seen < 2 {
            let r = a.poll(Some(&p)).expect("poll");
            assert!(r.failed.is_empty(), "{r:?}");
            seen += r.done.iter().filter(|id| **id == w || **id == n).count();
        }
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

#[test]
fn documented_names_and_labels_reach_the_facade() {
    let got = one_write_and_one_notification(true);
    let find = |name: &str, kind: &str| {
        got.iter()
            .find(|(n, labels, _)| {
                n == name && labels.iter().any(|(k, v)| k == "kind" && v == kind)
            })
            .unwrap_or_else(|| panic!("{name} for {kind} missing from {got:?}"))
    };
    let (_, labels, value) = find(names::TRANSFERS, "write");
    for (k, v) in [("backend", "shm"), ("peer", "b"), ("outcome", "done")] {
        assert!(labels.contains(&(k.into(), v.into())), "{labels:?}");
    }
    assert_eq!(*value, DebugValue::Counter(1));
    let (_, _, bytes) = find(names::BYTES, "write");
    assert_eq!(*bytes, DebugValue::Counter(2 * 4096));
    let (_, _, latency) = find(names::LATENCY, "write");
    assert!(matches!(latency, DebugValue::Histogram(v) if v.len() == 1));
    find(names::SUBMIT, "write");
    find(names::TRANSFERS, "notification");
}

#[test]
fn nothing_reaches_the_facade_when_off() {
    let got = one_write_and_one_notification(false);
    assert!(got.is_empty(), "{got:?}");
}
