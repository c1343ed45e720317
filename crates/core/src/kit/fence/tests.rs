//! Both sides of a close fence in one process: the peer's opens are opens of their own, so
//! their locks conflict with the target's as another process's would.

use super::*;
use std::sync::mpsc;

fn pair() -> (CloseFence, Arc<PeerFence>) {
    let target = CloseFence::create().expect("create");
    let peer = PeerFence::open(&target.reference()).expect("reopen");
    (target, peer)
}

#[test]
fn a_post_is_held_before_the_close_and_refused_after_it() {
    let (target, peer) = pair();
    drop(peer.hold().expect("before the close"));
    assert!(target.close().is_ok());
    let why = peer
        .hold()
        .err()
        .expect("a post after the close was admitted");
    assert!(why.contains("closed"), "{why}");
    assert!(target.close().is_ok(), "a second close");
}

#[test]
fn the_close_marks_first_then_waits_for_a_post_in_flight() {
    let (target, peer) = pair();
    let other = PeerFence::open(&target.reference()).expect("a second peer");
    let post = peer.hold().expect("a post in flight");
    let target = Arc::new(target);
    let (done, finished) = mpsc::channel();
    let closing = {
        let target = target.clone();
        std::thread::spawn(move || done.send(target.close()).expect("send"))
    };
    // Marked before the wait: a post that checks now is refused.
    let started = Instant::now();
    while other.hold().is_ok() {
        assert!(
            started.elapsed() < CLOSE_WAIT,
            "the close did not mark first"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        finished.recv_timeout(Duration::from_millis(100)).is_err(),
        "the close returned while a post that checked before it was running"
    );
    drop(post);
    let waited = finished
        .recv_timeout(CLOSE_WAIT)
        .expect("the close returned")
        .expect("within the bound");
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    closing.join().expect("join");
}

#[test]
fn one_posts_end_leaves_anothers_hold_in_place() {
    let (target, peer) = pair();
    let first = peer.hold().expect("first");
    let second = peer.hold().expect("second");
    drop(first);
    let file = File::open(format!("/proc/self/fd/{}", target.reference().fd)).expect("open");
    assert!(
        !try_flock(&file, libc::LOCK_EX).expect("flock"),
        "one post's end gave back the lock another post still holds"
    );
    drop(second);
    assert!(try_flock(&file, libc::LOCK_EX).expect("flock"));
}

#[test]
fn the_close_gives_up_on_a_post_that_never_returns() {
    let (target, peer) = pair();
    let _stuck = peer.hold().expect("a post");
    let waited = target.close().expect_err("the close waited it out");
    assert!(waited >= CLOSE_WAIT, "{waited:?}");
    assert!(waited < CLOSE_WAIT * 3, "{waited:?}");
}

#[test]
fn only_the_fence_named_is_reopened() {
    let target = CloseFence::create().expect("create");
    let mut wrong = target.reference();
    wrong.token[0] ^= 1;
    assert!(PeerFence::open(&wrong).is_none(), "a wrong token");
    let stdin = FenceRef {
        fd: 0,
        ..target.reference()
    };
    assert!(PeerFence::open(&stdin).is_none(), "another descriptor");
    let gone = FenceRef {
        pid: u32::MAX,
        ..target.reference()
    };
    assert!(PeerFence::open(&gone).is_none(), "no such process");
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
