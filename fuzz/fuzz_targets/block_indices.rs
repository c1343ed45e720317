//! Fuzz target `block_indices`: index lists of WRITE and READ from untrusted input.
//!
//! A connected pair of shm transports (`a`: 8 blocks, `b`: 6 blocks, 32 bytes each, copied in
//! 48-byte chunks so pieces straddle blocks) is opened once per process, each registered as
//! the other's peer. Each input picks the initiating side, the operation and two index lists
//! (mostly small indices, in and just out of range; an escape byte gives any `u32`; the lists
//! usually, not always, have equal lengths).
//!
//! Before each call both regions are refilled with a pattern unique to the block, the byte and
//! the iteration. A reference model of the contract (equal non-zero lengths, every index in
//! range of its own side, no destination block twice) says whether the call must succeed.
//!
//! Property checked:
//!
//! - a call the model refuses returns `Err` (and the model and the transport agree the other
//!   way: a valid call is never refused), tracks nothing, and leaves both regions
//!   byte-identical;
//! - a call the model accepts returns an id that `poll` reports as done (never failed) within
//!   a bounded time, after which each destination block holds its source block's bytes and
//!   every other byte of both regions is unchanged.

#![no_main]

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use blockwire::{AnyTransport, BlockIndex, Op, PeerId, Region, Transport, TransportOptions};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

const A_BLOCKS: u32 = 8;
const B_BLOCKS: u32 = 6;
const BLOCK_LEN: usize = 32;
const MAX_LIST: usize = 24;
/// A transfer of a few hundred bytes finishes in microseconds; this only bounds a hang.
const DONE_WITHIN: Duration = Duration::from_secs(10);

struct Pair {
    a: AnyTransport,
    b: AnyTransport,
    /// `b` as `a`'s peer, and `a` as `b`'s.
    a_to_b: PeerId,
    b_to_a: PeerId,
}

fn open(blocks: u32) -> AnyTransport {
    let opts = TransportOptions::default()
        .with_backend_option("copy_threads", "1")
        .with_backend_option("chunk_bytes", "48");
    blockwire::open("shm", Region::new(blocks, BLOCK_LEN).expect("region"), opts).expect("open shm")
}

static PAIR: LazyLock<Pair> = LazyLock::new(|| {
    let a = open(A_BLOCKS);
    let b = open(B_BLOCKS);
    let (a_to_b, b_to_a) = (PeerId::from("b"), PeerId::from("a"));
    a.add_remote_peer(&a_to_b, &b.descriptor().expect("descriptor"))
        .expect("connect a to b");
    b.add_remote_peer(&b_to_a, &a.descriptor().expect("descriptor"))
        .expect("connect b to a");
    Pair {
        a,
        b,
        a_to_b,
        b_to_a,
    }
});

/// Changes every iteration, so bytes left over from an earlier input are never mistaken for
/// the right ones.
static GENERATION: AtomicU8 = AtomicU8::new(0);

/// Refills every block with bytes unique to (region, block, offset, generation) and returns
/// the blocks written.
fn refill(t: &AnyTransport, salt: u8, generation: u8) -> Vec<Vec<u8>> {
    (0..t.num_blocks())
        .map(|i| {
            let block: Vec<u8> = (0..t.block_len())
                .map(|j| (j as u8) ^ (i as u8).wrapping_mul(37) ^ salt ^ generation.rotate_left(3))
                .collect();
            t.region().write_block(i, &block).expect("write pattern");
            block
        })
        .collect()
}

fn snapshot(t: &AnyTransport) -> Vec<Vec<u8>> {
    (0..t.num_blocks())
        .map(|i| t.region().block(i).expect("read block"))
        .collect()
}

/// Mostly indices in `0..16` (both regions are smaller, so just out of range is common);
/// `0xff` escapes to any `u32`.
fn index(u: &mut Unstructured<'_>) -> ArbResult<BlockIndex> {
    let b: u8 = u.arbitrary()?;
    if b == 0xff {
        u.arbitrary()
    } else {
        Ok(BlockIndex::from(b & 0x0f))
    }
}

