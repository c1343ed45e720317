//! On `shm`, each peer's own endpoint (`endpoint_per_peer`) keeps a file in /dev/shm.
//! Disconnecting the peer leaves it open, idle, and connecting to the same peer again reuses
//! it (the peer's region has a slot for each endpoint that ever reached it, 256 at most), so
//! adding and removing peers does not pile endpoints up; closing the backend removes it. Its
//! own test binary: it counts this process's /dev/shm files.
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

/// The tests count this process's files: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This process's files in /dev/shm (the provider names them `<pid>:...`).
fn shm_files() -> BTreeSet<String> {
    let mine = format!("{}:", std::process::id());
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(&mine))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_disconnected_peers_endpoint_is_reused_and_closed_with_the_backend() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = shm_files();
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
    let mut with_peer = None;
    for round in 0..3u32 {
        let peer = ba.connect(&desc).expect("connect");
        let mut x = ba.post(&peer, Op::Write, &[round], &[round]).expect("post");
        let files = shm_files();
        assert!(
            files.len() > opened.len(),
            "round {round}: the peer's endpoint made no file in /dev/shm"
        );
        match &with_peer {
            None => with_peer = Some(files),
            Some(first) => assert_eq!(&files, first, "round {round}: a new endpoint was made"),
        }
        while ba.state(&mut x) == XferState::Running {}
        assert_eq!(ba.state(&mut x), XferState::Done);
        assert!(ba.release(x).is_ok());
        ba.disconnect(peer);
        assert!(
            shm_files().len() > opened.len(),
            "round {round}: the idle endpoint was closed"
        );
    }
    drop((ba, bb));
    let deadline = Instant::now() + Duration::from_secs(2);
    while shm_files() != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(shm_files(), before, "left after the backends closed");
    assert_eq!(b[..3 * 4096], [7u8; 3 * 4096], "the three writes landed");
}

#[test]
fn idle_endpoints_are_bounded_and_those_of_closed_peers_close() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const PEERS: usize = blockwire_libfabric::MAX_IDLE_ENDPOINTS + 4;
    let mut a = vec![0u8; 4096];
    let mut regions: Vec<Vec<u8>> = (0..PEERS).map(|_| vec![0u8; 4096]).collect();
    let shm = || BackendOptions::new().with("provider", "shm");
    let span = |v: &mut Vec<u8>| {
        RegionSpan::new(NonNull::new(v.as_mut_ptr()).expect("non-null"), 1, 4096).expect("span")
    };
    // SAFETY: every vector outlives the backends, dropped before the end.
    let ba = unsafe { OfiBackend::open(span(&mut a), shm()) }.expect("open a");
    let alone = shm_files().len();
    let mut peers: Vec<OfiBackend> = regions
        .iter_mut()
        // SAFETY: as above.
        .map(|r| unsafe { OfiBackend::open(span(r), shm()) }.expect("open a peer"))
        .collect();
    let opened = shm_files().len();
    // Every endpoint, a backend's or a peer's own, keeps the same number of files.
    let per_endpoint = (opened - alone) / PEERS;
    assert!(per_endpoint > 0, "an endpoint keeps a file in /dev/shm");
    let descs: Vec<PeerDescriptor> = peers
        .iter()
        .zip(&regions)
        .map(|(p, r)| PeerDescriptor::new("libfabric", p.address(), r.as_ptr() as u64, 1, 4096, ""))
        .collect();
    for desc in &descs {
        let peer = ba.connect(desc).expect("connect");
        let mut x = ba.post(&peer, Op::Write, &[0], &[0]).expect("post");
        while ba.state(&mut x) == XferState::Running {}
        assert!(ba.release(x).is_ok());
        ba.disconnect(peer);
    }
    assert_eq!(
        shm_files().len(),
        opened + blockwire_libfabric::MAX_IDLE_ENDPOINTS * per_endpoint,
        "idle endpoints beyond the bound closed"
    );
    // The closed peers' idle endpoints go at the next disconnect: the first peer's is left.
    // (A transport's close revokes its backend, which cuts the links to it here.)
    for p in peers.drain(1..) {
        p.revoke();
    }
    ba.disconnect(ba.connect(&descs[0]).expect("connect"));
    let left = alone + 2 * per_endpoint;
    let deadline = Instant::now() + Duration::from_secs(2);
    while shm_files().len() != left && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        shm_files().len(),
        left,
        "this backend's endpoint, the first peer's, and the idle one to it"
    );
    drop((ba, peers));
}
