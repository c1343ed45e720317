//! The command line, shared by `blockwire-bench` and `blockwire-bench-nixl`.

use std::path::PathBuf;

use blockwire::{BackendOptions, Op, TransportOptions};
use clap::Parser;

use crate::Res;

/// Compare blockwire backends: GB/s per block size, against the memory ceiling and each
/// backend's raw library.
#[derive(Parser, Clone, Debug)]
#[command(version, about)]
pub struct Args {
    /// Backends to run (default: every backend compiled in).
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Operations: write, read.
    #[arg(long, value_delimiter = ',', default_value = "write,read")]
    pub ops: Vec<String>,
    /// Block sizes in KiB.
    #[arg(long, value_delimiter = ',', default_value = "4,64,256,1024,4096")]
    pub sizes_kib: Vec<usize>,
    /// Blocks per transfer.
    #[arg(long, default_value_t = 16)]
    pub batch: u32,
    /// Transfers in flight.
    #[arg(long, default_value_t = 4)]
    pub depth: usize,
    /// Which blocks a transfer names: `scattered` (none adjacent, one library operation per
    /// block) or `contiguous` (one run of adjacent blocks, which backends move as one
    /// operation). The peers get the same.
    #[arg(long, value_enum, default_value_t = crate::Layout::Scattered)]
    pub layout: crate::Layout,
    /// Every sweep point's transfers carry the same bytes: `--batch` blocks of the largest
    /// `--sizes-kib` size, so smaller blocks come more to a transfer (4 KiB against 1 MiB: 256
    /// times `--batch`). With `--layout contiguous` the sweep shows what coalescing saves, a
    /// run of small blocks against the same bytes in large ones; with `scattered`, what each
    /// block costs. The peers get the same.
    #[arg(long)]
    pub same_bytes: bool,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Rounds of the throughput sweep: each round measures every backend's points, then the
    /// peers'; each point reports the round with its median GB/s. On a shared machine two
    /// measurements of one point can differ by half; three rounds leave out a dip or a burst
    /// that one round would report.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub rounds: u32,
    /// Slices of each shm throughput point: its transfers run in this many slices of
    /// `duration / slices`, each followed by a slice of the raw copy, so that `/raw` compares
    /// the two over the same moments of the machine (on a shared machine memory bandwidth
    /// swings by half within seconds). 1: the whole point, then the raw copy. Other
    /// backends' raw baselines connect on every call, so they run once, after the point.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub slices: u32,
    /// Bytes of each region in MiB (keep it larger than the last-level cache).
    #[arg(long, default_value_t = 256)]
    pub region_mib: usize,
    /// How the driver waits for transfers to end between its submits: `wait` (`poll_wait`:
    /// it sleeps until a transfer ends) or `sleep` (`poll` in a loop with short sleeps, see
    /// `--poll-sleep-us`). On a machine with few cores a poller that wakes often takes a core
    /// from the copy, posting and progress threads.
    #[arg(long, value_enum, default_value_t = crate::Waiting::Wait)]
    pub waiting: crate::Waiting,
    /// With `--waiting sleep`: the longest the driver sleeps after a `poll` that reported
    /// nothing done, µs (it sleeps a sixteenth of the average completion time, up to this; 0:
    /// it never sleeps, it yields and polls again).
    #[arg(long, default_value_t = 20)]
    pub poll_sleep_us: u64,
    /// What to measure: throughput (the sweep), registration (`add_remote_peer`), notify (the
    /// cost of a notification), telemetry (the overhead of telemetry on), scale (see `--scale`;
    /// not by default).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "throughput,registration,notify,telemetry"
    )]
    pub measures: Vec<String>,
    /// Notification cost: pairs of one plain and one notified transfer, depth 1, per operation
    /// [default: 2000; --quick: 200]. Their done-latencies come from telemetry's records.
    #[arg(long)]
    pub notify_iters: Option<usize>,
    /// Block size of the notification-cost transfers, KiB (blocks per transfer: `--batch`).
    #[arg(long, default_value_t = 64)]
    pub notify_kib: usize,
    /// Telemetry overhead: rounds of the same throughput point with telemetry off, then on
    /// (the next round on, then off), the best of each kept [default: 3; --quick: 2].
    #[arg(long)]
    pub telemetry_rounds: Option<usize>,
    /// Block size of the telemetry-overhead point, KiB (with `--batch` and `--depth`).
    #[arg(long, default_value_t = 64)]
    pub telemetry_kib: usize,
    /// Seconds of each telemetry-overhead measurement [default: --duration; --quick: 0.1].
    #[arg(long)]
    pub telemetry_duration: Option<f64>,
    /// The scale mode alone (as `--measures=scale`): one transport with 16 peers of 19,599
    /// blocks; `add_remote_peer` time and resident memory, scoped poll cost with 10,000
    /// transfers tracked, 4,000-block WRITEs, memory over many transfers (its own table and
    /// `scale.json`).
    #[arg(long)]
    pub scale: bool,
    /// One-block WRITEs of the scale mode's memory churn [default: 1000000; --quick: 20000].
    #[arg(long)]
    pub scale_transfers: Option<u64>,
    /// A short run for CI: two sizes, short measurements, smaller regions, fewer
    /// notification-cost pairs and telemetry rounds.
    #[arg(long)]
    pub quick: bool,
    /// Put the remote peer in a spawned process (this binary, serving one transport) instead
    /// of a second transport in this process. Raw baselines stay in one process.
    #[arg(long)]
    pub cross_process: bool,
    /// Backend options, `BACKEND:k=v,...` (repeatable), e.g. `ucx:tls=posix,cma,peer_errors=false`.
    #[arg(long = "opt")]
    pub opts: Vec<String>,
    /// Let each backend allocate its regions (UCX: `ucp_mem_map` ALLOCATE).
    #[arg(long)]
    pub allocate: bool,
    /// Peer engines measured at the same geometry for comparison, in one process and across
    /// two, through a Python driver: `mooncake` (its transfer engine over TCP), `nixl` (NIXL's
    /// own Python API, from target/nixl-runtime), or `none`.
    #[arg(long, value_delimiter = ',', default_value = "mooncake,nixl")]
    pub peers: Vec<String>,
    /// The python that runs the peers' drivers [default: this workspace's
    /// target/python-venv/bin/python, which scripts/setup-python.sh makes].
    #[arg(long)]
    pub peer_python: Option<PathBuf>,
    /// Folder the results (JSON, SVG plot) go into, one subfolder per run.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Write the run as JSON to this file instead of tables and a results folder (used when
    /// one binary runs a backend in another).
    #[arg(long, hide = true)]
    pub emit_json: Option<PathBuf>,
    /// Serve one transport, `BACKEND:BLOCKS:BLOCK_BYTES`, as the peer of a cross-process run.
    #[arg(long, hide = true)]
    pub serve_peer: Option<String>,
}

