//! What one libfabric operation moves: a verb, and up to [`MAX_PARTS`] runs of blocks as one
//! iovec list (local) and one `fi_rma_iov` list (remote).
//!
//! A transfer's runs (`kit::checked_runs`: blocks adjacent on both sides) are joined, in
//! order, into operations of at most `runs_per_op` runs and `max_run_bytes` bytes
//! ([`join_runs`]). Scattered small blocks are where this matters: libfabric 1.17's `shm`
//! sends a WRITE of at most 4 KiB with `FI_DELIVERY_COMPLETE` through its segmentation
//! protocol and refuses every other command to that peer until the target has taken it, so
//! one 4 KiB block an operation went one at a time (0.004 of raw libfabric); four of them in
//! one operation are 16 KiB, which the provider moves with one copy across the processes
//! (`process_vm_readv`) and does not serialize. Fewer operations also means fewer
//! completions to read, on every provider.

use std::ffi::c_void;
use std::fmt;

use blockwire_core::Op;
use blockwire_core::kit::ByteRun;
use libfabric_sys::{fi_rma_iov, iovec};

/// The most runs one operation carries: libfabric 1.17's `shm` and `ofi_rxm` take 4
/// (`SMR_IOV_LIMIT`, `RXM_IOV_LIMIT`); a provider that takes fewer gets fewer (its
/// `iov_limit` and `rma_iov_limit`).
pub(crate) const MAX_PARTS: usize = 4;

/// What one operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    /// `fi_writemsg` with `FI_DELIVERY_COMPLETE`.
    Write,
    /// `fi_readmsg`.
    Read,
    /// `fi_sendmsg` of the transfer's payload with `FI_DELIVERY_COMPLETE`.
    Send,
}

impl From<Op> for Verb {
    fn from(op: Op) -> Self {
        match op {
            Op::Write => Verb::Write,
            Op::Read => Verb::Read,
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verb::Write => "WRITE",
            Verb::Read => "READ",
            Verb::Send => "a notification",
        })
    }
}

/// One run of an operation: `len` bytes at `local` in the registered region, to or from
/// `remote` in the peer's (as the provider addresses it: virtual address or offset).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    pub(crate) local: *mut u8,
    pub(crate) remote: u64,
    pub(crate) len: usize,
}

impl Part {
    const EMPTY: Part = Part {
        local: std::ptr::null_mut(),
        remote: 0,
        len: 0,
    };
}

/// One operation of a transfer: up to [`MAX_PARTS`] runs' RMA, or the send of the
/// transfer's payload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RmaOp {
    pub(crate) op: Verb,
    parts: [Part; MAX_PARTS],
    count: usize,
    /// The bytes of every part (a send's: the payload's).
    pub(crate) len: usize,
    pub(crate) key: u64,
}

// SAFETY: the parts' `local` addresses are in the backend's registered region, valid until
// the backend is dropped, which happens only after every transfer (and so every queued
// operation) is released; the op is only data.
unsafe impl Send for RmaOp {}

impl RmaOp {
    /// An operation of one part (a zero-length one is a probe: `crate::notify`).
    pub(crate) fn single(op: Verb, part: Part, key: u64) -> Self {
        let mut parts = [Part::EMPTY; MAX_PARTS];
        parts[0] = part;
        RmaOp {
            op,
            parts,
            count: 1,
            len: part.len,
            key,
        }
    }

    /// The send of a payload of `len` bytes (the transfer holds it).
    pub(crate) fn send(len: usize) -> Self {
        RmaOp {
            op: Verb::Send,
            parts: [Part::EMPTY; MAX_PARTS],
            count: 0,
            len,
            key: 0,
        }
    }

    /// The operation's parts, in order.
    pub(crate) fn parts(&self) -> &[Part] {
        &self.parts[..self.count]
    }

    /// The local iovecs and remote ranges of the parts, and how many there are.
    pub(crate) fn lists(&self) -> ([iovec; MAX_PARTS], [fi_rma_iov; MAX_PARTS], usize) {
        let mut iov = [iovec {
            iov_base: std::ptr::null_mut::<c_void>(),
            iov_len: 0,
        }; MAX_PARTS];
        let mut rma = [fi_rma_iov {
            addr: 0,
            len: 0,
            key: self.key,
        }; MAX_PARTS];
        for (i, part) in self.parts().iter().enumerate() {
            iov[i] = iovec {
                iov_base: part.local.cast(),
                iov_len: part.len,
            };
            rma[i] = fi_rma_iov {
                addr: part.remote,
                len: part.len,
                key: self.key,
            };
        }
        (iov, rma, self.count)
    }

