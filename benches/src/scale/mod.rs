//! The scale mode (`--scale`, or `scale` among `--measures`): one transport with
//! [`PEERS`] peers of [`BLOCKS`] blocks of [`BLOCK`] bytes each, the KV geometry of a large
//! deployment, and what that costs:
//!
//! - `add_remote_peer` per peer (median and max over the peers) and resident memory (`VmRSS`)
//!   before adding the peers, after, and after a first one-block WRITE to each;
//! - `poll(Some(peer))` of an idle peer with [`TRACKED`] finished, unpolled transfers of the
//!   other peers still tracked, as a ratio to the same poll with none tracked;
//! - WRITEs of [`BIG`] scattered blocks in one transfer: submit and completion times;
//! - resident memory before and after many one-block WRITEs (a million; `--quick`: 20,000).
//!
//! Every peer is a transport of its own in this process, over its own region (so that each
//! connect is a new remote: a new endpoint, a new remote key or agent's metadata), which also
//! means that the resident memory counts both sides of each connection. Its results go to
//! their own table and to `scale.json` in the run's folder.

mod measure;
mod table;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Args, Backends, Res};

pub(crate) use table::{print_table, write};

/// Peers of the one transport.
pub const PEERS: usize = 16;
/// Blocks of each region (the initiator's and each peer's).
pub const BLOCKS: u32 = 19_599;
/// Bytes per block (small, so that 17 regions of [`BLOCKS`] fit in memory: about 77 MiB each).
pub const BLOCK: usize = 4096;
/// Finished transfers left tracked (unpolled) for the other peers during the loaded polls.
pub const TRACKED: usize = 10_000;
/// Blocks of each large transfer.
pub const BIG: u32 = 4_000;
/// Large transfers timed.
pub const BIG_TRANSFERS: usize = 20;

/// What the scale mode measured for one backend.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scale {
    /// Backend name.
    pub backend: String,
    /// Its `--opt` settings, as given (`provider=tcp`, ...); empty for the defaults.
    pub options: Vec<String>,
    /// Peers of the one transport (each a transport of its own, in this process).
    pub peers: usize,
    /// Blocks of each region.
    pub blocks_per_peer: u32,
    /// Bytes per block.
    pub block_bytes: usize,
    /// Each `add_remote_peer`, in order, µs.
    pub add_peer_us: Vec<f64>,
    /// Median of [`Scale::add_peer_us`], µs.
    pub add_peer_median_us: f64,
    /// Max of [`Scale::add_peer_us`], µs.
    pub add_peer_max_us: f64,
    /// Resident memory (`VmRSS`, MiB) with every region open, before the peers are added
    /// (`None` where `/proc/self/status` has none).
    pub rss_before_peers_mib: Option<f64>,
    /// Resident memory after the peers are added, MiB.
    pub rss_after_peers_mib: Option<f64>,
    /// Resident memory after a first one-block WRITE to each peer has completed, MiB.
    pub rss_after_traffic_mib: Option<f64>,
    /// Finished transfers of the other peers tracked during the loaded polls.
    pub tracked: usize,
    /// `poll(Some(peer))` of an idle peer with nothing tracked, median ns per call.
    pub poll_idle_ns: f64,
    /// The same poll with [`Scale::tracked`] transfers tracked for the other peers, ns.
    pub poll_loaded_ns: f64,
    /// The idle poll again once the tracked transfers are drained: how much the idle figure
    /// itself moves in this run.
    pub poll_idle_again_ns: f64,
    /// `poll_loaded_ns / poll_idle_ns` (goal: at most 1.5).
    pub poll_ratio: f64,
    /// Blocks of each large transfer.
    pub big_blocks: u32,
    /// Large transfers timed (one at a time).
    pub big_transfers: usize,
    /// Average time of the large transfer's `write_blocks`, µs.
    pub big_submit_avg_us: f64,
    /// 99th percentile of that submit time, µs.
    pub big_submit_p99_us: f64,
    /// Average time from the large transfer's submit to its id reported done, µs.
    pub big_complete_avg_us: f64,
    /// 99th percentile of that completion time, µs.
    pub big_complete_p99_us: f64,
    /// One-block WRITEs between the two memory readings of the churn.
    pub churn_transfers: u64,
    /// Whether that count is below the full million (`--quick`, `--scale-transfers`).
    pub churn_reduced: bool,
    /// One-block WRITEs per second during the churn.
    pub churn_per_sec: f64,
    /// Resident memory before the churn (after a warm-up of a twentieth of it), MiB.
    pub rss_before_churn_mib: Option<f64>,
    /// Resident memory after the churn, MiB.
    pub rss_after_churn_mib: Option<f64>,
}

