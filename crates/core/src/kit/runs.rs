//! Contiguous runs: the blocks of one transfer that are adjacent on both sides, so a backend
//! moves each run with one library operation instead of one per block.
//!
//! A transfer names its blocks as two index lists of equal length, `local[i]` moving to (or
//! from) `remote[i]`. Where `local[i + 1] == local[i] + 1` and `remote[i + 1] == remote[i] + 1`
//! the two blocks are one span of memory on both sides, and so are longer stretches: a run of
//! `k` such blocks is one operation of `k * block_len` bytes. Small contiguous blocks then move
//! at the rate of large ones; scattered blocks stay one operation each, as before.

use crate::{BackendError, BlockIndex, RegionSpan};

/// The bound on one run's bytes for a backend whose library sets no practical limit of its
/// own (1 MiB): per-operation costs are already small next to a 1 MiB copy (the bench's 1 MiB
/// blocks move at the libraries' full rate), and no operation is larger than a 1 MiB block's
/// was before runs (a block longer than this is still one run of one block). Larger runs are
/// not free: with 16 MiB puts, UCX 1.13 crashed in `ucp_worker_destroy` purging pending
/// rendezvous requests (`ucp_mem_rereg_mds`) when a target closed during long transfers.
pub const DEFAULT_MAX_RUN_BYTES: usize = 1 << 20;

/// `blocks` blocks that are adjacent on both sides: local blocks `local..local + blocks` move
/// to (or from) remote blocks `remote..remote + blocks`, in that order.
///
/// ```
/// use blockwire_core::kit::Run;
/// let run = Run { local: 2, remote: 7, blocks: 3 };
/// assert_eq!(run.bytes(4096), 3 * 4096);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The first local block.
    pub local: BlockIndex,
    /// The first remote block.
    pub remote: BlockIndex,
    /// How many blocks (at least one).
    pub blocks: u32,
}

impl Run {
    /// The run's length in bytes, for blocks of `block_len` bytes (saturating: a run of blocks
    /// inside a region never comes near the limit).
    ///
    /// ```
    /// # use blockwire_core::kit::Run;
    /// assert_eq!(Run { local: 0, remote: 0, blocks: 1 }.bytes(512), 512);
    /// ```
    pub fn bytes(&self, block_len: usize) -> usize {
        (self.blocks as usize).saturating_mul(block_len)
    }
}

/// The runs of a transfer's index lists, in order: each pair of indices is in exactly one run,
/// a run never holds more than `max_blocks` blocks (0 counts as 1), and a run ends where either
/// side stops being adjacent. Lists of different lengths are read up to the shorter one (the
/// generic layer has refused those already; [`checked_runs`] refuses them too).
///
/// ```
/// use blockwire_core::kit::{Run, contiguous_runs};
/// let runs: Vec<Run> = contiguous_runs(&[4, 5, 6, 9, 10], &[0, 1, 2, 3, 7], 16).collect();
/// assert_eq!(runs, vec![
///     Run { local: 4, remote: 0, blocks: 3 },
///     Run { local: 9, remote: 3, blocks: 1 },
///     Run { local: 10, remote: 7, blocks: 1 },
/// ]);
/// // Bounded: at most two blocks a run.
/// assert_eq!(contiguous_runs(&[0, 1, 2], &[0, 1, 2], 2).count(), 2);
/// ```
pub fn contiguous_runs<'a>(
    local: &'a [BlockIndex],
    remote: &'a [BlockIndex],
    max_blocks: u32,
) -> ContiguousRuns<'a> {
    let len = local.len().min(remote.len());
    ContiguousRuns {
        local: &local[..len],
        remote: &remote[..len],
        max_blocks: max_blocks.max(1) as usize,
    }
}

/// The iterator [`contiguous_runs`] returns.
#[derive(Clone, Debug)]
pub struct ContiguousRuns<'a> {
    /// What is left of the local list (as long as `remote`).
    local: &'a [BlockIndex],
    /// What is left of the remote list.
    remote: &'a [BlockIndex],
    /// At least 1.
    max_blocks: usize,
}