impl Args {
    /// Applies `--quick`.
    pub(crate) fn settle(&mut self) {
        if self.quick {
            self.sizes_kib = vec![64, 1024];
            self.duration = 0.3;
            self.region_mib = 64;
        }
        let quick = self.quick;
        self.notify_iters
            .get_or_insert(if quick { 200 } else { 2000 });
        self.telemetry_rounds
            .get_or_insert(if quick { 2 } else { 3 });
        self.scale_transfers.get_or_insert(if quick {
            crate::scale::CHURN_QUICK
        } else {
            crate::scale::CHURN_FULL
        });
        if self.scale {
            self.measures = vec!["scale".into()];
        }
        let duration = self.duration;
        self.telemetry_duration
            .get_or_insert(if quick { 0.1 } else { duration });
    }

    /// Blocks per transfer at sweep points of `block`-byte blocks: `--batch`, or with
    /// `--same-bytes` as many as carry `--batch` blocks of the largest size (at least one).
    pub(crate) fn sweep_batch(&self, block: usize) -> u32 {
        let largest = self.sizes_kib.iter().max().copied().unwrap_or(0) << 10;
        if !self.same_bytes || block == 0 || largest <= block {
            return self.batch;
        }
        let blocks = u64::from(self.batch) * largest as u64 / block as u64;
        u32::try_from(blocks).unwrap_or(u32::MAX).max(1)
    }