fn list(u: &mut Unstructured<'_>, len: usize) -> ArbResult<Vec<BlockIndex>> {
    (0..len).map(|_| index(u)).collect()
}

struct Case {
    from_b: bool,
    op: Op,
    local: Vec<BlockIndex>,
    remote: Vec<BlockIndex>,
}

fn case(data: &[u8]) -> ArbResult<Case> {
    let mut u = Unstructured::new(data);
    let flags: u8 = u.arbitrary()?;
    let local_len = usize::from(u.arbitrary::<u8>()?) % (MAX_LIST + 1);
    // Usually the same length; bit 2 asks for an independent one.
    let remote_len = if flags & 4 == 0 {
        local_len
    } else {
        usize::from(u.arbitrary::<u8>()?) % (MAX_LIST + 1)
    };
    let local = list(&mut u, local_len)?;
    let remote = list(&mut u, remote_len)?;
    Ok(Case {
        from_b: flags & 1 != 0,
        op: if flags & 2 == 0 { Op::Write } else { Op::Read },
        local,
        remote,
    })
}

/// The contract: equal non-zero lengths, indices in range, no destination block twice.
fn valid(c: &Case, local_blocks: u32, remote_blocks: u32) -> bool {
    let dest = match c.op {
        Op::Write => &c.remote,
        Op::Read => &c.local,
    };
    let mut seen = std::collections::HashSet::new();
    c.local.len() == c.remote.len()
        && !c.local.is_empty()
        && c.local.iter().all(|&i| i < local_blocks)
        && c.remote.iter().all(|&i| i < remote_blocks)
        && dest.iter().all(|&i| seen.insert(i))
}

fuzz_target!(|data: &[u8]| {
    let Ok(c) = case(data) else {
        return;
    };
    let pair = &*PAIR;
    let (me, other, peer) = if c.from_b {
        (&pair.b, &pair.a, &pair.b_to_a)
    } else {
        (&pair.a, &pair.b, &pair.a_to_b)
    };
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
    let mine = refill(me, 0x11, generation);
    let theirs = refill(other, 0x92, generation);
    let expect_ok = valid(&c, me.num_blocks(), other.num_blocks());

    let result = match c.op {
        Op::Write => me.write_blocks(peer, &c.local, &c.remote),
        Op::Read => me.read_blocks(peer, &c.local, &c.remote),
    };
    let (mut want_mine, mut want_theirs) = (mine.clone(), theirs.clone());
    match result {
        Err(e) => {
            assert!(!expect_ok, "a valid {:?} was refused: {e:?}", c.op);
            assert_eq!(
                me.backend_stats().live_transfers,
                0,
                "a refused call left a transfer in the backend"
            );
            let reported = me.poll(None).expect("poll");
            assert!(
                reported.is_empty(),
                "a refused call was tracked: {reported:?}"
            );
        }
        Ok(id) => {
            assert!(expect_ok, "an invalid {:?} was accepted as {id:?}", c.op);
            let deadline = Instant::now() + DONE_WITHIN;
            loop {
                let r = me.poll(Some(peer)).expect("poll");
                assert!(r.failed.is_empty(), "transfer failed: {r:?}");
                if r.done.contains(&id) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "transfer {id:?} not done in time"
                );
                std::thread::yield_now();
            }
            for (&l, &r) in c.local.iter().zip(&c.remote) {
                let (l, r) = (l as usize, r as usize);
                match c.op {
                    Op::Write => want_theirs[r] = mine[l].clone(),
                    Op::Read => want_mine[l] = theirs[r].clone(),
                }
            }
        }
    }
    let (got_mine, got_theirs) = (snapshot(me), snapshot(other));
    assert!(
        got_theirs == want_theirs,
        "peer region wrong after {:?} local={:?} remote={:?}",
        c.op,
        c.local,
        c.remote
    );
    assert!(
        got_mine == want_mine,
        "local region wrong after {:?} local={:?} remote={:?}",
        c.op,
        c.local,
        c.remote
    );
});
