//! Both sides of a close fence in one process, each case both ways a peer holds it: as a peer
//! of this process (`open`: the count and flag) and as one of another process would
//! (`open_shared`: its own open of the file, whose locks conflict with the target's).

use super::*;
use std::sync::mpsc;

type Open = fn(&FenceRef) -> Option<Arc<PeerFence>>;

const OPENS: [(&str, Open); 2] = [
    ("this process", PeerFence::open),
    ("shared", PeerFence::open_shared),
];

fn pair(open: Open) -> (Arc<CloseFence>, Arc<PeerFence>) {
    let target = CloseFence::create().expect("create");
    let peer = open(&target.reference()).expect("reopen");
    (Arc::new(target), peer)
}

/// Closes `target` on a thread of its own: the result comes on the receiver.
fn close_on_a_thread(
    target: &Arc<CloseFence>,
) -> (
    mpsc::Receiver<Result<Duration, Duration>>,
    std::thread::JoinHandle<()>,
) {
    let (done, finished) = mpsc::channel();
    let target = target.clone();
    let thread = std::thread::spawn(move || done.send(target.close()).expect("send"));
    (finished, thread)
}

#[test]
fn a_post_is_held_before_the_close_and_refused_after_it() {
    for (how, open) in OPENS {
        let (target, peer) = pair(open);
        drop(peer.hold().expect("before the close"));
        assert!(target.close().is_ok(), "{how}");
        let why = peer
            .hold()
            .err()
            .expect("a post after the close was admitted");
        assert!(why.contains("closed"), "{how}: {why}");
        assert!(target.close().is_ok(), "{how}: a second close");
    }
}

#[test]
fn the_close_marks_first_then_waits_for_a_post_in_flight() {
    for (how, open) in OPENS {
        let (target, peer) = pair(open);
        let other = open(&target.reference()).expect("a second peer");
        let post = peer.hold().expect("a post in flight");
        let (finished, closing) = close_on_a_thread(&target);
        // Marked before the wait: a post that checks now is refused.
        let started = Instant::now();
        while other.hold().is_ok() {
            assert!(started.elapsed() < CLOSE_WAIT, "{how}: no mark first");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            finished.recv_timeout(Duration::from_millis(100)).is_err(),
            "{how}: the close returned while a post that checked before it was running"
        );
        drop(post);
        let waited = finished
            .recv_timeout(CLOSE_WAIT)
            .expect("the close returned")
            .expect("within the bound");
        assert!(waited >= Duration::from_millis(100), "{how}: {waited:?}");
        closing.join().expect("join");
    }
}

#[test]
fn one_posts_end_leaves_anothers_hold_in_place() {
    for (how, open) in OPENS {
        let (target, peer) = pair(open);
        let first = peer.hold().expect("first");
        let second = peer.hold().expect("second");
        drop(first);
        let (finished, closing) = close_on_a_thread(&target);
        assert!(
            finished.recv_timeout(Duration::from_millis(100)).is_err(),
            "{how}: one post's end let the close past another post still holding"
        );
        drop(second);
        assert!(finished.recv_timeout(CLOSE_WAIT).expect("returned").is_ok());
        closing.join().expect("join");
    }
}

#[test]
fn a_peer_of_this_process_takes_no_file_lock() {
    let target = CloseFence::create().expect("create");
    let file = File::open(format!("/proc/self/fd/{}", target.reference().fd)).expect("open");
    let local = PeerFence::open(&target.reference()).expect("open");
    let shared = PeerFence::open_shared(&target.reference()).expect("open");
    let held = local.hold().expect("hold");
    assert!(
        try_flock(&file, libc::LOCK_EX).expect("flock"),
        "a local hold took the lock"
    );
    assert!(try_flock(&file, libc::LOCK_UN).expect("unlock"));
    drop(held);
    let held = shared.hold().expect("hold");
    assert!(
        !try_flock(&file, libc::LOCK_EX).expect("flock"),
        "a shared hold took no lock"
    );
    drop(held);
}