    /// Whether `what` (`throughput`, `registration`, `notify`, `telemetry`, `scale`) is to be
    /// measured.
    pub(crate) fn measures(&self, what: &str) -> Res<bool> {
        const KNOWN: [&str; 5] = ["throughput", "registration", "notify", "telemetry", "scale"];
        if let Some(bad) = self.measures.iter().find(|m| !KNOWN.contains(&m.as_str())) {
            return Err(format!("unknown measure {bad:?} ({})", KNOWN.join(", ")).into());
        }
        Ok(self.measures.iter().any(|m| m == what))
    }

    /// The operations asked for.
    pub(crate) fn ops(&self) -> Res<Vec<Op>> {
        self.ops
            .iter()
            .map(|o| match o.as_str() {
                "write" => Ok(Op::Write),
                "read" => Ok(Op::Read),
                other => Err(format!("unknown op {other:?} (write, read)").into()),
            })
            .collect()
    }

    /// Transport options for `backend`, with its `--opt` settings.
    pub fn options(&self, backend: &str) -> Res<TransportOptions> {
        let mut opts = BackendOptions::new();
        for o in &self.opts {
            if let Some(list) = o.strip_prefix(backend).and_then(|r| r.strip_prefix(':')) {
                for (k, v) in BackendOptions::parse_list(list)?.iter() {
                    opts.set(k, v);
                }
            }
        }
        Ok(TransportOptions::default().with_backend_options(opts))
    }

    /// One backend option given with `--opt` (the raw baselines honour the transport choice).
    pub fn option(&self, backend: &str, key: &str) -> Option<String> {
        let mut opts = self.options(backend).ok()?.backend;
        opts.take::<String>(key).ok().flatten()
    }

