//! Bytes land where they should, and nowhere else.

use std::time::{Duration, Instant};

use blockwire::Transport;

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Pair, check_blocks, fill_all, pair, pattern, wait_done};

/// Blocks written land exactly at their remote indices; every other block on both sides stays.
///
/// Rules: R-POST-DATA.
pub(crate) fn write_lands_at_remote_index<F: Fixture>(fx: &F) {
    let spec = Spec::new(16, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 1);
    fill_all(&b, 2);
    let (local, remote) = ([0, 3, 5, 15], [7, 1, 12, 0]);
    let id = a.write_blocks(&peer, &local, &remote).expect("write");
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote after write", |i| {
        match remote.iter().position(|&r| r == i) {
            Some(k) => pattern(1, local[k], 4096),
            None => pattern(2, i, 4096),
        }
    });
    check_blocks(&a, "local after write", |i| pattern(1, i, 4096));
}

/// Blocks read land exactly at their local indices; every other block on both sides stays.
///
/// Rules: R-POST-DATA.
pub(crate) fn read_lands_at_local_index<F: Fixture>(fx: &F) {
    let spec = Spec::new(16, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 1);
    fill_all(&b, 2);
    let (local, remote) = ([4, 0, 9], [2, 9, 2]);
    let id = a.read_blocks(&peer, &local, &remote).expect("read");
    wait_done(&a, &peer, &[id]);
    check_blocks(&a, "local after read", |i| {
        match local.iter().position(|&l| l == i) {
            Some(k) => pattern(2, remote[k], 4096),
            None => pattern(1, i, 4096),
        }
    });
    check_blocks(&b, "remote after read", |i| pattern(2, i, 4096));
}

/// One local block may be the source of several remote blocks in one write.
///
/// Rules: R-POST-DATA.
pub(crate) fn one_local_block_to_many_remote<F: Fixture>(fx: &F) {
    let spec = Spec::new(16, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 1);
    fill_all(&b, 2);
    let id = a
        .write_blocks(&peer, &[6, 6, 6], &[0, 8, 15])
        .expect("write");
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote", |i| match i {
        0 | 8 | 15 => pattern(1, 6, 4096),
        _ => pattern(2, i, 4096),
    });
}

/// A batch of a thousand small blocks, permuted, arrives whole.
///
/// Rules: R-POST-DATA.
pub(crate) fn many_small_blocks_in_one_batch<F: Fixture>(fx: &F) {
    let n = 1024u32;
    let spec = Spec::new(n, 1024);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 3);
    fill_all(&b, 4);
    let local: Vec<u32> = (0..n).collect();
    let remote: Vec<u32> = (0..n).map(|i| (i * 7 + 3) % n).collect();
    let id = a.write_blocks(&peer, &local, &remote).expect("write");
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote", |r| {
        let l = local[remote.iter().position(|&x| x == r).expect("permutation")];
        pattern(3, l, 1024)
    });
}

/// Blocks of an odd size larger than a backend's chunk arrive whole.
///
/// Rules: R-POST-DATA.
pub(crate) fn large_blocks_span_chunks<F: Fixture>(fx: &F) {
    let len = 1_000_003;
    let spec = Spec::new(6, len);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 5);
    fill_all(&b, 6);
    let id = a
        .write_blocks(&peer, &[0, 1, 2, 3], &[5, 3, 1, 0])
        .expect("write");
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote", |i| match i {
        5 => pattern(5, 0, len),
        3 => pattern(5, 1, len),
        1 => pattern(5, 2, len),
        0 => pattern(5, 3, len),
        _ => pattern(6, i, len),
    });
}

/// A large READ batch arrives whole.
///
/// Rules: R-POST-DATA.
pub(crate) fn read_large_batch<F: Fixture>(fx: &F) {
    let n = 64u32;
    let spec = Spec::new(n, 64 * 1024);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 7);
    fill_all(&b, 8);
    let local: Vec<u32> = (0..n).collect();
    let remote: Vec<u32> = (0..n).rev().collect();
    let id = a.read_blocks(&peer, &local, &remote).expect("read");
    wait_done(&a, &peer, &[id]);
    check_blocks(&a, "local", |i| pattern(8, n - 1 - i, 64 * 1024));
}

/// One WRITE and one READ of 4,000 blocks land every block, and neither post holds the caller
/// (a provider that refuses part of it for now, as `FI_EAGAIN`, gets the rest posted off the
/// caller's thread).
///
/// Rules: R-POST-DATA, R-POST-NO-WAIT.
pub(crate) fn four_thousand_blocks_in_one_post<F: Fixture>(fx: &F) {
    let n = 4000u32;
    let spec = Spec::new(n, 4096);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    fill_all(&a, 7);
    fill_all(&b, 8);
    let blocks: Vec<u32> = (0..n).collect();
    let reversed: Vec<u32> = blocks.iter().rev().copied().collect();
    let started = Instant::now();
    let id = a.write_blocks(&peer, &blocks, &reversed).expect("write");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the post held the caller {took:?}"
    );
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote", |r| pattern(7, n - 1 - r, 4096));
    if !a.capabilities().read {
        return;
    }
    fill_all(&b, 9);
    let started = Instant::now();
    let id = a.read_blocks(&peer, &reversed, &blocks).expect("read");
    let read_took = started.elapsed();
    assert!(
        read_took < Duration::from_secs(1),
        "the post held the caller {read_took:?}"
    );
    wait_done(&a, &peer, &[id]);
    check_blocks(&a, "local", |l| pattern(9, n - 1 - l, 4096));
    eprintln!("4,000 blocks: WRITE posted in {took:?}, READ in {read_took:?}");
}
