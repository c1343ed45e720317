//! `blockwire-bench`: compares the backends compiled in, side by side, against the ceiling
//! that bounds each one, each backend's raw library, and the engines users would pick instead
//! (Mooncake's transfer engine, NIXL's own Python API), measured in the same run.
//!
//! For each backend, operation and block size it keeps `depth` transfers of `batch` blocks in
//! flight between two transports (in this process, or with `--cross-process` the remote one in
//! a spawned process) for `duration` seconds, over regions larger than the last-level cache,
//! and prints GB/s and these ratios:
//!
//! - `/ceil`, to the ceiling that bounds the setting (column `ceil`, [`CeilingKind::of`]),
//!   from [`Ceilings`], measured before and after the sweep and probed briefly before each
//!   point (in the setting best so far), the best figure kept: **mem**, the best of 1 to
//!   `available_parallelism` threads each copying its share of a working set the size of one
//!   region, allocated as [`blockwire::Region::new`] allocates one (with its huge-page hint),
//!   for shm, nixl, and ucx or libfabric over shared memory (beside it, not a ceiling: the
//!   same copy between two shared-memory mappings, what a copy into a peer's shared region
//!   reaches at best where the kernel gives shared memory smaller pages); **tcp**, the best of
//!   one loopback TCP stream and one per core, 4 MiB writes, bytes received (for ucx and
//!   libfabric over TCP, and the Mooncake peer), printed with the host's TCP congestion
//!   control, which bounds a connection (`bbr` paces each one);
//! - `/1thr`, to a single-thread `memcpy` over the same working set, measured just before the
//!   point (what earlier versions called the ceiling);
//! - `/raw`, to the backend's raw baseline (the same batches through the library with
//!   nothing of blockwire in between: for shm the best of 1 to N threads copying the same
//!   blocks with `memcpy` and with streaming stores, between regions of the transports' kind
//!   (shared memory with `--allocate`) (what the machine does with those blocks, which on
//!   some machines is less than the memory ceiling's one long copy), measured in `--slices`
//!   slices, each right after a slice of the point's transfers (the machine's memory
//!   bandwidth can swing by a third from one second to the next),
//!   `ucp_put_nbx` + flush for ucx, `fi_writemsg` for libfabric, a NIXL agent for nixl; every
//!   baseline's regions are written first, as the transports' are: see [`write_pattern`]);
//! - `/mooncake`, to the Mooncake peer at the same operation, block size and placement (the
//!   NIXL Python peer has its own rows: compare them with the nixl backend's);
//!
//! and average and p99 submit and completion times. Then the time to add a peer of 1,000,
//! 19,599 and 1,000,000 blocks. Results also go to `results/run-*/` as JSON and an SVG plot
//! (the ceilings drawn as labelled lines, the peer dashed). Ratios measured in one run are
//! what to compare: these machines are shared and noisy. `--rounds 3` measures the sweep
//! three times (each round every backend's points, nixl's in its own binary, then the
//! peers') and reports each point's median round, so that one slow second of the machine
//! does not make a point; the JSON keeps every round's GB/s.
//!
//! **Peers** (`--peers mooncake,nixl`, the default; `--peers none` leaves them out): the
//! driver `benches/peers/peer_driver.py` and its engine modules, embedded in the binary, run
//! each peer with the python of `--peer-python` (default: this workspace's
//! `target/python-venv/bin/python`, which `scripts/setup-python.sh` makes), at the same block
//! sizes, batch, depth, duration and region size, WRITE and READ, batches of shuffled block
//! indices, with the bytes of every moved block checked after each point; with both engines
//! in one process and with the target in a child process:
//!
//! - `mooncake (peer)`: Mooncake's `TransferEngine` (PyPI
//!   `mooncake-transfer-engine-non-cuda`, metadata `P2PHANDSHAKE`, protocol `tcp`), against
//!   the TCP ceiling;
//! - `nixl python (peer)`: NIXL's Python API (`nixl_agent` with UCX, `make_prepped_xfer`,
//!   `check_xfer_state`, as vLLM's NIXL transports call it) from the `nixl-cu12` wheel in
//!   `target/nixl-runtime` (`scripts/setup-backends.sh`), against the nixl backend's ceiling.
//!
//! Their rows are `peer: true` in the JSON. Without python or the engine, past its deadline
//! (`--quick`: 20 s each) or when the driver fails, a peer is reported skipped, with the
//! reason.
//!
//! Two more measurements per backend and operation (JSON: `notify` and `telemetry`):
//!
//! - **Notification cost** ([`NotifyCost`]): `--notify-iters` pairs of one plain and one
//!   notified transfer (`write_blocks` against `write_blocks_notify`, `read_blocks` against
//!   `read_blocks_notify`) of `--batch` blocks of `--notify-kib` KiB (16 x 64 KiB by
//!   default), at depth 1, alternated (the pair's order too) so that both see the same load.
//!   Their done-latencies, submit to reported done, come from telemetry's records
//!   ([`blockwire::PollResult::records`]); the table gives avg, p50 and p99 of each and the
//!   ratios notified / plain. In one process the target drains its notifications after each
//!   notified transfer, and the table says how many it drained in all; across processes the
//!   peer process drains them every millisecond. A backend without
//!   `Capabilities::notifications` is skipped, with the reason.
//! - **Telemetry overhead** ([`TelemetryCost`]): the throughput point of `--batch` blocks of
//!   `--telemetry-kib` KiB at `--depth`, measured by two initiators to the same remote
//!   transport, one with telemetry off and one on, alternated for `--telemetry-rounds` rounds
//!   of `--telemetry-duration` seconds; the best of each setting gives the ratios on / off of
//!   GB/s and of the average (and median) time in the submit call.
//!
//! `--measures` picks among `throughput`, `registration`, `notify` and `telemetry` (all by
//! default, `--quick` included, with fewer pairs and shorter rounds), and `scale`, which
//! `--scale` runs alone: one transport with 16 peers of 19,599 blocks (its own table and
//! `scale.json`; see [`Scale`]).
//!
//! The nixl backend cannot share a process with the system UCX the ucx backend loads, so
//! `blockwire-bench` runs it in its sibling binary `blockwire-bench-nixl` and merges the
//! results (building the sibling first when it runs under `cargo run`).
//!
//! ```text
//! cargo run --release -p blockwire-bench                    # shm, full sweep
//! cargo run --release -p blockwire-bench -- --quick         # under a minute
//! cargo run --release -p blockwire-bench -- --peers none    # without the peers
//! cargo run --release -p blockwire-bench -- --measures notify,telemetry --cross-process
//! cargo run --release -p blockwire-bench --all-features     # every backend
//! ```
//!
//! The library is what both binaries share; a binary supplies the backends it can open and
//! their raw baselines through [`Backends`]:
//!
//! ```
//! use blockwire::{Region, Transport, TransportOptions};
//! use blockwire_bench::{Backends, Res, Shape};
//!
//! struct ShmOnly;
//! impl Backends for ShmOnly {
//!     fn open(&self, backend: &str, blocks: u32, block: usize, options: TransportOptions, _allocate: bool)
//!         -> Res<Box<dyn Transport>> {
//!         Ok(Box::new(blockwire::open(backend, Region::new(blocks, block)?, options)?))
//!     }
//!     fn raw_gbps(&self, _backend: &str, shape: &Shape, _args: &blockwire_bench::Args) -> Res<Option<f64>> {
//!         Ok(Some(blockwire_bench::raw_copy_gbps(shape, Region::new)?))
//!     }
//! }
//! let t = ShmOnly.open("shm", 4, 4096, TransportOptions::default(), false)?;
//! assert_eq!(t.num_blocks(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(not(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
)))]
compile_error!(
    "blockwire-bench compares backends: enable at least one of the features shm, ucx, libfabric, nixl"
);

