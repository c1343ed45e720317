//! `blockwire-bench`: compares the backends compiled in, side by side, against the memory
//! ceiling measured in the same run.
//!
//! For each backend, operation and block size it keeps `depth` transfers of `batch` blocks in
//! flight between two transports in this process for `duration` seconds, over regions larger
//! than the last-level cache, and prints GB/s and the ratio to a single-thread `memcpy` over
//! the same working set. Ratios measured in one run are what to compare: these machines are
//! shared and noisy.
//!
//! ```text
//! cargo run --release -p blockwire-bench            # full sweep
//! cargo run --release -p blockwire-bench -- --quick # under a minute
//! ```

use std::time::{Duration, Instant};

use blockwire::{AnyTransport, BackendOptions, Op, PeerId, Region, Transport, TransportOptions};
use clap::Parser;

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
    let region_bytes = args.region_mib << 20;
    let ceiling = memcpy_gbps(region_bytes, Duration::from_secs_f64(args.duration));
    println!(
        "memory ceiling (single-thread memcpy over {} MiB): {ceiling:.2} GB/s",
        args.region_mib
    );
    println!(
        "batch {} blocks, {} transfers in flight, {:.1} s per point\n",
        args.batch, args.depth, args.duration
    );
    for backend in &args.backends {
        for op in &args.ops {
            let op = match op.as_str() {
                "write" => Op::Write,
                "read" => Op::Read,
                other => return Err(format!("unknown op {other:?}").into()),
            };
            println!("{backend} {op}");
            println!(
                "{:>10} {:>8} {:>6} {:>10} {:>9} {:>12} {:>12}",
                "block", "batch", "depth", "GB/s", "/memcpy", "submit us", "complete us"
            );
            for &kib in &args.sizes_kib {
                let r = run_point(backend, op, kib << 10, region_bytes, &args)?;
                println!(
                    "{:>9}K {:>8} {:>6} {:>10.2} {:>9.2} {:>12.1} {:>12.1}",
                    kib,
                    r.batch,
                    args.depth,
                    r.gbps,
                    r.gbps / ceiling,
                    r.submit_us,
                    r.complete_us
                );
            }
            println!();
        }
    }
    println!("add_remote_peer (median of 5, blocks of 64 bytes)");
    println!(
        "{:>10} {:>12} {:>12} {:>12}",
        "backend", "1,000", "19,599", "1,000,000"
    );
    for backend in &args.backends {
        let mut row = format!("{backend:>10}");
        for blocks in [1_000u32, 19_599, 1_000_000] {
            let us = registration_us(&args, backend, blocks)?;
            row.push_str(&format!(" {:>10.1}us", us));
        }
        println!("{row}");
    }
    Ok(())
}

fn is_unsupported(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<blockwire::Error>(),
        Some(blockwire::Error::Open { source, .. })
            if source.kind() == blockwire::BackendErrorKind::Unsupported
    )
}

/// Median time of `add_remote_peer` for a peer of `blocks` blocks, in microseconds.
fn registration_us(
    args: &Args,
    backend: &str,
    blocks: u32,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (a, b) = (
        args.open(backend, blocks, 64)?,
        args.open(backend, blocks, 64)?,
    );
    let desc = b.descriptor()?;
    let peer = PeerId::from("b");
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        a.add_remote_peer(&peer, &desc)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        a.remove_remote_peer(&peer)?;
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Single-thread copy throughput over a working set of `bytes` (source and destination of
/// `bytes` each), best of the passes that fit in `time`.
fn memcpy_gbps(bytes: usize, time: Duration) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // touch every page first
    let start = Instant::now();
    let mut best = f64::MAX;
    while start.elapsed() < time || best == f64::MAX {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e9
}

struct Point {
    batch: u32,
    gbps: f64,
    submit_us: f64,
    complete_us: f64,
}

fn run_point(
    backend: &str,
    op: Op,
    block: usize,
    region_bytes: usize,
    args: &Args,
) -> Result<Point, Box<dyn std::error::Error>> {
    let blocks = u32::try_from((region_bytes / block).max(1))?;
    let batch = args.batch.min(blocks);
    let (a, b) = (
        args.open(backend, blocks, block)?,
        args.open(backend, blocks, block)?,
    );
    for i in 0..blocks {
        a.region().fill_block(i, (i % 251) as u8)?;
        b.region().fill_block(i, (i % 241) as u8)?;
    }
    let peer = PeerId::from("b");
    a.add_remote_peer(&peer, &b.descriptor()?)?;
    let groups = (blocks / batch).max(1);
    let mut next = 0u32;
    let mut submit = Duration::ZERO;
    let mut complete = Duration::ZERO;
    let mut inflight: Vec<(blockwire::TransferId, Instant)> = Vec::new();
    let mut finished = 0u64;
    let run_for = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    loop {
        let running = start.elapsed() < run_for;
        while running && inflight.len() < args.depth {
            let first = (next % groups) * batch;
            next += 1;
            let idx: Vec<u32> = (first..first + batch).collect();
            let t = Instant::now();
            let id = match op {
                Op::Write => a.write_blocks(&peer, &idx, &idx)?,
                _ => a.read_blocks(&peer, &idx, &idx)?,
            };
            submit += t.elapsed();
            inflight.push((id, t));
        }
        if inflight.is_empty() {
            break;
        }
        let r = a.poll(Some(&peer))?;
        if let Some((id, reason)) = r.failed.first() {
            return Err(format!("transfer {id} failed: {reason}").into());
        }
        for id in r.done {
            if let Some(k) = inflight.iter().position(|(x, _)| *x == id) {
                complete += inflight.swap_remove(k).1.elapsed();
                finished += 1;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = finished as f64 * f64::from(batch) * block as f64;
    let n = (next as f64).max(1.0);
    Ok(Point {
        batch,
        gbps: bytes / secs / 1e9,
        submit_us: submit.as_secs_f64() * 1e6 / n,
        complete_us: complete.as_secs_f64() * 1e6 / (finished as f64).max(1.0),
    })
}