/// One-block WRITEs of the churn, full run.
pub(crate) const CHURN_FULL: u64 = 1_000_000;
/// One-block WRITEs of the churn, `--quick`.
pub(crate) const CHURN_QUICK: u64 = 20_000;

/// The sizes of one scale run (the constants above, but smaller in unit tests).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counts {
    pub(crate) peers: usize,
    pub(crate) blocks: u32,
    pub(crate) block: usize,
    pub(crate) tracked: usize,
    pub(crate) big: u32,
    pub(crate) big_transfers: usize,
    pub(crate) churn: u64,
}

impl Counts {
    /// The counts of a run with `args` (`--scale-transfers`, settled by `--quick`).
    pub(crate) fn of(args: &Args) -> Self {
        Counts {
            peers: PEERS,
            blocks: BLOCKS,
            block: BLOCK,
            tracked: TRACKED,
            big: BIG,
            big_transfers: BIG_TRANSFERS,
            churn: args.scale_transfers.unwrap_or(CHURN_FULL),
        }
    }
}

/// Runs the scale mode for each backend of `here` (opened by this binary), saying which on
/// stderr (unless this run only emits JSON for another binary).
pub(crate) fn run_here(backends: &dyn Backends, args: &Args, here: &[String]) -> Res<Vec<Scale>> {
    let mut out = Vec::new();
    for backend in here {
        if args.emit_json.is_none() {
            eprintln!("scale: {backend} ({PEERS} peers of {BLOCKS} x {BLOCK} B)");
        }
        out.push(
            measure::scale(backends, args, backend, Counts::of(args))
                .map_err(|e| format!("{backend} scale: {e}"))?,
        );
    }
    Ok(out)
}

/// Where a run that emits its JSON to `emitted` (`--emit-json`) puts its scale results: a
/// file beside it, which the binary that ran it reads back ([`read_beside`]).
pub(crate) fn beside(emitted: &Path) -> PathBuf {
    emitted.with_file_name("scale.json")
}

/// Writes `results` beside `emitted` (nothing when there are none).
pub(crate) fn emit_beside(emitted: &Path, results: &[Scale]) -> Res<()> {
    if results.is_empty() {
        return Ok(());
    }
    std::fs::write(beside(emitted), serde_json::to_string(results)?)?;
    Ok(())
}

/// The scale results another binary wrote beside `emitted`, if it wrote any.
pub(crate) fn read_beside(emitted: &Path) -> Res<Vec<Scale>> {
    let path = beside(emitted);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(serde_json::from_slice(&bytes).map_err(|e| format!("parsing {}: {e}", path.display()))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TestShm, test_args};

    #[test]
    fn quick_settles_a_reduced_churn_and_forwards_it() {
        let args = test_args(&["--quick", "--scale"]);
        assert!(args.measures("scale").expect("known"));
        assert!(!args.measures("throughput").expect("known"));
        let c = Counts::of(&args);
        assert_eq!((c.peers, c.blocks, c.churn), (PEERS, BLOCKS, CHURN_QUICK));
        let fwd = args.forwarded("nixl");
        for flag in ["--measures=scale", "--scale-transfers=20000"] {
            assert!(fwd.iter().any(|f| f == flag), "{flag} not in {fwd:?}");
        }
        assert_eq!(Counts::of(&test_args(&["--scale"])).churn, CHURN_FULL);
    }

    #[test]
    fn a_small_scale_run_of_shm_round_trips_beside_the_emitted_json() {
        let args = test_args(&["--scale"]);
        let counts = Counts {
            peers: 3,
            blocks: 64,
            block: 256,
            tracked: 40,
            big: 32,
            big_transfers: 3,
            churn: 300,
        };
        let s = measure::scale(&TestShm, &args, "shm", counts).expect("scale of shm");
        assert_eq!((s.peers, s.add_peer_us.len()), (3, 3));
        assert!(s.add_peer_max_us >= s.add_peer_median_us);
        assert_eq!((s.churn_transfers, s.churn_reduced), (300, true));
        assert_eq!((s.tracked, s.big_blocks, s.big_transfers), (40, 32, 3));
        assert!(s.poll_idle_ns > 0.0 && s.poll_loaded_ns > 0.0);
        let got = vec![s];
        let dir = std::env::temp_dir().join(format!("bw-scale-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let emitted = dir.join("run.json");
        assert!(read_beside(&emitted).expect("none yet").is_empty());
        emit_beside(&emitted, &got).expect("written");
        let back = read_beside(&emitted).expect("read back");
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].backend, "shm");
        assert_eq!(back[0].add_peer_us.len(), 3);
        // serde_json parses floats to within an ulp, not always bit for bit.
        assert!((back[0].poll_ratio - got[0].poll_ratio).abs() <= 1e-9 * got[0].poll_ratio);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
