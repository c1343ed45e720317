//! The caller's side of the agent's lock: observing and releasing a transfer, and letting a
//! peer go, never wait for it (another thread may hold it across a post that copies the data
//! inside NIXL); the stall watchdog's look (`state_blocking`) does. A post waiting for it
//! holds no peer's close fence yet.

use std::ptr::NonNull;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use blockwire_core::{
    Backend, BackendOptions, Op, OpenBackend, PeerDescriptor, RegionSpan, XferState,
};

use crate::{NixlBackend, NixlXfer};

const BLOCKS: u32 = 4;
const BLOCK_LEN: usize = 4096;

/// Long enough for any machine to observe a transfer; a call that has not returned by then
/// is waiting for the lock this test holds, and would wait forever.
const HUNG: Duration = Duration::from_secs(20);

fn span(mem: &mut [u8]) -> RegionSpan {
    let base = NonNull::new(mem.as_mut_ptr()).expect("a vector's pointer is not null");
    RegionSpan::new(base, BLOCKS, BLOCK_LEN).expect("span")
}

/// Observes `x` until it is terminal (its state from the last observation).
fn settle(b: &NixlBackend, x: &mut NixlXfer) -> XferState {
    let deadline = Instant::now() + HUNG;
    loop {
        let state = b.state(x);
        if state != XferState::Running || Instant::now() > deadline {
            return state;
        }
        std::thread::yield_now();
    }
}

/// One item per try, for [`HUNG`]: a case that needs NIXL to leave a transfer running posts
/// again until it does.
fn tries() -> impl Iterator<Item = ()> {
    let deadline = Instant::now() + HUNG;
    std::iter::from_fn(move || (Instant::now() < deadline).then_some(()))
}

/// Two backends over `a_mem` and `b_mem`, and `b`'s descriptor.
///
/// # Safety
///
/// Both memories outlive both backends.
unsafe fn open_pair(
    a_mem: &mut [u8],
    b_mem: &mut [u8],
) -> (NixlBackend, NixlBackend, PeerDescriptor) {
    let b_base = b_mem.as_ptr() as u64;
    // SAFETY: the caller keeps both memories alive for the backends.
    let (a, b) = unsafe {
        (
            NixlBackend::open(span(a_mem), BackendOptions::new()).expect("open a"),
            NixlBackend::open(span(b_mem), BackendOptions::new()).expect("open b"),
        )
    };
    let desc = PeerDescriptor::new("nixl", b.address(), b_base, BLOCKS, BLOCK_LEN as u64, "");
    (a, b, desc)
}