impl Iterator for ContiguousRuns<'_> {
    type Item = Run;

    fn next(&mut self) -> Option<Run> {
        let (&local, &remote) = (self.local.first()?, self.remote.first()?);
        let limit = self.local.len().min(self.max_blocks);
        let adjacent = |list: &[BlockIndex], n: usize| list[n - 1].checked_add(1) == Some(list[n]);
        let mut n = 1;
        while n < limit && adjacent(self.local, n) && adjacent(self.remote, n) {
            n += 1;
        }
        self.local = &self.local[n..];
        self.remote = &self.remote[n..];
        Some(Run {
            local,
            remote,
            // `n <= max_blocks`, which came from a `u32`.
            blocks: u32::try_from(n).unwrap_or(u32::MAX),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = self.local.len();
        (len.div_ceil(self.max_blocks), Some(len))
    }
}

/// One run as a backend moves it: byte offsets in this region and in the peer's, and the
/// length (blocks have the same length on both sides).
///
/// ```
/// let r = blockwire_core::kit::ByteRun { local: 0, remote: 8192, len: 4096 };
/// assert_eq!(r.remote, 8192);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRun {
    /// Offset of the run's first local block in this region.
    pub local: usize,
    /// Offset of the run's first remote block in the peer's region.
    pub remote: u64,
    /// Bytes in the run.
    pub len: usize,
}

/// The iterator [`checked_runs`] returns.
#[derive(Clone, Debug)]
pub struct ByteRuns<'a> {
    runs: ContiguousRuns<'a>,
    block_len: usize,
}