    /// Adds `part` when the operation has room: fewer than `max_parts` parts, and at most
    /// `max_bytes` in all.
    fn join(&mut self, part: Part, max_parts: usize, max_bytes: usize) -> bool {
        if self.count >= max_parts.min(MAX_PARTS) || self.len.saturating_add(part.len) > max_bytes {
            return false;
        }
        self.parts[self.count] = part;
        self.count += 1;
        self.len += part.len;
        true
    }
}

/// The operations of a transfer's runs, in order: each run in exactly one operation, joined
/// to the runs before it while the operation holds fewer than `max_parts` runs and at most
/// `max_bytes` bytes (a run longer than that is an operation of its own). `local` is the
/// registered region's first byte; `remote` turns a run's remote offset into the address the
/// provider takes.
pub(crate) fn join_runs(
    op: Verb,
    runs: impl Iterator<Item = ByteRun>,
    local: *mut u8,
    remote: impl Fn(u64) -> u64,
    key: u64,
    max_parts: usize,
    max_bytes: usize,
) -> Vec<RmaOp> {
    let mut ops: Vec<RmaOp> = Vec::new();
    for run in runs {
        let part = Part {
            local: local.wrapping_add(run.local),
            remote: remote(run.remote),
            len: run.len,
        };
        let joined = ops
            .last_mut()
            .is_some_and(|last| last.join(part, max_parts, max_bytes));
        if !joined {
            ops.push(RmaOp::single(op, part, key));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(lens: &[usize]) -> Vec<ByteRun> {
        let mut at = 0;
        lens.iter()
            .map(|&len| {
                let run = ByteRun {
                    local: at,
                    remote: at as u64 * 2,
                    len,
                };
                at += len + 1;
                run
            })
            .collect()
    }

    fn shape(ops: &[RmaOp]) -> Vec<Vec<usize>> {
        ops.iter()
            .map(|op| op.parts().iter().map(|p| p.len).collect())
            .collect()
    }

    #[test]
    fn runs_join_up_to_the_part_and_byte_bounds_in_order() {
        let base = std::ptr::null_mut::<u8>();
        let all = runs(&[4, 4, 4, 4, 4, 4]);
        let ops = join_runs(Verb::Write, all.iter().copied(), base, |r| r, 9, 4, 1 << 20);
        assert_eq!(shape(&ops), vec![vec![4, 4, 4, 4], vec![4, 4]]);
        assert_eq!(ops[0].len, 16);
        // Every run once, in order, where it was.
        let parts: Vec<(usize, u64)> = ops
            .iter()
            .flat_map(|op| op.parts().iter().map(|p| (p.local as usize, p.remote)))
            .collect();
        let want: Vec<(usize, u64)> = all.iter().map(|r| (r.local, r.remote)).collect();
        assert_eq!(parts, want);

        let one = join_runs(Verb::Read, all.iter().copied(), base, |r| r, 9, 1, 1 << 20);
        assert_eq!(one.len(), 6, "one run an operation");

        let bytes = join_runs(
            Verb::Write,
            runs(&[6, 4, 3, 9]).into_iter(),
            base,
            |r| r,
            9,
            4,
            10,
        );
        assert_eq!(shape(&bytes), vec![vec![6, 4], vec![3], vec![9]]);

        let long = join_runs(
            Verb::Write,
            runs(&[2, 20, 2]).into_iter(),
            base,
            |r| r,
            9,
            4,
            10,
        );
        assert_eq!(
            shape(&long),
            vec![vec![2], vec![20], vec![2]],
            "a long run alone"
        );
    }

    #[test]
    fn lists_name_every_part_with_the_key_and_the_remote_address() {
        let base = std::ptr::null_mut::<u8>();
        let ops = join_runs(
            Verb::Write,
            runs(&[4, 8]).into_iter(),
            base,
            |r| r + 1000,
            77,
            4,
            1 << 20,
        );
        let (iov, rma, count) = ops[0].lists();
        assert_eq!(count, 2);
        assert_eq!((iov[1].iov_base as usize, iov[1].iov_len), (5, 8));
        assert_eq!((rma[1].addr, rma[1].len, rma[1].key), (1010, 8, 77));
        assert_eq!(rma[0].addr, 1000);
    }
}