#[test]
fn observing_and_releasing_never_wait_for_the_agents_lock() {
    let (mut a_mem, mut b_mem) = (vec![7u8; 4 * BLOCK_LEN], vec![0u8; 4 * BLOCK_LEN]);
    // SAFETY: both vectors outlive both backends, dropped before them at the end.
    let (a, b, desc) = unsafe { open_pair(&mut a_mem, &mut b_mem) };
    let peer = a.connect(&desc).expect("connect");
    // A second transfer posted behind the first is left running by NIXL, nearly always; one
    // that finished inside its post is done without a look: the pair is tried again, for as
    // long as it takes (a loaded machine made 20 tries in a row finish inside the post).
    let (mut first, second) = tries()
        .find_map(|()| {
            let mut first = a.post(&peer, Op::Write, &[0], &[1]).expect("post");
            let second = a.post(&peer, Op::Write, &[2], &[3]).expect("post");
            if second.outcome.is_none() {
                return Some((first, second));
            }
            assert_eq!(settle(&a, &mut first), XferState::Done);
            assert!(a.release(first).is_ok() && a.release(second).is_ok());
            None
        })
        .expect("NIXL finished every second transfer inside its post, for 20 s");
    assert_eq!(settle(&a, &mut first), XferState::Done);

    let mut second = std::thread::scope(|s| {
        // Another thread inside NIXL, as the posting thread is during a post.
        let held = a.inner.lock();
        let (tx, rx) = mpsc::channel();
        let a = &a;
        s.spawn(move || {
            let mut second = second;
            let seen = a.state(&mut second);
            let released = a.release(first).is_ok();
            let parked = a.inner.parked().0;
            let _ = tx.send((seen, released, parked, second));
        });
        let (seen, released, parked, second) = rx
            .recv_timeout(HUNG)
            .expect("state or release waited for the agent's lock");
        assert_eq!(
            seen,
            XferState::Running,
            "not observed while the lock is held"
        );
        assert!(
            released,
            "a finished transfer is released (parked), not refused"
        );
        assert_eq!(parked, 1);
        assert_eq!(
            a.stats().live_transfers,
            1,
            "a parked request's transfer is not live"
        );
        drop(held);
        second
    });

    // With the lock free, the transfer is observed, and its release takes the parked one.
    assert_eq!(settle(&a, &mut second), XferState::Done);
    assert!(a.release(second).is_ok());
    assert_eq!(a.inner.parked(), (0, 0));
    assert_eq!(a.stats().live_transfers, 0);

    // One parked at revoke is released before the agent goes.
    let mut third = a.post(&peer, Op::Write, &[1], &[0]).expect("post");
    assert_eq!(settle(&a, &mut third), XferState::Done);
    std::thread::scope(|s| {
        let held = a.inner.lock();
        let (tx, rx) = mpsc::channel();
        let a = &a;
        s.spawn(move || {
            let _ = tx.send(a.release(third).is_ok());
        });
        assert!(rx.recv_timeout(HUNG).expect("release waited for the lock"));
        assert_eq!(a.inner.parked(), (1, 0));
        drop(held);
    });
    // Released by revoke at the latest (the notification thread may take the lock first).
    a.disconnect(peer);
    a.revoke();
    assert_eq!(a.inner.parked(), (0, 0));
    assert_eq!(a.stats().live_transfers, 0);
    drop((a, b));
    assert_eq!(
        b_mem[BLOCK_LEN..2 * BLOCK_LEN],
        [7u8; BLOCK_LEN],
        "block 0 landed in 1"
    );
    assert_eq!(
        b_mem[3 * BLOCK_LEN..],
        [7u8; BLOCK_LEN],
        "block 2 landed in 3"
    );
    assert_eq!(b_mem[..BLOCK_LEN], [7u8; BLOCK_LEN], "block 1 landed in 0");
    assert_eq!(
        b_mem[2 * BLOCK_LEN..3 * BLOCK_LEN],
        [0u8; BLOCK_LEN],
        "block 2 untouched"
    );
}