mod ceiling;
mod cli;
mod drive;
mod elsewhere;
mod measure;
mod notify;
mod overhead;
mod pattern;
mod peer_process;
mod peers;
mod raw_copy;
mod remote;
mod report;
mod scale;
mod stall;
mod wake;

use std::process::ExitCode;
use std::time::Duration;

use blockwire::{Op, Transport, TransportOptions};
use clap::Parser;
use serde::{Deserialize, Serialize};

pub use ceiling::{CeilingKind, Ceilings};
pub use cli::Args;
pub use elsewhere::sibling;
pub use measure::{Point, Registration};
pub use notify::NotifyCost;
pub use overhead::TelemetryCost;
pub use pattern::{Role, write_pattern, written_regions};
pub use raw_copy::raw_copy_gbps;
pub use report::Run;
pub use scale::Scale;

/// The error type of the bench: anything printable.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The shape of one throughput measurement, as a raw baseline needs it.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// WRITE or READ.
    pub op: Op,
    /// Blocks in each region.
    pub blocks: u32,
    /// Bytes per block.
    pub block: usize,
    /// Blocks per transfer.
    pub batch: u32,
    /// Transfers in flight.
    pub depth: usize,
    /// How long to measure.
    pub run_for: Duration,
    /// Which blocks each transfer names ([`Layout`]).
    pub layout: Layout,
}