#[test]
fn the_close_gives_up_on_a_post_that_never_returns() {
    for (how, open) in OPENS {
        let (target, peer) = pair(open);
        let _stuck = peer.hold().expect("a post");
        let waited = target.close().expect_err("the close waited it out");
        assert!(waited >= CLOSE_WAIT, "{how}: {waited:?}");
        assert!(waited < CLOSE_WAIT * 3, "{how}: {waited:?}");
    }
}

#[test]
fn only_the_fence_named_is_reopened() {
    let target = CloseFence::create().expect("create");
    for (how, open) in OPENS {
        let mut wrong = target.reference();
        wrong.token[0] ^= 1;
        assert!(open(&wrong).is_none(), "{how}: a wrong token");
        let stdin = FenceRef {
            fd: 0,
            ..target.reference()
        };
        assert!(open(&stdin).is_none(), "{how}: another descriptor");
        let gone = FenceRef {
            pid: u32::MAX,
            ..target.reference()
        };
        assert!(open(&gone).is_none(), "{how}: no such process");
    }
}

#[test]
fn a_malformed_reference_is_refused() {
    let bytes = AddressWriter::new(b"").u8(2).finish();
    assert!(FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).is_err());
    let bytes = AddressWriter::new(b"")
        .u8(1)
        .u64(u64::MAX)
        .u64(3)
        .bytes(&[0; TOKEN_LEN])
        .finish();
    assert!(FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).is_err());
    let bytes = AddressWriter::new(b"")
        .u8(1)
        .u64(1)
        .u64(3)
        .bytes(&[0; 4])
        .finish();
    assert!(FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).is_err());
    let bytes = FenceRef::write(None, AddressWriter::new(b"")).finish();
    assert_eq!(
        FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).expect("read"),
        None
    );
}

/// A key no other test (or process) publishes under.
fn key(what: &str) -> Vec<u8> {
    format!("fence test {what} in process {}", std::process::id()).into_bytes()
}

#[test]
fn a_published_fence_is_found_by_its_key_and_holds_like_the_addressed_one() {
    for (how, open) in OPENS {
        let key = key(how);
        let mut target = CloseFence::create().expect("create");
        target.publish(&key).expect("publish");
        let found = FenceRef::published(&key).expect("published");
        assert_eq!(found, target.reference(), "{how}");
        assert_eq!(FenceRef::published(b"another key"), None, "{how}");
        let peer = open(&found).expect("reopen");
        drop(peer.hold().expect("before the close"));
        assert!(target.close().is_ok(), "{how}");
        assert!(peer.hold().is_err(), "{how}: a post after the close");
        // Still there after the close (a peer connecting late is refused by the mark), gone
        // with the fence.
        assert_eq!(FenceRef::published(&key), Some(found), "{how}");
        drop(target);
        assert_eq!(FenceRef::published(&key), None, "{how}");
        assert!(!published::path_of(&key).exists(), "{how}");
    }
}

#[test]
fn a_key_published_already_is_not_taken_over_and_a_malformed_file_is_ignored() {
    let key = key("taken");
    let mut first = CloseFence::create().expect("create");
    first.publish(&key).expect("publish");
    let mut second = CloseFence::create().expect("create");
    assert!(
        second.publish(&key).is_err(),
        "took over another fence's key"
    );
    assert_eq!(FenceRef::published(&key), Some(first.reference()));
    drop(second);
    assert_eq!(
        FenceRef::published(&key),
        Some(first.reference()),
        "the loser removed it"
    );
    drop(first);
    let key = self::key("malformed");
    let path = published::path_of(&key);
    for bad in [&b""[..], b"BWFPUB01", &[0u8; 32], &[b'B'; 33]] {
        std::fs::write(&path, bad).expect("write");
        assert_eq!(FenceRef::published(&key), None, "{bad:?}");
    }
    std::fs::remove_file(&path).expect("remove");
}