#[test]
fn the_stall_watchdogs_look_waits_for_the_agents_lock() {
    let (mut a_mem, mut b_mem) = (vec![7u8; 4 * BLOCK_LEN], vec![0u8; 4 * BLOCK_LEN]);
    // SAFETY: both vectors outlive both backends, dropped before them at the end.
    let (a, b, desc) = unsafe { open_pair(&mut a_mem, &mut b_mem) };
    let peer = a.connect(&desc).expect("connect");
    // One that finished inside its post is done without a look: posted again until NIXL
    // leaves one running.
    let x = tries()
        .find_map(|()| {
            let x = a.post(&peer, Op::Write, &[0], &[1]).expect("post");
            if x.outcome.is_none() {
                return Some(x);
            }
            assert!(a.release(x).is_ok());
            None
        })
        .expect("NIXL finished every transfer inside its post, for 20 s");
    let mut x = std::thread::scope(|s| {
        let held = a.inner.lock();
        let (tx, rx) = mpsc::channel();
        let a = &a;
        s.spawn(move || {
            let mut x = x;
            let seen = a.state_blocking(&mut x);
            let _ = tx.send((seen, x));
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "state_blocking answered without the agent's lock"
        );
        drop(held);
        let (seen, x) = rx.recv_timeout(HUNG).expect("state_blocking hung");
        assert!(
            matches!(seen, XferState::Done | XferState::Running),
            "{seen:?}"
        );
        x
    });
    assert_eq!(settle(&a, &mut x), XferState::Done);
    assert!(a.release(x).is_ok());
    a.disconnect(peer);
    a.revoke();
    drop((a, b));
    assert_eq!(
        b_mem[BLOCK_LEN..2 * BLOCK_LEN],
        [7u8; BLOCK_LEN],
        "block 0 landed in 1"
    );
}

#[test]
fn letting_a_peer_go_never_waits_for_the_agents_lock() {
    let (mut a_mem, mut b_mem) = (vec![7u8; 4 * BLOCK_LEN], vec![0u8; 4 * BLOCK_LEN]);
    // SAFETY: both vectors outlive both backends, dropped before them at the end.
    let (a, b, desc) = unsafe { open_pair(&mut a_mem, &mut b_mem) };
    let peer = a.connect(&desc).expect("connect");
    // Scattered blocks: the peer's per-block list is prepared, and is what parking keeps.
    let mut x = a.post(&peer, Op::Write, &[0, 2], &[1, 3]).expect("post");
    assert_eq!(settle(&a, &mut x), XferState::Done);
    assert!(a.release(x).is_ok());
    assert_eq!(a.stats().connected_peers, 1);

    std::thread::scope(|s| {
        // Another thread inside NIXL, as the posting thread is during a post.
        let held = a.inner.lock();
        let (tx, rx) = mpsc::channel();
        let a = &a;
        s.spawn(move || {
            a.disconnect(peer);
            let _ = tx.send(());
        });
        rx.recv_timeout(HUNG)
            .expect("disconnect waited for the agent's lock");
        assert_eq!(a.inner.parked(), (0, 1));
        assert_eq!(
            a.stats().connected_peers,
            0,
            "a peer let go is not connected"
        );
        let remotes = held.as_ref().map(|inner| inner.remotes.len());
        assert_eq!(remotes, Some(1), "its agent's metadata waits for the lock");
        drop(held);
    });

    // The notification thread takes the lock within milliseconds and releases the peer,
    // leaving its agent's metadata idle (its only peer), with no call to the backend.
    let deadline = Instant::now() + HUNG;
    while a.inner.parked() != (0, 0) {
        assert!(
            Instant::now() < deadline,
            "the parked peer was never released"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let in_use = a.inner.lock().as_ref().map(|inner| {
        (
            inner.remotes.values().filter(|r| r.peers > 0).count(),
            inner.idle.len(),
        )
    });
    assert_eq!(in_use, Some((0, 1)), "the agent is loaded, idle");
    // Connected again, it moves bytes: nothing of the former connection stands in the way.
    let peer = a.connect(&desc).expect("connect again");
    let mut x = a.post(&peer, Op::Write, &[1], &[0]).expect("post");
    assert_eq!(settle(&a, &mut x), XferState::Done);
    assert!(a.release(x).is_ok());
    a.disconnect(peer);
    a.revoke();
    drop((a, b));
    assert_eq!(b_mem[..BLOCK_LEN], [7u8; BLOCK_LEN], "block 1 landed in 0");
    assert_eq!(
        b_mem[BLOCK_LEN..2 * BLOCK_LEN],
        [7u8; BLOCK_LEN],
        "block 0 in 1"
    );
    assert_eq!(b_mem[3 * BLOCK_LEN..], [7u8; BLOCK_LEN], "block 2 in 3");
    assert_eq!(
        b_mem[2 * BLOCK_LEN..3 * BLOCK_LEN],
        [0u8; BLOCK_LEN],
        "block 2 untouched"
    );
}

#[test]
fn a_post_waiting_for_the_agents_lock_does_not_hold_off_the_peers_close() {
    let (mut a_mem, mut b_mem) = (vec![7u8; 4 * BLOCK_LEN], vec![0u8; 4 * BLOCK_LEN]);
    // SAFETY: both vectors outlive both backends, dropped before them at the end.
    let (a, b, desc) = unsafe { open_pair(&mut a_mem, &mut b_mem) };
    let peer = a.connect(&desc).expect("connect");
    let posted = std::thread::scope(|s| {
        // Another post inside NIXL, copying: this one waits for the agent's lock.
        let held = a.inner.lock();
        let (a, peer) = (&a, &peer);
        let waiting = s.spawn(move || a.post(peer, Op::Write, &[0], &[1]).map(|_| ()));
        std::thread::sleep(Duration::from_millis(100));
        // The target's close: a post that has not reached NIXL yet holds nothing it waits for
        // (it would give up after CLOSE_WAIT and say so, an `Err`).
        let closed = b.fence.close();
        assert!(
            closed.is_ok(),
            "the close waited for a post not yet made: {closed:?}"
        );
        drop(held);
        waiting.join().expect("join")
    });
    let refused = posted.expect_err("a post made after the target's close");
    assert_eq!(
        refused.kind(),
        blockwire_core::BackendErrorKind::RemoteDisconnect
    );
    a.disconnect(peer);
    drop((a, b));
    assert_eq!(
        b_mem[BLOCK_LEN..2 * BLOCK_LEN],
        [0u8; BLOCK_LEN],
        "it landed"
    );
}
