//! A caller waiting for its transfers lends its thread to the copy: `Backend::assist` copies
//! the first queued transfer in the calling thread, when it is at most `assist_bytes`.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire_core::{
    Backend, BackendOptions, Op, OpenBackend, PeerDescriptor, RegionSpan, XferState,
};
use blockwire_shm::ShmBackend;

const BLOCKS: u32 = 1024;
const LEN: usize = 64 * 1024;

/// One backend whose single copy thread is busy with a 31 MiB WRITE (into its own region),
/// a 64 KiB WRITE queued behind it, and `assist` taking transfers of at most `assist_bytes`.
fn queued_behind_a_large_copy(
    assist_bytes: usize,
    run: impl FnOnce(&ShmBackend, &mut dyn FnMut() -> XferState),
) {
    let mut mem = vec![0u8; BLOCKS as usize * LEN];
    mem[1010 * LEN..1011 * LEN].fill(0x5A);
    let options = BackendOptions::new()
        .with("copy_threads", "1")
        .with("assist_bytes", assist_bytes.to_string());
    // SAFETY: `mem` outlives the backend (dropped at the end of this function, before it) and
    // is read only after the transfers that write it ended.
    let b = unsafe { open_over(&mut mem, LEN, options) };
    let peer = b
        .connect(&descriptor(&b, &mem, LEN))
        .expect("connect to itself");
    let (from, to): (Vec<u32>, Vec<u32>) = ((0..500).collect(), (500..1000).collect());
    let mut large = b
        .post(&peer, Op::Write, &from, &to)
        .expect("post the large one");
    let mut small = b
        .post(&peer, Op::Write, &[1010], &[1020])
        .expect("post the small one");
    run(&b, &mut || b.state(&mut small));
    let deadline = Instant::now() + Duration::from_secs(30);
    for x in [&mut large, &mut small] {
        while b.state(x) == XferState::Running {
            assert!(Instant::now() < deadline, "a transfer never ended");
            std::thread::yield_now();
        }
        assert_eq!(b.state(x), XferState::Done);
    }
    assert!(b.release(large).is_ok() && b.release(small).is_ok());
    drop((peer, b));
    assert!(
        mem[1020 * LEN..1021 * LEN].iter().all(|&v| v == 0x5A),
        "the small block landed"
    );
}

#[test]
fn a_waiting_caller_copies_a_small_transfer_queued_behind_a_large_one() {
    queued_behind_a_large_copy(LEN, |b, small| {
        // The large transfer is too large for the caller: it waits for the copy thread. Once
        // that thread has taken it, the small one is first in the queue, and the caller
        // copies it in this thread: done when `assist` returns, long before the large one.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !b.assist(Duration::from_secs(1)) {
            assert_eq!(
                small(),
                XferState::Running,
                "the copy thread took the small one first"
            );
            assert!(Instant::now() < deadline, "nothing to assist");
        }
        assert_eq!(
            small(),
            XferState::Done,
            "assist returned before the copy ended"
        );
    });
}

#[test]
fn a_caller_copies_nothing_larger_than_its_budget_or_assist_bytes() {
    // The small transfer is first in the queue for as long as the copy thread works on the
    // large one (milliseconds), and the loops below span that: a caller ignoring its bound
    // would take it there.
    queued_behind_a_large_copy(LEN, |b, _| {
        // 64 KiB at the assumed slowest copy (a byte a nanosecond) needs 65.5 µs.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            assert!(
                !b.assist(Duration::from_micros(60)),
                "copied past the budget"
            );
        }
    });
    queued_behind_a_large_copy(0, |b, _| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            assert!(
                !b.assist(Duration::from_secs(1)),
                "assist_bytes 0 copies nothing"
            );
        }
    });
}

/// Opens an shm backend over `mem`, seen as blocks of `len`.
///
/// # Safety
///
/// `mem` must outlive the backend.
unsafe fn open_over(mem: &mut [u8], len: usize, options: BackendOptions) -> ShmBackend {
    let blocks = u32::try_from(mem.len() / len).expect("blocks");
    let base = NonNull::new(mem.as_mut_ptr()).expect("non-null");
    let span = RegionSpan::new(base, blocks, len).expect("span");
    // SAFETY: the caller's contract: `mem` outlives the backend.
    unsafe { ShmBackend::open(span, options) }.expect("open")
}

/// The descriptor of `b`, a backend over `mem` in blocks of `len`.
fn descriptor(b: &ShmBackend, mem: &[u8], len: usize) -> PeerDescriptor {
    let blocks = u32::try_from(mem.len() / len).expect("blocks");
    PeerDescriptor::new(
        "shm",
        b.address(),
        mem.as_ptr() as u64,
        blocks,
        len as u64,
        "",
    )
}

/// A byte of each 4 KiB of `mem`.
fn sample(mem: &[u8]) -> Vec<u8> {
    mem.iter().step_by(4096).copied().collect()
}

