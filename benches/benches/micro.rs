//! Criterion micro-benchmarks, per backend compiled in (nixl excepted: it cannot share a
//! process with the system UCX): the cost of one small write + poll round, `poll(Some(peer))`
//! with nothing in flight against 10,000 transfers in flight to other peers, and
//! `add_remote_peer_async` until published. `cargo bench -p blockwire-bench`.

// criterion_group!/criterion_main! generate undocumented public functions.
#![allow(missing_docs)]

use std::hint::black_box;

use blockwire::{PeerId, Region, Transport, TransportOptions};
use blockwire_conformance::{Faulty, Fixture, Setting, Spec};
use criterion::{Criterion, criterion_group, criterion_main};

/// Every backend compiled in that opens in this process (nixl runs in its own binary).
fn usable_backends() -> Vec<&'static str> {
    blockwire::backends()
        .iter()
        .copied()
        .filter(|b| {
            let region = Region::new(1, 4096).expect("region");
            blockwire::open(b, region, TransportOptions::default()).is_ok()
        })
        .collect()
}

fn write_poll_round(c: &mut Criterion) {
    for backend in usable_backends() {
        let open = || {
            blockwire::open(
                backend,
                Region::new(64, 4096).expect("region"),
                TransportOptions::default(),
            )
            .expect("open")
        };
        let (a, b) = (open(), open());
        let peer = PeerId::from("b");
        a.add_remote_peer(&peer, &b.descriptor().expect("descriptor"))
            .expect("add");
        c.bench_function(
            &format!("{backend} write_blocks + poll, one 4 KiB block"),
            |bench| {
                bench.iter(|| {
                    let id = a.write_blocks(&peer, &[1], &[2]).expect("write");
                    loop {
                        let r = a.poll(Some(&peer)).expect("poll");
                        assert!(r.failed.is_empty(), "{backend}: {:?}", r.failed);
                        if r.done.contains(&id) {
                            break;
                        }
                    }
                })
            },
        );
    }
}

fn scoped_poll(c: &mut Criterion) {
    // Transfers to other peers are held running by the fault wrapper, so they stay in flight.
    let fx = Faulty(Setting::<blockwire_shm::ShmBackend>::default());
    let o = fx.open(&Spec::new(64, 4096)).expect("open");
    let t = &o.transport;
    let plan = o.faults.as_ref().expect("faults");
    let target = fx.open(&Spec::new(64, 4096)).expect("open").transport;
    let mine = PeerId::from("mine");
    t.add_remote_peer(&mine, &target.descriptor().expect("descriptor"))
        .expect("add");
    c.bench_function("poll(Some(peer)), nothing in flight anywhere", |bench| {
        bench.iter(|| black_box(t.poll(Some(&mine)).expect("poll")))
    });
    let others: Vec<_> = (0..10)
        .map(|_| fx.open(&Spec::new(64, 4096)).expect("open").transport)
        .collect();
    plan.hold_transfers();
    for (i, other) in others.iter().enumerate() {
        let p = PeerId::from(format!("other-{i}"));
        t.add_remote_peer(&p, &other.descriptor().expect("descriptor"))
            .expect("add");
        for k in 0..1000u32 {
            t.write_blocks(&p, &[k % 64], &[k % 64]).expect("write");
        }
    }
    c.bench_function(
        "poll(Some(peer)), 10,000 in flight to other peers",
        |bench| bench.iter(|| black_box(t.poll(Some(&mine)).expect("poll"))),
    );
    plan.release_transfers();
}

fn registration(c: &mut Criterion) {
    for backend in usable_backends() {
        let open = |n| {
            blockwire::open(
                backend,
                Region::new(n, 64).expect("region"),
                TransportOptions::default(),
            )
            .expect("open")
        };
        let (a, b) = (open(64), open(19_599));
        let desc = b.descriptor().expect("descriptor");
        let peer = PeerId::from("b");
        c.bench_function(
            &format!("{backend} add_remote_peer_async until published, 19,599 blocks"),
            |bench| {
                bench.iter(|| {
                    a.add_remote_peer_async(&peer, &desc)
                        .wait()
                        .expect("published");
                    a.remove_remote_peer(&peer).expect("remove");
                })
            },
        );
    }
}

criterion_group!(benches, write_poll_round, scoped_poll, registration);
criterion_main!(benches);