    /// The arguments that make another binary run the same measurements of `backend`.
    pub(crate) fn forwarded(&self, backend: &str) -> Vec<String> {
        let mut v = vec![
            format!("--backends={backend}"),
            format!("--ops={}", self.ops.join(",")),
            format!(
                "--sizes-kib={}",
                self.sizes_kib
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("--batch={}", self.batch),
            format!("--depth={}", self.depth),
            format!("--layout={}", value_name(&self.layout)),
            format!("--duration={}", self.duration),
            format!("--rounds={}", self.rounds),
            format!("--slices={}", self.slices),
            format!("--region-mib={}", self.region_mib),
            format!("--waiting={}", value_name(&self.waiting)),
            format!("--poll-sleep-us={}", self.poll_sleep_us),
            format!("--measures={}", self.measures.join(",")),
            format!("--notify-kib={}", self.notify_kib),
            format!("--telemetry-kib={}", self.telemetry_kib),
            // The peers run once, in the binary that merges.
            "--peers=none".into(),
        ];
        // Settled (`--quick` applied), so that the other binary runs the same counts.
        if let Some(n) = self.notify_iters {
            v.push(format!("--notify-iters={n}"));
        }
        if let Some(n) = self.telemetry_rounds {
            v.push(format!("--telemetry-rounds={n}"));
        }
        if let Some(d) = self.telemetry_duration {
            v.push(format!("--telemetry-duration={d}"));
        }
        if let Some(n) = self.scale_transfers {
            v.push(format!("--scale-transfers={n}"));
        }
        v.extend(self.opts.iter().map(|o| format!("--opt={o}")));
        if self.allocate {
            v.push("--allocate".into());
        }
        if self.cross_process {
            v.push("--cross-process".into());
        }
        if self.same_bytes {
            v.push("--same-bytes".into());
        }
        v
    }
}

/// The name a `clap::ValueEnum` value is given on the command line.
fn value_name(value: &impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::test_args;
    use clap::Parser;

    /// `--rounds` (default 1) and `--slices` (default 4): each is forwarded to the child
    /// binary, and 0 is refused.
    #[test]
    fn rounds_and_slices_have_defaults_are_forwarded_and_zero_is_refused() {
        let defaults = test_args(&[]);
        type Of = fn(&super::Args) -> u32;
        let cases: [(&str, u32, Of); 2] =
            [("rounds", 1, |a| a.rounds), ("slices", 4, |a| a.slices)];
        for (flag, default, of) in cases {
            assert_eq!(of(&defaults), default, "--{flag}");
            let given = format!("--{flag}=3");
            let args = test_args(&[&given]);
            assert_eq!(of(&args), 3, "--{flag}");
            assert!(args.forwarded("nixl").contains(&given), "--{flag}");
            let zero = format!("--{flag}=0");
            assert!(super::Args::try_parse_from(["blockwire-bench", &zero]).is_err());
        }
    }

    #[test]
    fn quick_settles_the_cost_counts_and_forwards_them() {
        let args = test_args(&["--quick"]);
        assert_eq!(args.notify_iters, Some(200));
        assert_eq!(args.telemetry_rounds, Some(2));
        assert_eq!(args.telemetry_duration, Some(0.1));
        let fwd = args.forwarded("nixl");
        for flag in [
            "--notify-iters=200",
            "--telemetry-rounds=2",
            "--telemetry-duration=0.1",
            "--measures=throughput,registration,notify,telemetry",
            "--peers=none",
        ] {
            assert!(fwd.iter().any(|f| f == flag), "{flag} not in {fwd:?}");
        }
        // Forwarded without `--quick`, the other binary settles to the same counts.
        let mut child: Vec<&str> = fwd.iter().map(String::as_str).collect();
        child.retain(|f| !f.starts_with("--backends"));
        let again = test_args(&child);
        assert_eq!(again.notify_iters, Some(200));
        assert_eq!(again.telemetry_duration, Some(0.1));
    }

    #[test]
    fn explicit_counts_win_over_quick_and_defaults_follow_duration() {
        let args = test_args(&["--quick", "--notify-iters=7", "--telemetry-rounds=1"]);
        assert_eq!(
            (args.notify_iters, args.telemetry_rounds),
            (Some(7), Some(1))
        );
        let full = test_args(&["--duration=0.5"]);
        assert_eq!(full.notify_iters, Some(2000));
        assert_eq!(full.telemetry_duration, Some(0.5));
    }

    #[test]
    fn same_bytes_scales_the_batch_to_the_largest_size_and_is_forwarded() {
        let args = test_args(&["--sizes-kib=4,64,1024", "--batch=16", "--same-bytes"]);
        assert_eq!(args.sweep_batch(4 << 10), 4096);
        assert_eq!(args.sweep_batch(64 << 10), 256);
        assert_eq!(args.sweep_batch(1 << 20), 16);
        assert!(args.forwarded("nixl").iter().any(|f| f == "--same-bytes"));
        let plain = test_args(&["--sizes-kib=4,1024", "--batch=16"]);
        assert_eq!(plain.sweep_batch(4 << 10), 16);
        assert!(!plain.forwarded("nixl").iter().any(|f| f == "--same-bytes"));
    }

    #[test]
    fn measures_are_checked() {
        let args = test_args(&["--measures=notify"]);
        assert!(args.measures("notify").expect("known"));
        assert!(!args.measures("throughput").expect("known"));
        assert!(test_args(&["--measures=nope"]).measures("notify").is_err());
    }
}