/// When a target was revoked, against the caller's copy into it.
#[derive(Debug, PartialEq)]
enum RevokedCopy {
    /// Before the caller's copy began: nothing of it landed.
    Before,
    /// In the middle of it.
    During,
    /// After it ended.
    After,
    /// The copy thread, not the caller, copied the transfer to the target (on a loaded
    /// machine the caller may not run before the copy thread is free).
    NotByTheCaller,
}

/// Backend `a`'s one copy thread is busy with a 64 MiB WRITE into its own region; a caller
/// copies the 32 MiB WRITE to target `t` queued behind it (`assist`), and `t` is revoked
/// (what its transport's close does) `delay` after that caller began. Checks that nothing
/// lands in `t`'s memory after `revoke` returned, and that the caller's transfer failed as a
/// remote disconnect unless it had ended before; returns when the revoke came.
fn revoke_a_target_during_an_assisted_copy(delay: Duration) -> RevokedCopy {
    const MIB: usize = 1 << 20;
    let mut a_mem = vec![0u8; 160 * MIB];
    a_mem[128 * MIB..].fill(0x5A);
    let mut t_mem = vec![0u8; 32 * MIB];
    let options = BackendOptions::new()
        .with("copy_threads", "1")
        .with("assist_bytes", (32 * MIB).to_string());
    // SAFETY: both vectors outlive the backends, dropped (with every peer and transfer)
    // before this function returns; neither is read while a copy may write it, but for the
    // check below that nothing does after the revoke.
    let (a, t) = unsafe {
        (
            open_over(&mut a_mem, MIB, options),
            open_over(&mut t_mem, MIB, BackendOptions::new()),
        )
    };
    let to_self = a.connect(&descriptor(&a, &a_mem, MIB)).expect("connect");
    let to_t = a.connect(&descriptor(&t, &t_mem, MIB)).expect("connect");
    let (from, to): (Vec<u32>, Vec<u32>) = ((0..64).collect(), (64..128).collect());
    let mut large = a.post(&to_self, Op::Write, &from, &to).expect("post");
    let from: Vec<u32> = (128..160).collect();
    let mut xfer = a
        .post(&to_t, Op::Write, &from, &(0..32).collect::<Vec<u32>>())
        .expect("post");
    let (landed_at_revoke, state, assisted) = std::thread::scope(|s| {
        let caller = s.spawn(|| {
            // The large transfer is first until the copy thread takes it, and larger than
            // `assist_bytes`: the caller copies the one to `t`, unless the copy thread,
            // done with the large one, took it first.
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if a.assist(Duration::from_secs(10)) {
                    return true;
                }
            }
            false
        });
        std::thread::sleep(delay);
        t.revoke();
        // Nothing writes `t_mem` any more (what this test checks). A byte of each 4 KiB,
        // read in microseconds: a copy going on would outrun a whole copy of 32 MiB.
        let landed = sample(&t_mem);
        let assisted = caller.join().expect("the caller");
        (landed, a.state(&mut xfer), assisted)
    });
    assert!(
        sample(&t_mem) == landed_at_revoke,
        "bytes landed in the target after its revoke returned"
    );
    let revoked = match landed_at_revoke.iter().filter(|&&v| v == 0x5A).count() {
        0 => RevokedCopy::Before,
        n if n == landed_at_revoke.len() => RevokedCopy::After,
        _ => RevokedCopy::During,
    };
    match (&revoked, &state) {
        (RevokedCopy::After, XferState::Done) => {}
        (_, XferState::Failed(why)) => assert!(why.is_remote_disconnect(), "failed as {why:?}"),
        other => panic!("a transfer to a revoked target ended {other:?}"),
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.state(&mut large) == XferState::Running {
        assert!(Instant::now() < deadline, "the large transfer never ended");
        std::thread::yield_now();
    }
    assert!(a.release(large).is_ok() && a.release(xfer).is_ok());
    a.disconnect(to_self);
    a.disconnect(to_t);
    drop((a, t));
    if assisted {
        revoked
    } else {
        RevokedCopy::NotByTheCaller
    }
}

#[test]
fn a_target_revoked_during_a_callers_copy_gets_nothing_after() {
    // The revoke should come in the middle of the caller's copy (about 3 ms here): a later
    // try waits less when it came after, more when it came before.
    let mut delay = Duration::from_millis(1);
    for attempt in 1..=20 {
        let revoked = revoke_a_target_during_an_assisted_copy(delay);
        eprintln!("try {attempt}: the revoke {delay:?} after the caller began came {revoked:?}");
        match revoked {
            RevokedCopy::During => return,
            RevokedCopy::Before => delay *= 2,
            RevokedCopy::After => delay /= 2,
            RevokedCopy::NotByTheCaller => {}
        }
    }
    panic!("no revoke came in the middle of the caller's copy in 20 tries");
}
