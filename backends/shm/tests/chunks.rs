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
    ] {
        let opts = BackendOptions::parse_list(bad).expect("k=v");
        // SAFETY: `mem` outlives the backend, which fails to open anyway.
        let r = unsafe { ShmBackend::open(span(&mut mem), opts) };
        assert!(r.is_err(), "{bad} accepted");
    }
}
