//! Blocks adjacent on both sides (which backends move as one operation each run) land exactly
//! where blocks moved one by one would: runs, runs broken on one side only, and scattered
//! blocks, mixed in one transfer.

use blockwire::{BlockIndex, Transport};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Pair, check_blocks, fill_all, pair, pattern, wait_done};

/// One transfer's lists: a run adjacent on both sides, a run adjacent locally only, one
/// adjacent remotely only, one adjacent locally but descending remotely, and a mix of short
/// runs and single blocks. No index twice on either side (so the same lists serve a READ).
fn mixed_lists() -> (Vec<BlockIndex>, Vec<BlockIndex>) {
    let mut local: Vec<BlockIndex> = Vec::new();
    let mut remote: Vec<BlockIndex> = Vec::new();
    let mut add = |l: &[BlockIndex], r: &[BlockIndex]| {
        local.extend_from_slice(l);
        remote.extend_from_slice(r);
    };
    // Adjacent on both sides.
    add(&[0, 1, 2, 3, 4, 5, 6, 7], &[20, 21, 22, 23, 24, 25, 26, 27]);
    // Local adjacent (and adjacent to the run before it), remote not.
    add(&[8, 9, 10, 11], &[30, 32, 31, 40]);
    // Remote adjacent (and adjacent to the block before it), local not.
    add(&[13, 15, 14, 33], &[41, 42, 43, 44]);
    // Local adjacent, remote descending.
    add(&[56, 57], &[11, 10]);
    // A mix: a run of three, a single block, a run of two, a single block at the edges.
    add(&[30, 31, 32, 40, 50, 51, 63], &[50, 51, 52, 0, 60, 61, 63]);
    (local, remote)
}

/// The block a transfer from `from` to `to` leaves at index `i` of the side the lists `to`
/// name: the source's pattern where `to` names `i`, the side's own pattern elsewhere.
fn expected(
    i: BlockIndex,
    to: &[BlockIndex],
    from: &[BlockIndex],
    (moved, kept): (u8, u8),
    len: usize,
) -> Vec<u8> {
    match to.iter().position(|&t| t == i) {
        Some(k) => pattern(moved, from[k], len),
        None => pattern(kept, i, len),
    }
}

/// A WRITE, then a READ, of runs adjacent on both sides, runs broken on one side only, and
/// scattered blocks, in one transfer: every block lands at its index, every other block on
/// both sides stays. With blocks of 4 KiB, and of an odd size near 100 KB, so a backend that
/// joins several runs in one operation (libfabric: up to 4, at most 1 MiB) moves lists of
/// long and short runs in one operation too.
///
/// Rules: R-POST-DATA.
pub(crate) fn mixed_runs_land_exactly<F: Fixture>(fx: &F) {
    for len in [4096, 99_991] {
        mixed_runs_of(fx, len);
    }
}

fn mixed_runs_of<F: Fixture>(fx: &F, len: usize) {
    let spec = Spec::new(64, len);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    let (local, remote) = mixed_lists();
    fill_all(&a, 1);
    fill_all(&b, 2);
    let id = a.write_blocks(&peer, &local, &remote).expect("write");
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote after write", |i| {
        expected(i, &remote, &local, (1, 2), len)
    });
    check_blocks(&a, "local after write", |i| pattern(1, i, len));
    if !a.capabilities().read {
        return;
    }
    fill_all(&a, 3);
    fill_all(&b, 4);
    let id = a.read_blocks(&peer, &local, &remote).expect("read");
    wait_done(&a, &peer, &[id]);
    check_blocks(&a, "local after read", |i| {
        expected(i, &local, &remote, (4, 3), len)
    });
    check_blocks(&b, "remote after read", |i| pattern(4, i, len));
}

/// A run adjacent on both sides that is longer than a backend moves in one operation (more
/// than 16 MiB, above any bound a backend uses, of blocks of an odd size) lands whole, WRITE
/// and READ, and the blocks around it stay.
///
/// Rules: R-POST-DATA.
pub(crate) fn run_longer_than_one_operation<F: Fixture>(fx: &F) {
    let (len, n) = (262_147, 72u32);
    let spec = Spec::new(n, len);
    let Pair { a, b, peer, .. } = pair(fx, &spec);
    // 70 blocks (18.4 MB) from local 1 to remote 2.
    let local: Vec<BlockIndex> = (1..71).collect();
    let remote: Vec<BlockIndex> = (2..72).collect();
    fill_all(&a, 5);
    fill_all(&b, 6);
    let id = a.write_blocks(&peer, &local, &remote).expect("write");
    wait_done(&a, &peer, &[id]);
    check_blocks(&b, "remote after write", |i| {
        expected(i, &remote, &local, (5, 6), len)
    });
    check_blocks(&a, "local after write", |i| pattern(5, i, len));
    if !a.capabilities().read {
        return;
    }
    fill_all(&b, 7);
    let id = a.read_blocks(&peer, &local, &remote).expect("read");
    wait_done(&a, &peer, &[id]);
    check_blocks(&a, "local after read", |i| {
        expected(i, &local, &remote, (7, 5), len)
    });
    check_blocks(&b, "remote after read", |i| pattern(7, i, len));
}
