//! The copy runs on the backend's threads in chunks: a transfer is observable as running, and
//! an abort takes effect between chunks, leaving later blocks untouched.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire_core::{
    Backend, BackendOptions, FailureReason, Op, OpenBackend, PeerDescriptor, RegionSpan, XferState,
};
use blockwire_shm::ShmBackend;

const BLOCKS: u32 = 128;
const LEN: usize = 1 << 20;

fn span(v: &mut [u8]) -> RegionSpan {
    RegionSpan::new(NonNull::new(v.as_mut_ptr()).expect("non-null"), BLOCKS, LEN).expect("span")
}

#[test]
fn a_large_write_is_observed_running_and_an_abort_stops_it_between_chunks() {
    let mut src = vec![0xA5u8; BLOCKS as usize * LEN];
    let mut dst = vec![0u8; BLOCKS as usize * LEN];
    // SAFETY: both buffers outlive both backends (dropped at the end of this test, before the
    // buffers) and are only read through raw copies until then.
    let (a, b) = unsafe {
        (
            ShmBackend::open(span(&mut src), BackendOptions::new()).expect("open"),
            ShmBackend::open(span(&mut dst), BackendOptions::new()).expect("open"),
        )
    };
    let desc = PeerDescriptor::new(
        "shm",
        b.address(),
        dst.as_ptr() as u64,
        BLOCKS,
        LEN as u64,
        "",
    );
    let peer = a.connect(&desc).expect("connect");
    let blocks: Vec<u32> = (0..BLOCKS).collect();
    let posted = Instant::now();
    let mut x = a.post(&peer, Op::Write, &blocks, &blocks).expect("post");
    assert!(
        posted.elapsed() < Duration::from_millis(50),
        "post waited for the copy"
    );
    assert_eq!(a.state(&mut x), XferState::Running);
    a.abort(&mut x);
    let deadline = Instant::now() + Duration::from_secs(10);
    let state = loop {
        match a.state(&mut x) {
            XferState::Running => assert!(Instant::now() < deadline, "abort never took effect"),
            s => break s,
        }
    };
    assert_eq!(state, XferState::Failed(FailureReason::Aborted));
    assert!(a.release(x).is_ok());
    drop((peer, a, b));
    let last = &dst[(BLOCKS as usize - 1) * LEN..];
    assert!(
        last.iter().all(|&v| v == 0),
        "the abort did not stop the copy"
    );
}

#[test]
fn options_are_checked() {
    let mut mem = vec![0u8; BLOCKS as usize * LEN];
    for bad in [
        "copy_threads=0",
        "chunk_bytes=0",
        "chunk_bytes=big",
        "no_such_option=1",
        "copy_kernel=fast",
    ] {
        let opts = BackendOptions::parse_list(bad).expect("k=v");
        // SAFETY: `mem` outlives the backend, which fails to open anyway.
        let r = unsafe { ShmBackend::open(span(&mut mem), opts) };
        assert!(r.is_err(), "{bad} accepted");
    }
}

/// Every copy kernel moves exactly the blocks asked, both ways, with pieces that start and end
/// off cache-line boundaries (odd block and chunk sizes) and are long enough to be streamed.
#[test]
fn every_copy_kernel_moves_exactly_the_blocks_asked_both_ways() {
    const N: u32 = 12;
    const BLOCK: usize = 3 * 64 * 1024 + 37;
    let shape = |v: &mut Vec<u8>| {
        RegionSpan::new(NonNull::new(v.as_mut_ptr()).expect("non-null"), N, BLOCK).expect("span")
    };
    let mut kernels = vec!["auto", "plain"];
    if cfg!(target_arch = "x86_64") {
        kernels.push("stream");
    }
    for kernel in kernels {
        for op in [Op::Write, Op::Read] {
            let pattern = |seed: u8| -> Vec<u8> {
                (0..N as usize * BLOCK)
                    .map(|i| (i % 251) as u8 ^ seed)
                    .collect()
            };
            let mut mine = pattern(0x11);
            let mut theirs = pattern(0x22);
            let (mine_before, theirs_before) = (mine.clone(), theirs.clone());
            let opts = || {
                BackendOptions::parse_list(&format!("copy_kernel={kernel},chunk_bytes=100003"))
                    .expect("k=v")
            };
            // SAFETY: both buffers outlive both backends (dropped before the buffers are read)
            // and are only accessed through raw copies until then.
            let (a, b) = unsafe {
                (
                    ShmBackend::open(shape(&mut mine), opts()).expect("open"),
                    ShmBackend::open(shape(&mut theirs), opts()).expect("open"),
                )
            };
            let desc = PeerDescriptor::new(
                "shm",
                b.address(),
                theirs.as_ptr() as u64,
                N,
                BLOCK as u64,
                "",
            );
            let peer = a.connect(&desc).expect("connect");
            let (local, remote) = ([0u32, 5, 6, 11], [3u32, 4, 10, 0]);
            let mut x = a.post(&peer, op, &local, &remote).expect("post");
            let deadline = Instant::now() + Duration::from_secs(30);
            while a.state(&mut x) == XferState::Running {
                assert!(Instant::now() < deadline, "{kernel} {op:?}: never finished");
                std::thread::yield_now();
            }
            assert_eq!(a.state(&mut x), XferState::Done, "{kernel} {op:?}");
            assert!(a.release(x).is_ok());
            drop((peer, a, b));
            let block = |v: &[u8], i: u32| v[i as usize * BLOCK..(i as usize + 1) * BLOCK].to_vec();
            let (src, src_at, dst, dst_before, dst_at) = match op {
                Op::Write => (&mine_before, &local, &theirs, &theirs_before, &remote),
                _ => (&theirs_before, &remote, &mine, &mine_before, &local),
            };
            for i in 0..N {
                let expected = match dst_at.iter().position(|&d| d == i) {
                    Some(k) => block(src, src_at[k]),
                    None => block(dst_before, i),
                };
                assert!(
                    block(dst, i) == expected,
                    "{kernel} {op:?}: destination block {i} is wrong"
                );
            }
            let source_now = if op == Op::Write { &mine } else { &theirs };
            assert!(source_now == src, "{kernel} {op:?}: the source changed");
        }
    }
}
