//! A transfer's runs cut into chunks, on the copy thread: a post hands over one run per group
//! of blocks adjacent on both sides (at most as many runs as blocks), so its cost does not
//! grow with the bytes; the worker cuts them into chunks of at most `chunk_bytes` bytes and
//! [`MAX_PIECES`] pieces, checking between chunks whether to stop.

use crate::process::{MAX_PIECES, Piece};

/// The chunks of `runs`, in order, each filled into a buffer the caller reuses.
pub(crate) struct Chunks<'a> {
    runs: &'a [Piece],
    chunk_bytes: usize,
    /// The run the next chunk starts in, and the bytes of it already cut.
    run: usize,
    offset: usize,
}

impl<'a> Chunks<'a> {
    /// `chunk_bytes` must be at least 1.
    pub(crate) fn new(runs: &'a [Piece], chunk_bytes: usize) -> Self {
        Chunks {
            runs,
            chunk_bytes: chunk_bytes.max(1),
            run: 0,
            offset: 0,
        }
    }

    /// Fills `chunk` with the next chunk's pieces (clearing it first); `false` when none is
    /// left. A chunk holds at most `chunk_bytes` bytes and [`MAX_PIECES`] pieces, and is full
    /// unless it is the last: several small runs share one, a large run spans several.
    pub(crate) fn next_into(&mut self, chunk: &mut Vec<Piece>) -> bool {
        chunk.clear();
        let mut bytes = 0;
        while let Some(run) = self.runs.get(self.run) {
            if bytes == self.chunk_bytes || chunk.len() == MAX_PIECES {
                break;
            }
            let len = (self.chunk_bytes - bytes).min(run.len - self.offset);
            if len > 0 {
                chunk.push(Piece {
                    local: run.local + self.offset,
                    remote: run.remote + self.offset,
                    len,
                });
            }
            bytes += len;
            self.offset += len;
            if self.offset == run.len {
                self.run += 1;
                self.offset = 0;
            }
        }
        !chunk.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(runs: &[Piece], chunk_bytes: usize) -> Vec<Vec<Piece>> {
        let mut chunks = Chunks::new(runs, chunk_bytes);
        let mut out = Vec::new();
        let mut chunk = Vec::new();
        while chunks.next_into(&mut chunk) {
            out.push(chunk.clone());
        }
        out
    }

    fn run(local: usize, remote: usize, len: usize) -> Piece {
        Piece { local, remote, len }
    }

    /// Every byte of every run once, in order, with local and remote moving together.
    fn bytes(pieces: impl IntoIterator<Item = Piece>) -> Vec<(usize, usize)> {
        pieces
            .into_iter()
            .flat_map(|p| (0..p.len).map(move |i| (p.local + i, p.remote + i)))
            .collect()
    }

    #[test]
    fn small_runs_share_a_chunk_and_a_large_run_spans_several() {
        let runs = [run(0, 1000, 3), run(10, 2000, 4), run(100, 3000, 9)];
        let chunks = cut(&runs, 5);
        let sizes: Vec<Vec<usize>> = chunks
            .iter()
            .map(|c| c.iter().map(|p| p.len).collect())
            .collect();
        assert_eq!(sizes, vec![vec![3, 2], vec![2, 3], vec![5], vec![1]]);
        assert_eq!(bytes(chunks.into_iter().flatten()), bytes(runs));
    }

    #[test]
    fn every_chunk_but_the_last_is_full() {
        for chunk_bytes in [1, 2, 7, 64, 4096] {
            let runs: Vec<Piece> = (0..20)
                .map(|i| run(i * 10_000, 500_000 + i * 7_000, 1 + (i * 37) % 300))
                .collect();
            let chunks = cut(&runs, chunk_bytes);
            let (last, full) = chunks.split_last().expect("chunks");
            for c in full {
                let n: usize = c.iter().map(|p| p.len).sum();
                assert!(
                    n == chunk_bytes || c.len() == MAX_PIECES,
                    "{chunk_bytes}: {c:?}"
                );
            }
            assert!(last.iter().map(|p| p.len).sum::<usize>() <= chunk_bytes);
            assert_eq!(bytes(chunks.into_iter().flatten()), bytes(runs.clone()));
        }
    }

    #[test]
    fn a_chunk_holds_at_most_max_pieces() {
        let runs: Vec<Piece> = (0..MAX_PIECES + 5).map(|i| run(i * 2, i * 2, 1)).collect();
        let chunks = cut(&runs, usize::MAX);
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[0].len(), chunks[1].len()), (MAX_PIECES, 5));
    }

    #[test]
    fn no_runs_no_chunks() {
        assert!(cut(&[], 64).is_empty());
        assert!(cut(&[run(0, 0, 0)], 64).is_empty());
    }
}
