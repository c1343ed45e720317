//! The shm backend's raw baseline: the same blocks copied with nothing of blockwire in
//! between, by the machine's best number of threads and copy.

use std::time::{Duration, Instant};

use blockwire::{Op, Region};

use crate::ceiling::{CopyWith, together_gbps};
use crate::{Res, Shape, written_regions};

/// The shm backend's raw baseline: the same batches of block copies between two regions of
/// this shape, with nothing of blockwire in between, at the best the machine does: the best
/// of 1 to N threads (N = cores), each with the C library's `memcpy` and with streaming stores
/// (shm's copy kernel, [`blockwire_shm::copy_fast`]), each thread copying the blocks of every
/// batch that lie in its own share of the region. `make` makes the regions as the
/// transports' are made: [`Region::new`], or [`Region::new_shared`] where shm allocates them
/// (`--allocate`; on a kernel that gives shared memory only small pages those copy slower).
/// Where shm reaches this, the bound is the copy of those blocks itself (on some machines
/// scattered pieces of a region move slower than the memory ceiling's one long copy), not
/// blockwire.
///
/// ```
/// use blockwire_bench::{Shape, raw_copy_gbps};
/// let shape = Shape {
///     op: blockwire::Op::Write, blocks: 8, block: 4096, batch: 4, depth: 1,
///     run_for: std::time::Duration::from_millis(5), layout: blockwire_bench::Layout::Scattered,
/// };
/// assert!(raw_copy_gbps(&shape, blockwire::Region::new)? > 0.0);
/// assert!(raw_copy_gbps(&shape, blockwire::Region::new_shared)? > 0.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn raw_copy_gbps(shape: &Shape, make: fn(u32, usize) -> blockwire::Result<Region>) -> Res<f64> {
    // Written first, as the transports' regions are: a region's pages are mapped lazily, and
    // reads of never-written pages all hit one shared zero page (in cache), not memory.
    let (mut a, mut b) = written_regions(shape.blocks, shape.block, make)?;
    let (src, dst) = match shape.op {
        Op::Write => (&a, &mut b),
        Op::Read => (&b, &mut a),
    };
    let len = src.len();
    // SAFETY: both regions are `len` bytes (same shape) this function owns, mapped read-write
    // until they drop at its end, after the slices; nothing else holds a pointer into them
    // (a region hands out no reference to its bytes), and `dst` is borrowed mutably here, so
    // the mutable slice is exclusive; they are distinct mappings, so they do not overlap.
    let (src, dst) = unsafe {
        (
            std::slice::from_raw_parts(src.span().base().as_ptr().cast_const(), len),
            std::slice::from_raw_parts_mut(dst.span().base().as_ptr(), len),
        )
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let each = shape.run_for / 2;
    let mut best = 0.0f64;
    for threads in 1..=cores {
        for copy in [CopyWith::Memcpy, CopyWith::Streaming] {
            best = best.max(blocks_copy_gbps(src, dst, shape, threads, copy, each));
        }
    }
    Ok(best)
}

/// GB/s of `threads` threads started together, each going through the shape's batches for at
/// least `time` and copying the blocks that lie in its share of the region (so no two write
/// the same bytes): all the bytes over the longest thread's time.
fn blocks_copy_gbps(
    src: &[u8],
    dst: &mut [u8],
    shape: &Shape,
    threads: usize,
    copy: CopyWith,
    time: Duration,
) -> f64 {
    let (len, batch) = (shape.block, shape.batch.min(shape.blocks));
    let share_blocks = (shape.blocks as usize).div_ceil(threads.max(1)).max(1);
    let shares = dst.chunks_mut(share_blocks * len).enumerate().collect();
    together_gbps(shares, |(t, share)| {
        let first = t * share_blocks;
        let mine = first..first + share.len() / len;
        let began = Instant::now();
        let mut copied = 0usize;
        for next in 0u32.. {
            let idx = shape.layout.batch(next, batch, shape.blocks);
            let idx = idx.into_iter().map(|i| i as usize);
            for i in idx.filter(|i| mine.contains(i)) {
                let at = (i - first) * len;
                copy.copy(&mut share[at..at + len], &src[i * len..(i + 1) * len]);
                copied += len;
            }
            if began.elapsed() >= time {
                break;
            }
        }
        (copied, began.elapsed())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    /// One pass (no time): every thread copies exactly the blocks of the first batch in its
    /// share, so those blocks land and no other byte changes.
    #[test]
    fn the_raw_copy_moves_the_batch_blocks_and_nothing_else() {
        let (blocks, block) = (8u32, 4096usize);
        let shape = Shape {
            op: Op::Write,
            blocks,
            block,
            batch: 4,
            depth: 1,
            run_for: Duration::ZERO,
            layout: Layout::Scattered,
        };
        let src: Vec<u8> = (0..blocks as usize * block)
            .map(|i| (i / block + 1) as u8)
            .collect();
        for (threads, copy) in [
            (1, CopyWith::Memcpy),
            (2, CopyWith::Streaming),
            (3, CopyWith::Memcpy),
        ] {
            let mut dst = vec![0u8; src.len()];
            assert!(blocks_copy_gbps(&src, &mut dst, &shape, threads, copy, Duration::ZERO) > 0.0);
            let named = Layout::Scattered.batch(0, 4, blocks);
            for i in 0..blocks {
                let got = &dst[i as usize * block..(i as usize + 1) * block];
                let want = if named.contains(&i) { i as u8 + 1 } else { 0 };
                assert!(
                    got.iter().all(|&b| b == want),
                    "{threads} threads, block {i}"
                );
            }
        }
    }
}
