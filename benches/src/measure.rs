//! Measurements: the memory ceiling, throughput points, the raw baseline, registration.

use std::time::{Duration, Instant};

use blockwire::{AnyTransport, Op, PeerId, TransferId, Transport};
use serde::Serialize;

use crate::Args;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Single-thread copy throughput over a working set of `bytes` (source and destination of
/// `bytes` each), best of the passes that fit in `time`.
pub(crate) fn memcpy_gbps(bytes: usize, time: Duration) -> f64 {
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

/// One throughput measurement.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) backend: String,
    pub(crate) op: String,
    pub(crate) block_bytes: usize,
    pub(crate) batch: u32,
    pub(crate) depth: usize,
    pub(crate) gbps: f64,
    pub(crate) ratio_to_memcpy: f64,
    /// The same block copies without blockwire (shm: `memcpy` block by block), if known.
    pub(crate) raw_gbps: Option<f64>,
    pub(crate) submit_avg_us: f64,
    pub(crate) submit_p99_us: f64,
    pub(crate) complete_avg_us: f64,
    pub(crate) complete_p99_us: f64,
}

fn avg_p99(mut v: Vec<f64>) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let avg = v.iter().sum::<f64>() / v.len() as f64;
    let p99 = v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1];
    (avg, p99)
}

/// Keeps `depth` transfers of `batch` blocks in flight for the run time.
pub(crate) fn throughput(
    args: &Args,
    backend: &str,
    op: Op,
    block: usize,
    ceiling: f64,
) -> Res<Point> {
    let region_bytes = args.region_mib << 20;
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
    let mut submits = Vec::new();
    let mut completes = Vec::new();
    let mut inflight: Vec<(TransferId, Instant)> = Vec::new();
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
            submits.push(t.elapsed().as_secs_f64() * 1e6);
            inflight.push((id, t));
        }
        if inflight.is_empty() {
            break;
        }
        let r = a.poll(Some(&peer))?;
        if let Some((id, reason)) = r.failed.first() {
            return Err(format!("transfer {id} failed: {reason}").into());
        }
        if r.done.is_empty() {
            // Leave the cores to the data path (copy and progress threads).
            std::thread::yield_now();
        }
        for id in r.done {
            if let Some(k) = inflight.iter().position(|(x, _)| *x == id) {
                completes.push(inflight.swap_remove(k).1.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let gbps = completes.len() as f64 * f64::from(batch) * block as f64 / secs / 1e9;
    let raw_gbps = match backend {
        "shm" => Some(raw_memcpy_gbps(&a, &b, batch, groups, run_for)),
        #[cfg(feature = "ucx")]
        "ucx" => {
            drop((a, b));
            let tls = args.option(backend, "tls");
            Some(crate::raw_ucx::gbps(
                op,
                blocks,
                block,
                batch,
                args.depth,
                run_for,
                tls.as_deref(),
            )?)
        }
        #[cfg(feature = "libfabric")]
        "libfabric" => {
            drop((a, b));
            let provider = match args.option(backend, "provider").as_deref() {
                None | Some("tcp") => "tcp;ofi_rxm".to_owned(),
                Some(p) => p.to_owned(),
            };
            let domain = args.option(backend, "domain");
            Some(crate::raw_ofi::gbps(
                op,
                blocks,
                block,
                batch,
                args.depth,
                run_for,
                &provider,
                domain.as_deref(),
            )?)
        }
        _ => None,
    };
    let (submit_avg_us, submit_p99_us) = avg_p99(submits);
    let (complete_avg_us, complete_p99_us) = avg_p99(completes);
    Ok(Point {
        backend: backend.to_owned(),
        op: op.to_string(),
        block_bytes: block,
        batch,
        depth: args.depth,
        gbps,
        ratio_to_memcpy: gbps / ceiling,
        raw_gbps,
        submit_avg_us,
        submit_p99_us,
        complete_avg_us,
        complete_p99_us,
    })
}

/// The shm backend's raw baseline: the same batches of block copies between the same two
/// regions, by one thread, with nothing of blockwire in between.
fn raw_memcpy_gbps(
    a: &AnyTransport,
    b: &AnyTransport,
    batch: u32,
    groups: u32,
    run_for: Duration,
) -> f64 {
    let len = a.block_len();
    let (src, dst) = (a.region().span().base(), b.region().span().base());
    let mut copied = 0usize;
    let mut next = 0u32;
    let start = Instant::now();
    while start.elapsed() < run_for {
        let first = (next % groups) * batch;
        next += 1;
        for i in first..first + batch {
            let off = i as usize * len;
            // SAFETY: `i` < num_blocks of both regions (same shape), so both ranges lie inside
            // their regions, which live as long as `a` and `b`; nothing else runs on them now.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr().add(off), dst.as_ptr().add(off), len)
            };
            copied += len;
        }
    }
    copied as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// Median time of `add_remote_peer` for a peer of `blocks` blocks, in microseconds.
pub(crate) fn registration_us(args: &Args, backend: &str, blocks: u32) -> Res<f64> {
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

/// Registration cost of one backend.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Registration {
    pub(crate) backend: String,
    pub(crate) blocks: u32,
    pub(crate) median_us: f64,
}
