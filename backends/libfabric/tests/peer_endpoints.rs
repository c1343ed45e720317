//! On `shm`, each peer's own endpoint (`endpoint_per_peer`) keeps a file in /dev/shm:
//! disconnecting the peer closes it, so adding and removing peers does not pile endpoints
//! up. Its own test binary: it counts this process's /dev/shm files.
//!
//! The endpoint opens in the background after the peer is added, or at its first post
//! (whichever comes first), and the opener thread may hold the peer for the moment it checks
//! it: so the file is looked for after the first post, and its removal awaited briefly.

use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire_core::{
    Backend, BackendOptions, Op, OpenBackend, PeerDescriptor, RegionSpan, XferState,
};
use blockwire_libfabric::OfiBackend;

fn shm_files() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn disconnecting_a_peer_closes_its_endpoint() {
    let (mut a, mut b) = (vec![7u8; 4 * 4096], vec![0u8; 4 * 4096]);
    let span = |v: &mut Vec<u8>| {
        RegionSpan::new(NonNull::new(v.as_mut_ptr()).expect("non-null"), 4, 4096).expect("span")
    };
    let shm = || BackendOptions::new().with("provider", "shm");
    // SAFETY: both vectors outlive both backends, dropped at the end.
    let (ba, bb) = unsafe {
        (
            OfiBackend::open(span(&mut a), shm()).expect("open a"),
            OfiBackend::open(span(&mut b), shm()).expect("open b"),
        )
    };
    let desc = PeerDescriptor::new("libfabric", bb.address(), b.as_ptr() as u64, 4, 4096, "");
    let opened = shm_files();
    for round in 0..3u32 {
        let peer = ba.connect(&desc).expect("connect");
        let mut x = ba.post(&peer, Op::Write, &[round], &[round]).expect("post");
        let with_peer = shm_files();
        assert!(
            with_peer.len() > opened.len(),
            "round {round}: the peer's endpoint made no file in /dev/shm"
        );
        while ba.state(&mut x) == XferState::Running {}
        assert_eq!(ba.state(&mut x), XferState::Done);
        assert!(ba.release(x).is_ok());
        ba.disconnect(peer);
        let deadline = Instant::now() + Duration::from_secs(2);
        while shm_files() != opened && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(shm_files(), opened, "round {round}: left after disconnect");
    }
    drop((ba, bb));
    assert_eq!(b[..3 * 4096], [7u8; 3 * 4096], "the three writes landed");
}
