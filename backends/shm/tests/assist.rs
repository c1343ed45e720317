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
    let base = mem.as_mut_ptr();
    let span = RegionSpan::new(NonNull::new(base).expect("non-null"), BLOCKS, LEN).expect("span");
    let options = BackendOptions::new()
        .with("copy_threads", "1")
        .with("assist_bytes", assist_bytes.to_string());
    // SAFETY: `mem` outlives the backend (dropped at the end of this function, before it) and
    // is read only after the transfers that write it ended.
    let b = unsafe { ShmBackend::open(span, options) }.expect("open");
    let desc = PeerDescriptor::new("shm", b.address(), base as u64, BLOCKS, LEN as u64, "");
    let peer = b.connect(&desc).expect("connect to itself");
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
