//! A libfabric `shm` peer killed with `SIGKILL` leaves its endpoints' regions in `/dev/shm`
//! (16 MiB each): the next transport to open on the provider removes them
//! (`blockwire_libfabric::reap_stale_shm_files`), and nothing of a live process. A test binary
//! of its own: no other test of this process opens a transport meanwhile (each open reaps), so
//! what the kill left is seen before the open removes it.

/// Killing a peer and opening a new transport leaves `/dev/shm` as it was before the peer
/// started; the files of a live peer process and of this process's open transport are
/// untouched, and both still move bytes.
#[cfg(feature = "libfabric")]
#[test]
fn libfabric_shm_killed_peer_leaves_nothing_once_a_transport_opens() {
    use std::collections::BTreeSet;
    use std::path::Path;

    use blockwire_conformance::dev_shm::{DIR, named_for};
    use blockwire_conformance::peer::{Request, SpawnedPeer, open_any};

    let exe = env!("CARGO_BIN_EXE_blockwire-peer");
    let opts = "provider=shm";
    let (blocks, len) = (4, 4096);
    let me = open_any("libfabric", blocks, len, opts).expect("open");
    let descriptor = me.descriptor().expect("descriptor");
    let mut live = SpawnedPeer::spawn(exe, "libfabric", blocks, len, 1, opts).expect("spawn");
    let mut victim = SpawnedPeer::spawn(exe, "libfabric", blocks, len, 2, opts).expect("spawn");
    let pid = victim.pid();
    // The victim's receiving endpoint and one of its own for its peer, this process, which it
    // writes to (so it maps this process's region too).
    victim
        .expect_ok(&Request::add("parent", &descriptor))
        .expect("the victim adds this process");
    victim
        .expect_ok(&Request::Write {
            name: "parent".into(),
            pairs: vec![(0, 1)],
        })
        .expect("the victim writes");
    let victims = named_for(pid);
    assert!(
        victims.len() >= 2,
        "the peer's two endpoints made no files: {victims:?}"
    );
    live.expect_ok(&Request::add("parent", &descriptor))
        .expect("the live peer adds this process");
    // Its endpoint for this process opens in the background after the add, or at its first
    // post: a write makes sure its file is there.
    live.expect_ok(&Request::Write {
        name: "parent".into(),
        pairs: vec![(0, 3)],
    })
    .expect("the live peer writes");
    let alive: BTreeSet<String> = named_for(std::process::id())
        .union(&named_for(live.pid()))
        .cloned()
        .collect();
    assert!(alive.len() >= 3, "live endpoints without files: {alive:?}");

    victim.kill().expect("kill");
    assert_eq!(
        named_for(pid),
        victims,
        "SIGKILL should leave the peer's files (the case this test is about)"
    );
    let fresh = open_any("libfabric", blocks, len, opts).expect("open after the kill");
    let left = named_for(pid);
    assert!(
        left.is_empty(),
        "the killed peer's files are still in {DIR}: {left:?}"
    );
    for name in &alive {
        assert!(
            Path::new(DIR).join(name).exists(),
            "{name}, a live process's file, was removed"
        );
    }
    // Nothing is left for an operator's call either.
    let report = blockwire_libfabric::reap_stale_shm_files().expect("reap");
    let prefix = format!("{pid}:");
    assert!(
        !report.removed.iter().any(|p| p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&prefix))),
        "{report:?}"
    );
    // The live endpoints still work: the live peer writes into this process's region.
    live.expect_ok(&Request::Write {
        name: "parent".into(),
        pairs: vec![(0, 2)],
    })
    .expect("the live peer writes after the reap");
    let mut block = vec![0u8; len];
    me.region().read_block(2, &mut block).expect("read");
    assert!(
        block.iter().any(|&b| b != 0),
        "the live peer's write did not land"
    );
    live.quit().expect("quit");
    fresh.close().expect("close");
    me.close().expect("close");
}
