//! `blockwire-bench`: compares the backends compiled in, side by side, against the memory
//! ceiling measured in the same run.
//!
//! For each backend, operation and block size it keeps `depth` transfers of `batch` blocks in
//! flight between two transports in this process for `duration` seconds, over regions larger
//! than the last-level cache, and prints GB/s, the ratio to a single-thread `memcpy` over the
//! same working set, the ratio to the backend's raw baseline where there is one (shm: the same
//! block copies by `memcpy`), and average and p99 submit and completion times; then the time
//! to add a peer of 1,000, 19,599 and 1,000,000 blocks. Results also go to `results/run-*/` as
//! JSON and an SVG plot. Ratios measured in one run are what to compare: these machines are
//! shared and noisy.
//!
//! ```text
//! cargo run --release -p blockwire-bench            # full sweep
//! cargo run --release -p blockwire-bench -- --quick # under a minute
//! ```

mod measure;
#[cfg(feature = "libfabric")]
mod raw_ofi;
#[cfg(feature = "ucx")]
mod raw_ucx;
mod report;

use std::time::Duration;

use blockwire::{AnyTransport, BackendOptions, Op, Region, TransportOptions};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

/// Compare blockwire backends: GB/s per block size, against the memory ceiling.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Backends to run (default: every backend compiled in).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Operations.
    #[arg(long, value_delimiter = ',', default_value = "write,read")]
    ops: Vec<String>,
    /// Block sizes in KiB.
    #[arg(long, value_delimiter = ',', default_value = "4,64,256,1024,4096")]
    sizes_kib: Vec<usize>,
    /// Blocks per transfer.
    #[arg(long, default_value_t = 16)]
    batch: u32,
    /// Transfers in flight.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    duration: f64,
    /// Bytes of each region in MiB (keep it larger than the last-level cache).
    #[arg(long, default_value_t = 256)]
    region_mib: usize,
    /// A short run for CI: two sizes, short measurements, smaller regions.
    #[arg(long)]
    quick: bool,
    /// Backend options, `BACKEND:k=v,...` (repeatable), e.g. `ucx:tls=posix,cma,peer_errors=false`.
    #[arg(long = "opt")]
    opts: Vec<String>,
    /// Let each backend allocate its regions (UCX: `ucp_mem_map` ALLOCATE).
    #[arg(long)]
    allocate: bool,
    /// Folder the results (JSON, SVG plot) go into, one subfolder per run.
    #[arg(long, default_value = "results")]
    results: std::path::PathBuf,
}

impl Args {
    /// Transport options for `backend`, with its `--opt` settings.
    fn options(&self, backend: &str) -> Result<TransportOptions, Box<dyn std::error::Error>> {
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
    #[cfg_attr(not(any(feature = "ucx", feature = "libfabric")), allow(dead_code))]
    fn option(&self, backend: &str, key: &str) -> Option<String> {
        let mut opts = self.options(backend).ok()?.backend;
        opts.take::<String>(key).ok().flatten()
    }

    fn open(
        &self,
        backend: &str,
        blocks: u32,
        block: usize,
    ) -> Result<AnyTransport, Box<dyn std::error::Error>> {
        let options = self.options(backend)?;
        Ok(if self.allocate {
            blockwire::open_allocated(backend, blocks, block, options)?
        } else {
            blockwire::open(backend, Region::new(blocks, block)?, options)?
        })
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = Args::parse();
    if args.quick {
        args.sizes_kib = vec![64, 1024];
        args.duration = 0.3;
        args.region_mib = 64;
    }
    if args.backends.is_empty() {
        args.backends = blockwire::backends()
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    // A backend that cannot run in this process (NIXL beside the system UCX) is reported and
    // left out; any other failure stops the run.
    let mut usable = Vec::new();
    for backend in &args.backends {
        match args.open(backend, 1, 4096) {
            Ok(_) => usable.push(backend.clone()),
            Err(e) if is_unsupported(&*e) => println!("{backend}: skipped: {e}"),
            Err(e) => return Err(e),
        }
    }
    args.backends = usable;
    let ops: Vec<Op> = args
        .ops
        .iter()
        .map(|o| match o.as_str() {
            "write" => Ok(Op::Write),
            "read" => Ok(Op::Read),
            other => Err(format!("unknown op {other:?}")),
        })
        .collect::<Result<_, _>>()?;
    let region_bytes = args.region_mib << 20;
    let memcpy = measure::memcpy_gbps(region_bytes, Duration::from_secs_f64(args.duration));
    let total = args.backends.len() * (ops.len() * args.sizes_kib.len() + REGISTRATION_SIZES.len());
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut run = report::Run {
        memcpy_gbps: memcpy,
        region_mib: args.region_mib,
        points: Vec::new(),
        registration: Vec::new(),
    };
    for backend in &args.backends {
        for &op in &ops {
            for &kib in &args.sizes_kib {
                bar.set_message(format!("{backend} {op} {kib} KiB"));
                run.points
                    .push(measure::throughput(&args, backend, op, kib << 10, memcpy)?);
                bar.inc(1);
            }
        }
        for blocks in REGISTRATION_SIZES {
            bar.set_message(format!("{backend} add_remote_peer, {blocks} blocks"));
            run.registration.push(measure::Registration {
                backend: backend.clone(),
                blocks,
                median_us: measure::registration_us(&args, backend, blocks)?,
            });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    report::print_tables(&run);
    let dir = report::write(&run, &args.results)?;
    println!("\nresults (JSON and SVG plot): {}", dir.display());
    Ok(())
}

/// Peer sizes whose registration is timed.
const REGISTRATION_SIZES: [u32; 3] = [1_000, 19_599, 1_000_000];

fn is_unsupported(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<blockwire::Error>(),
        Some(blockwire::Error::Open { source, .. })
            if source.kind() == blockwire::BackendErrorKind::Unsupported
    )
}