impl Iterator for ByteRuns<'_> {
    type Item = ByteRun;

    fn next(&mut self) -> Option<ByteRun> {
        let run = self.runs.next()?;
        // The indices were checked against both regions, whose sizes fit their types.
        Some(ByteRun {
            local: run.local as usize * self.block_len,
            remote: u64::from(run.remote) * self.block_len as u64,
            len: run.bytes(self.block_len),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.runs.size_hint()
    }
}

/// The runs of a transfer as byte ranges, checked first the way
/// [`RegionSpan::block_pairs`] checks blocks: equal list lengths, every local index inside
/// `span` and every remote index below `remote_blocks`. Every block of a run is checked, so a
/// run's whole range lies inside both regions. A run holds at most `max_bytes / block_len`
/// blocks (at least one, so a block longer than `max_bytes` is one run of its own): a backend
/// passes its library's message size limit, or [`DEFAULT_MAX_RUN_BYTES`].
///
/// ```
/// use blockwire_core::RegionSpan;
/// use blockwire_core::kit::{ByteRun, checked_runs};
/// # use std::ptr::NonNull;
/// let span = RegionSpan::new(NonNull::dangling(), 8, 100).unwrap();
/// let runs: Vec<ByteRun> = checked_runs(&span, &[1, 2, 5], &[3, 4, 0], 8, 1 << 20)
///     .unwrap()
///     .collect();
/// assert_eq!(runs, vec![
///     ByteRun { local: 100, remote: 300, len: 200 },
///     ByteRun { local: 500, remote: 0, len: 100 },
/// ]);
/// // Capped at two blocks (200 bytes) a run.
/// assert_eq!(checked_runs(&span, &[0, 1, 2], &[0, 1, 2], 8, 250).unwrap().count(), 2);
/// assert!(checked_runs(&span, &[8], &[0], 8, 1 << 20).is_err());
/// assert!(checked_runs(&span, &[0], &[8], 8, 1 << 20).is_err());
/// assert!(checked_runs(&span, &[0, 1], &[0], 8, 1 << 20).is_err());
/// ```
pub fn checked_runs<'a>(
    span: &RegionSpan,
    local: &'a [BlockIndex],
    remote: &'a [BlockIndex],
    remote_blocks: u32,
    max_bytes: usize,
) -> Result<ByteRuns<'a>, BackendError> {
    span.check_lists(local, remote, remote_blocks)?;
    let block_len = span.block_len();
    let max_blocks = u32::try_from(max_bytes / block_len).unwrap_or(u32::MAX);
    Ok(ByteRuns {
        runs: contiguous_runs(local, remote, max_blocks),
        block_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn runs(local: &[u32], remote: &[u32], max: u32) -> Vec<(u32, u32, u32)> {
        contiguous_runs(local, remote, max)
            .map(|r| (r.local, r.remote, r.blocks))
            .collect()
    }

    #[test]
    fn adjacent_on_both_sides_is_one_run() {
        assert_eq!(runs(&[0, 1, 2, 3], &[8, 9, 10, 11], 64), vec![(0, 8, 4)]);
    }

    #[test]
    fn broken_on_one_side_only_splits() {
        // Local adjacent, remote not.
        assert_eq!(runs(&[0, 1, 2], &[5, 6, 9], 64), vec![(0, 5, 2), (2, 9, 1)]);
        // Remote adjacent, local not.
        assert_eq!(runs(&[3, 7, 8], &[0, 1, 2], 64), vec![(3, 0, 1), (7, 1, 2)]);
        // Descending is not adjacent.
        assert_eq!(runs(&[2, 1], &[2, 1], 64).len(), 2);
        // Repeated local blocks (a write from one block to many) are not adjacent.
        assert_eq!(runs(&[6, 6, 6], &[0, 1, 2], 64).len(), 3);
    }

    #[test]
    fn capped_runs_continue_where_they_stopped() {
        assert_eq!(
            runs(&[0, 1, 2, 3, 4], &[0, 1, 2, 3, 4], 2),
            vec![(0, 0, 2), (2, 2, 2), (4, 4, 1)]
        );
        // A cap of 0 is a cap of 1.
        assert_eq!(runs(&[0, 1], &[0, 1], 0), vec![(0, 0, 1), (1, 1, 1)]);
    }

    #[test]
    fn empty_and_edge_indices() {
        assert!(runs(&[], &[], 8).is_empty());
        // No overflow at the top of the index range.
        assert_eq!(
            runs(&[u32::MAX - 1, u32::MAX], &[0, 1], 8),
            vec![(u32::MAX - 1, 0, 2)]
        );
        assert_eq!(runs(&[u32::MAX, 0], &[0, 1], 8).len(), 2);
    }

    #[test]
    fn byte_runs_have_offsets_of_both_sides() {
        let mut buf = vec![0u8; 4];
        let span =
            RegionSpan::new(std::ptr::NonNull::new(buf.as_mut_ptr()).unwrap(), 4, 1).expect("span");
        let got: Vec<ByteRun> = checked_runs(&span, &[0, 1, 3], &[6, 7, 2], 8, usize::MAX)
            .expect("checked")
            .collect();
        assert_eq!(
            got,
            vec![
                ByteRun {
                    local: 0,
                    remote: 6,
                    len: 2
                },
                ByteRun {
                    local: 3,
                    remote: 2,
                    len: 1
                },
            ]
        );
        // A block longer than the cap is a run of its own.
        assert_eq!(
            checked_runs(&span, &[0, 1], &[0, 1], 8, 0)
                .expect("checked")
                .count(),
            2
        );
    }

    proptest! {
        /// Runs cover exactly the input pairs, in order, each within the cap, and two
        /// consecutive runs could not have been one (unless the cap split them).
        #[test]
        fn runs_cover_the_pairs_in_order(
            pairs in proptest::collection::vec((0u32..12, 0u32..12), 0..40),
            max in 0u32..6,
        ) {
            let (local, remote): (Vec<u32>, Vec<u32>) = pairs.iter().copied().unzip();
            let runs: Vec<Run> = contiguous_runs(&local, &remote, max).collect();
            let mut expanded = Vec::new();
            for run in &runs {
                prop_assert!(run.blocks >= 1 && run.blocks <= max.max(1));
                for k in 0..run.blocks {
                    expanded.push((run.local + k, run.remote + k));
                }
            }
            prop_assert_eq!(&expanded, &pairs);
            for w in runs.windows(2) {
                let joinable = w[0].local + w[0].blocks == w[1].local
                    && w[0].remote + w[0].blocks == w[1].remote;
                prop_assert!(!joinable || w[0].blocks == max.max(1));
            }
        }
    }
}