/// How the bench's driver waits for transfers to end between its submits.
///
/// ```
/// assert_eq!(blockwire_bench::Waiting::default(), blockwire_bench::Waiting::Wait);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Waiting {
    /// `Transport::poll_wait`: the driver sleeps until a transfer ends (the backend's
    /// doorbell wakes it), costing no CPU while it waits.
    #[default]
    Wait,
    /// `Transport::poll` in a loop, sleeping a sixteenth of the average completion time (at
    /// most `--poll-sleep-us`) after a poll that reported nothing: what a caller without
    /// `poll_wait` writes.
    Sleep,
}

/// Which blocks the `k`-th transfer of a measurement names: the same indices on both sides.
///
/// ```
/// use blockwire_bench::Layout;
/// assert_eq!(Layout::Contiguous.batch(1, 4, 16), vec![4, 5, 6, 7]);
/// let scattered = Layout::Scattered.batch(1, 4, 16);
/// assert_eq!(scattered.len(), 4);
/// assert!(scattered.windows(2).all(|w| w[1] != w[0] + 1)); // no two adjacent
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Blocks spread over the region, none adjacent to the next (a KV cache's blocks, allocated
    /// from a free list): every block is its own library operation.
    #[default]
    Scattered,
    /// Each transfer is one run of adjacent blocks, on both sides: backends move a run as one
    /// operation (up to their cap).
    Contiguous,
}

impl Layout {
    /// The indices of transfer `k` of `batch` blocks in a region of `blocks` blocks (the
    /// transfers cycle through `blocks / batch` groups that cover the region once).
    pub fn batch(self, k: u32, batch: u32, blocks: u32) -> Vec<u32> {
        let batch = batch.clamp(1, blocks.max(1));
        let groups = (blocks / batch).max(1);
        let first = (k % groups) * batch;
        match self {
            Layout::Contiguous => (first..first + batch).collect(),
            Layout::Scattered => {
                // A fixed permutation of the groups' blocks: i -> i * stride mod n, with the
                // stride coprime to n, so every block is named once per cycle, and neighbours in
                // a transfer lie about n / 1.6 blocks apart.
                let n = u64::from(groups) * u64::from(batch);
                let stride = coprime_stride(n);
                (first..first + batch)
                    .map(|i| ((u64::from(i) * stride) % n) as u32)
                    .collect()
            }
        }
    }
}

