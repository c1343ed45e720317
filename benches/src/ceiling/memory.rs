//! The memory ceiling's copies: a working set the size of one region, copied by 1 to N
//! threads with the C library's `memcpy` and with streaming stores.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use blockwire::Region;

use crate::Res;

/// Bytes of a page: the unit the working set's regions are made of.
const PAGE: usize = 4096;

/// The buffers the memory figures copy between, each pair the size of one region and
/// allocated as blockwire allocates regions (so with the huge-page hint its regions get: the
/// ceiling is what the machine does at best, not with smaller pages than the backends use):
/// a single-thread `memcpy` (measured again before every point so that it sees the same
/// machine load as the point) and the threads of the memory ceiling copy between private
/// memory ([`Region::new`]); the shared-memory figure between two shared-memory mappings
/// ([`Region::new_shared`]), which is what a copy into a peer's shared region can reach on
/// this kernel.
pub(crate) struct WorkingSet {
    pub(super) private: Pair,
    pub(super) shared: Pair,
}

impl WorkingSet {
    /// Two pairs of `bytes` each (at least a page).
    pub(crate) fn new(bytes: usize) -> Res<Self> {
        Ok(WorkingSet {
            private: Pair::new(bytes, Region::new)?,
            shared: Pair::new(bytes, Region::new_shared)?,
        })
    }

    /// Sustained single-thread GB/s over at least `time` (whole passes, at least one).
    pub(crate) fn gbps(&mut self, time: Duration) -> f64 {
        // The plain `memcpy` a user would write.
        self.private.threads_copy_gbps(1, time, CopyWith::Memcpy)
    }
}

/// A source and a destination of one kind of memory.
pub(super) struct Pair {
    src: Region,
    dst: Region,
}

impl Pair {
    fn new(bytes: usize, make: fn(u32, usize) -> blockwire::Result<Region>) -> Res<Self> {
        let pages = u32::try_from(bytes.div_ceil(PAGE).max(1))
            .map_err(|_| format!("a working set of {bytes} bytes is too large"))?;
        let mut pair = Pair {
            src: make(pages, PAGE)?,
            dst: make(pages, PAGE)?,
        };
        // Every page touched first: a region's pages come lazily, and reads of never-written
        // pages all hit one shared zero page (in cache), not memory.
        let (src, dst) = pair.buffers();
        src.fill(1);
        dst.copy_from_slice(src);
        Ok(pair)
    }

    /// The two buffers, for as long as the pair is borrowed.
    fn buffers(&mut self) -> (&mut [u8], &mut [u8]) {
        let len = self.src.len();
        // SAFETY: each region is `len` bytes (same size) of memory this pair owns, mapped
        // read-write until the region drops, which the borrow of `self` rules out while the
        // slices live; a region hands out no reference to its bytes and nothing else of the
        // bench holds a pointer into these, so `&mut self` makes both slices exclusive; the
        // two are distinct mappings, so they do not overlap.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.src.span().base().as_ptr(), len),
                std::slice::from_raw_parts_mut(self.dst.span().base().as_ptr(), len),
            )
        }
    }

    /// GB/s of `threads` threads started together, each copying its share of the pair again
    /// and again for at least `time` (all the bytes over the longest thread's time): the best
    /// of the C library's copy and streaming stores (shm's copy kernel), as on some machines
    /// one, on others the other is what the memory does at best.
    pub(super) fn best_gbps(&mut self, threads: usize, time: Duration) -> f64 {
        let memcpy = self.threads_copy_gbps(threads, time / 2, CopyWith::Memcpy);
        memcpy.max(self.threads_copy_gbps(threads, time / 2, CopyWith::Streaming))
    }

    fn threads_copy_gbps(&mut self, threads: usize, time: Duration, copy: CopyWith) -> f64 {
        let (src, dst) = self.buffers();
        let share = src.len().div_ceil(threads.max(1)).max(1);
        let shares = src.chunks(share).zip(dst.chunks_mut(share)).collect();
        together_gbps(shares, |(src, dst)| copy_for(src, dst, time, copy))
    }
}

/// GB/s of one thread per share, started together, each running `work` on its share, which
/// returns the bytes it moved and the time it took: all the bytes over the longest thread's
/// time.
pub(crate) fn together_gbps<S: Send>(
    shares: Vec<S>,
    work: impl Fn(S) -> (usize, Duration) + Sync,
) -> f64 {
    let start = Barrier::new(shares.len());
    let (moved, longest) = std::thread::scope(|s| {
        let workers: Vec<_> = shares
            .into_iter()
            .map(|share| {
                let (start, work) = (&start, &work);
                s.spawn(move || {
                    start.wait();
                    work(share)
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| w.join().ok())
            .fold((0usize, Duration::ZERO), |(b, t), (n, took)| {
                (b + n, t.max(took))
            })
    });
    moved as f64 / longest.as_secs_f64().max(1e-9) / 1e9
}

/// How a ceiling's threads (and the shm raw baseline's) copy.
#[derive(Clone, Copy)]
pub(crate) enum CopyWith {
    /// `copy_from_slice` (the C library's `memcpy`).
    Memcpy,
    /// [`blockwire_shm::copy_fast`]: streaming stores where the CPU has them.
    Streaming,
}

/// Copies `src` into `dst` again and again for at least `time` (whole passes, at least one):
/// the bytes copied and the time it took.
fn copy_for(src: &[u8], dst: &mut [u8], time: Duration, copy: CopyWith) -> (usize, Duration) {
    let start = Instant::now();
    let mut copied = 0usize;
    while !src.is_empty() && (copied == 0 || start.elapsed() < time) {
        copy.copy(dst, src);
        copied += src.len();
    }
    (copied, start.elapsed())
}

impl CopyWith {
    /// Copies `src` into `dst` (the same length), which the compiler may not elide.
    pub(crate) fn copy(self, dst: &mut [u8], src: &[u8]) {
        match self {
            CopyWith::Memcpy => dst.copy_from_slice(std::hint::black_box(src)),
            CopyWith::Streaming => blockwire_shm::copy_fast(dst, std::hint::black_box(src)),
        }
        std::hint::black_box(&mut *dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_figure_copies_between_shared_mappings() {
        let set = WorkingSet::new(1 << 20).expect("working set");
        // The shared-memory figure copies between shared mappings, the others do not.
        assert!(set.shared.src.span().shared_memory().is_some());
        assert!(set.shared.dst.span().shared_memory().is_some());
        assert!(set.private.src.span().shared_memory().is_none());
    }
}