/// A stride near `n / 1.618` that is coprime to `n` (and not 1 when `n > 2`).
fn coprime_stride(n: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    if n <= 2 {
        return 1;
    }
    let mut s = (n * 618 / 1000).max(2);
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

/// What a binary brings: how to open each backend it has, and each one's raw baseline.
pub trait Backends {
    /// Opens a transport of `backend` over a new region of `blocks` blocks of `block` bytes
    /// (`allocate`: the backend allocates it).
    fn open(
        &self,
        backend: &str,
        blocks: u32,
        block: usize,
        options: TransportOptions,
        allocate: bool,
    ) -> Res<Box<dyn Transport>>;

    /// GB/s of the same batches done directly through the backend's library, if there is a
    /// baseline for it.
    fn raw_gbps(&self, backend: &str, shape: &Shape, args: &Args) -> Res<Option<f64>>;

    /// The backends this binary runs when `--backends` is not given.
    fn names(&self) -> Vec<String> {
        blockwire::backends()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Another binary of this package that runs `backend` when it cannot run in this process.
    fn elsewhere(&self, _backend: &str) -> Option<std::process::Command> {
        None
    }
}

/// Parses the command line and runs the bench (or serves one peer transport for a
/// cross-process run); the whole `main` of each binary.
pub fn main(backends: &dyn Backends) -> ExitCode {
    let mut args = Args::parse();
    args.settle();
    let result = match args.serve_peer.clone() {
        Some(spec) => peer_process::serve(backends, &args, &spec),
        None => drive::run(backends, &mut args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error and its sources, as `Error::report` joins them.
            let mut line = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                line.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("blockwire-bench: {line}");
            ExitCode::FAILURE
        }
    }
}

/// What the unit tests open: shm in this process.
#[cfg(test)]
pub(crate) struct TestShm;

#[cfg(test)]
impl Backends for TestShm {
    fn open(
        &self,
        backend: &str,
        blocks: u32,
        block: usize,
        options: TransportOptions,
        _allocate: bool,
    ) -> Res<Box<dyn Transport>> {
        let region = blockwire::Region::new(blocks, block)?;
        Ok(Box::new(blockwire::open(backend, region, options)?))
    }

    fn raw_gbps(&self, _backend: &str, _shape: &Shape, _args: &Args) -> Res<Option<f64>> {
        Ok(None)
    }
}

/// Settled arguments for a unit test, from `flags`.
#[cfg(test)]
pub(crate) fn test_args(flags: &[&str]) -> Args {
    let mut args =
        Args::parse_from(std::iter::once("blockwire-bench").chain(flags.iter().copied()));
    args.settle();
    args
}

#[cfg(test)]
mod layout_tests {
    use super::Layout;

    /// A cycle of scattered transfers names every block of the covered groups exactly once,
    /// and no transfer holds two adjacent blocks (so no backend can coalesce them).
    #[test]
    fn scattered_covers_each_block_once_with_no_neighbours() {
        for (batch, blocks) in [(16u32, 4096u32), (16, 17), (3, 10), (1, 5), (7, 7)] {
            let groups = (blocks / batch).max(1);
            let mut seen = vec![0u32; blocks as usize];
            for k in 0..groups {
                let idx = Layout::Scattered.batch(k, batch, blocks);
                assert_eq!(idx.len() as u32, batch.min(blocks));
                for w in idx.windows(2) {
                    if groups * batch > 4 {
                        assert_ne!(w[1], w[0] + 1, "adjacent in {idx:?}");
                    }
                }
                for i in idx {
                    seen[i as usize] += 1;
                }
            }
            let covered = (groups * batch) as usize;
            assert!(
                seen[..covered].iter().all(|&n| n == 1),
                "{batch} {blocks}: {seen:?}"
            );
            assert!(seen[covered..].iter().all(|&n| n == 0));
        }
    }

    #[test]
    fn contiguous_is_one_run() {
        assert_eq!(Layout::Contiguous.batch(2, 3, 10), vec![6, 7, 8]);
        assert_eq!(Layout::Contiguous.batch(3, 3, 10), vec![0, 1, 2]);
    }
}
