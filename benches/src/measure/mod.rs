//! Measurements: throughput points, the shm raw baseline, registration.

use std::time::{Duration, Instant};

use blockwire::{Capabilities, Op, PeerId, Transport};
use serde::{Deserialize, Serialize};

use crate::ceiling::{CeilingKind, Ceilings, WorkingSet};
use crate::remote::{Remote, initiator};
use crate::{Args, Backends, Res, Shape};

mod pump;

pub(crate) use pump::{Driver, Pumped, WAIT_SLICE, preempted, pump};

/// One throughput measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// Backend name.
    pub backend: String,
    /// `WRITE` or `READ`.
    pub op: String,
    /// Whether the remote transport ran in another process.
    pub cross_process: bool,
    /// Bytes per block.
    pub block_bytes: usize,
    /// Blocks per transfer.
    pub batch: u32,
    /// Transfers kept in flight.
    pub depth: usize,
    /// Blocks moved per second, in GB/s: with `--rounds`, the median round's.
    pub gbps: f64,
    /// GB/s of every round of this point, in the order measured (`gbps` is their median);
    /// empty in runs recorded before it.
    #[serde(default)]
    pub round_gbps: Vec<f64>,
    /// Which ceiling bounds this setting ([`CeilingKind::of`]; a peer over TCP: `tcp`).
    #[serde(default)]
    pub ceiling: CeilingKind,
    /// The run's value of that ceiling, GB/s ([`crate::Run::ceilings`]; runs before those
    /// were measured put the single-thread `memcpy` here).
    pub ceiling_gbps: f64,
    /// `gbps / ceiling_gbps`.
    #[serde(default)]
    pub ratio_to_ceiling: f64,
    /// Single-thread `memcpy` GB/s over the same working set, measured just before this
    /// point.
    #[serde(default)]
    pub memcpy_1thr_gbps: f64,
    /// `gbps / memcpy_1thr_gbps`.
    pub ratio_to_memcpy: f64,
    /// Whether this is a peer engine measured for comparison (Mooncake), not blockwire.
    #[serde(default)]
    pub peer: bool,
    /// The same batches through the backend's library without blockwire, if there is a
    /// baseline (measured in one process).
    pub raw_gbps: Option<f64>,
    /// Average time of `write_blocks`/`read_blocks`, µs.
    pub submit_avg_us: f64,
    /// 99th percentile of the submit time, µs: the submits once transfers are in flight (not
    /// those that fill the pipeline, `fill_submit_max_us`).
    pub submit_p99_us: f64,
    /// The median of the submits that filled the pipeline, µs: the first `depth` of the
    /// point, and of each of its slices (`--slices`), handed to a transport whose threads had
    /// had nothing to do (a copy or posting thread asleep, to be woken). Kept out of the other
    /// submit figures, which are the steady state's: shm's four slices a point would otherwise
    /// put 16 such submits among its 200 to 350 at 4 MiB, and set its p99. `None` where not
    /// measured (the peers, older runs).
    #[serde(default)]
    pub fill_submit_p50_us: Option<f64>,
    /// The slowest of those, µs (preempted or not: one the scheduler took the core from
    /// during the call can take milliseconds).
    #[serde(default)]
    pub fill_submit_max_us: Option<f64>,
    /// Share of the submits during which the scheduler preempted the calling thread (an
    /// involuntary context switch, `getrusage(RUSAGE_THREAD)`); `None` where not measured.
    #[serde(default)]
    pub submit_preempted: Option<f64>,
    /// 99th percentile of the submits that kept their core (no involuntary switch), µs: the
    /// submit's own cost, waits on locks included, the scheduler's time slices of other
    /// threads not.
    #[serde(default)]
    pub submit_p99_on_core_us: Option<f64>,
    /// 99th percentile of a spin as long as the median recent submit, timed right after submits
    /// (at most one a millisecond) and kept when not preempted (see the `stall` module), µs:
    /// what this machine under this load adds to any work that short, with no system call
    /// and nothing shared (timer interrupts, softirqs, a hypervisor taking the virtual CPU).
    /// The floor under `submit_p99_on_core_us`. `None` where not measured (the peers, older
    /// runs).
    #[serde(default)]
    pub spin_p99_us: Option<f64>,
    /// 99th percentile of the time to wake a thread blocked on a channel, µs, timed right
    /// after submits (at most one a millisecond; see the `wake` module): what handing work
    /// to a sleeping thread costs the caller on this machine under this load. A submit that
    /// never waits still hands its transfer over (to the posting or copy threads), so a tail
    /// the kernel adds to that hand-over shows here as well as in the submit's p99. `None`
    /// where not measured (the peers, older runs).
    #[serde(default)]
    pub wake_p99_us: Option<f64>,
    /// 99.9th percentile of one `poll` call, µs, with `--waiting sleep` (the driver then
    /// polls; with `wait` it calls `poll_wait`, which sleeps by design): `poll` never blocks,
    /// so a tail here is a wait for another thread (a lock held across a library call that
    /// moves data). `None` where not measured.
    #[serde(default)]
    pub poll_p999_us: Option<f64>,
    /// The CPU time of the thread that submits and polls, per transfer that ended, µs: its
    /// `write_blocks`/`read_blocks` and `poll_wait` calls (a `poll_wait` asleep costs none;
    /// waking it does), with the driver's own bookkeeping and probes (at most one of each a
    /// millisecond). What driving transfers costs the caller's thread, an inference
    /// scheduler's; on a machine whose cores the data path's threads fill, also what it takes
    /// from them. The peers': their driver's thread, in Python (`time.thread_time`). `None`
    /// where not measured (older runs).
    #[serde(default)]
    pub caller_cpu_us_per_transfer: Option<f64>,
    /// Average time from submit to the id reported done by `poll`, µs.
    pub complete_avg_us: f64,
    /// 99th percentile of the completion time, µs.
    pub complete_p99_us: f64,
}

impl Point {
    /// The share of a core the calling thread kept busy: its CPU time per transfer times the
    /// transfers a second that `gbps` means.
    pub fn caller_cores(&self) -> Option<f64> {
        let bytes_per_transfer = f64::from(self.batch) * self.block_bytes as f64;
        self.caller_cpu_us_per_transfer
            .filter(|_| bytes_per_transfer > 0.0)
            .map(|us| us / 1e6 * self.gbps * 1e9 / bytes_per_transfer)
    }
}

/// Registration cost of one backend.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Registration {
    /// Backend name.
    pub backend: String,
    /// Blocks in the peer's region.
    pub blocks: u32,
    /// Median of 5 `add_remote_peer` calls, µs.
    pub median_us: f64,
}

/// Average and 99th percentile of `v` (zeros when empty).
pub(crate) fn avg_p99(v: Vec<f64>) -> (f64, f64) {
    let s = Summary::of(v);
    (s.avg, s.p99)
}

/// Average, median and 99th percentile of a set of times.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Summary {
    pub(crate) avg: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
}

impl Summary {
    /// Of `v` (zeros when empty).
    pub(crate) fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Summary {
            avg: v.iter().sum::<f64>() / v.len() as f64,
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
        }
    }
}

/// The shape of a measurement of `block`-byte blocks over regions of `--region-mib`.
pub(crate) fn shape(args: &Args, op: Op, block: usize, run_for: Duration) -> Res<Shape> {
    let blocks = u32::try_from(((args.region_mib << 20) / block).max(1))?;
    Ok(Shape {
        op,
        blocks,
        block,
        batch: args.batch.min(blocks),
        depth: args.depth,
        run_for,
        layout: args.layout,
    })
}

/// Why `op` of a backend with `caps` cannot be measured here, if it cannot.
pub(crate) fn skip_reason(caps: &Capabilities, op: Op, args: &Args) -> Option<String> {
    if op == Op::Read && !caps.read {
        Some("no READ (Capabilities::read is false)".into())
    } else if args.cross_process && !caps.cross_process {
        Some("no peers in other processes (Capabilities::cross_process is false)".into())
    } else {
        None
    }
}

/// Keeps `depth` transfers of `batch` blocks in flight for the run time.
pub(crate) fn throughput(
    backends: &dyn Backends,
    args: &Args,
    backend: &str,
    op: Op,
    block: usize,
    (set, ceilings): (&mut WorkingSet, &mut Ceilings),
) -> Res<Point> {
    let mut shape = shape(args, op, block, Duration::from_secs_f64(args.duration))?;
    shape.batch = args.sweep_batch(block).min(shape.blocks);
    let remote = Remote::open(backends, args, backend, shape.blocks, block)?;
    let size = (shape.blocks, block);
    let a = initiator(
        backends,
        args,
        backend,
        size,
        args.options(backend)?,
        &remote,
    )?;
    let memcpy_1thr_gbps = set.gbps(shape.run_for / 2);
    let ceiling = CeilingKind::of(backend, args);
    ceilings.probe(ceiling, set, shape.run_for / 4)?;
    let driver = Driver::of(args);
    // Only shm's raw baseline (a plain copy) is sliced: the libraries' raw baselines open
    // and connect on every call, and short slices would time their ramp-up (in a `--quick`
    // run raw libfabric at 64 KiB moved a sixth of what it moves in one piece).
    let (pumped, raw_during) = if backend == "shm" && args.slices > 1 {
        let (pumped, raw) = sliced(&*a, &shape, args.slices, driver, |slice| {
            backends.raw_gbps(backend, slice, args)
        })?;
        (pumped, Some(raw))
    } else {
        (pump(&*a, &shape, driver)?, None)
    };
    a.close()?;
    drop((a, remote));
    // The others run once the transports are closed: with a transport's threads still there
    // (a progress thread's naps) raw libfabric moved half as much at 64 KiB.
    let raw_gbps = match raw_during {
        Some(raw) => raw,
        None => backends.raw_gbps(backend, &shape, args)?,
    };
    let gbps = pumped.gbps();
    let caller_cpu_us_per_transfer = pumped.caller_cpu_us_per_transfer();
    let Pumped {
        submits,
        fills,
        submits_on_core,
        completes,
        wakes,
        spins,
        polls,
        ..
    } = pumped;
    let fill_submit_max_us = fills.iter().copied().reduce(f64::max);
    let fill_submit_p50_us = (!fills.is_empty()).then(|| Summary::of(fills.clone()).p50);
    // A run too short for any transfer to end before it stopped submitting (a `--quick` point
    // of large blocks over TCP) has only the fill: its submits are what there is.
    let submits = if submits.is_empty() { fills } else { submits };
    let (submit_preempted, submit_p99_on_core_us) = preempted(submits.len(), submits_on_core);
    let (submit_avg_us, submit_p99_us) = avg_p99(submits);
    let (complete_avg_us, complete_p99_us) = avg_p99(completes);
    let wake_p99_us = (!wakes.is_empty()).then(|| Summary::of(wakes).p99);
    let spin_p99_us = (!spins.is_empty()).then(|| Summary::of(spins).p99);
    let poll_p999_us = (!polls.is_empty()).then(|| Summary::of(polls).p999);
    Ok(Point {
        backend: backend.to_owned(),
        op: op.to_string(),
        cross_process: args.cross_process,
        block_bytes: block,
        batch: shape.batch,
        depth: args.depth,
        gbps,
        // Filled in when the rounds are settled (`Run::keep_median_points`).
        round_gbps: Vec::new(),
        ceiling,
        // Set with the run's ceilings, once they are known (`Run::settle`).
        ceiling_gbps: 0.0,
        ratio_to_ceiling: 0.0,
        memcpy_1thr_gbps,
        ratio_to_memcpy: ratio(gbps, memcpy_1thr_gbps),
        peer: false,
        raw_gbps,
        submit_avg_us,
        submit_p99_us,
        fill_submit_p50_us,
        fill_submit_max_us,
        submit_preempted,
        submit_p99_on_core_us,
        spin_p99_us,
        wake_p99_us,
        poll_p999_us,
        caller_cpu_us_per_transfer,
        complete_avg_us,
        complete_p99_us,
    })
}

/// Runs the point in `slices` slices of `shape.run_for / slices`, each followed by a slice of
/// the raw baseline (`raw`, given the slice's shape): the transfers' GB/s over all their
/// slices, and the raw baseline's mean, so that the two are measured over the same moments of
/// a machine whose memory bandwidth swings (on a shared 2-core VM, a copy moved 23 GB/s, then
/// 33, then 23 again in seconds).
fn sliced(
    a: &dyn Transport,
    shape: &Shape,
    slices: u32,
    driver: Driver,
    mut raw: impl FnMut(&Shape) -> Res<Option<f64>>,
) -> Res<(Pumped, Option<f64>)> {
    let slices = slices.max(1);
    let slice = Shape {
        run_for: shape.run_for / slices,
        ..*shape
    };
    let mut pumped: Option<Pumped> = None;
    let mut raws = Vec::new();
    for _ in 0..slices {
        let p = pump(a, &slice, driver)?;
        match &mut pumped {
            Some(all) => all.absorb(p),
            None => pumped = Some(p),
        }
        raws.extend(raw(&slice)?);
    }
    let pumped = pumped.ok_or("a point of no slices")?;
    let raw_gbps = (!raws.is_empty()).then(|| raws.iter().sum::<f64>() / raws.len() as f64);
    Ok((pumped, raw_gbps))
}

/// `gbps / of`, 0 when `of` was not measured.
pub(crate) fn ratio(gbps: f64, of: f64) -> f64 {
    if of > 0.0 { gbps / of } else { 0.0 }
}

/// Median time of `add_remote_peer` for a peer of `blocks` blocks, in microseconds (both
/// transports in this process).
pub(crate) fn registration_us(
    backends: &dyn Backends,
    args: &Args,
    backend: &str,
    blocks: u32,
) -> Res<f64> {
    let open = || backends.open(backend, blocks, 64, args.options(backend)?, args.allocate);
    let (a, b) = (open()?, open()?);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens shm in this process; its raw baseline records when it was called and for how
    /// long, and answers 1, 2, 3, ... GB/s.
    struct Counting(std::sync::Mutex<Vec<(Instant, Duration)>>);

    impl Backends for Counting {
        fn open(
            &self,
            backend: &str,
            blocks: u32,
            block: usize,
            options: blockwire::TransportOptions,
            allocate: bool,
        ) -> Res<Box<dyn Transport>> {
            crate::TestShm.open(backend, blocks, block, options, allocate)
        }

        fn raw_gbps(&self, _backend: &str, shape: &Shape, _args: &Args) -> Res<Option<f64>> {
            let mut calls = self.0.lock().map_err(|_| "poisoned")?;
            calls.push((Instant::now(), shape.run_for));
            Ok(Some(calls.len() as f64))
        }
    }

    /// A point of 3 slices calls the raw baseline 3 times, once after each slice of
    /// transfers (so at least a slice apart, the first a slice after the start), each for a
    /// third of the point's time, and reports their mean.
    #[test]
    fn a_point_alternates_its_slices_with_the_raw_baseline() {
        let args = crate::test_args(&["--slices=3", "--duration=0.06", "--region-mib=2"]);
        let counting = Counting(std::sync::Mutex::new(Vec::new()));
        let mut set = WorkingSet::new(1 << 20).expect("working set");
        let mut ceilings = Ceilings::default();
        let began = Instant::now();
        let p = throughput(
            &counting,
            &args,
            "shm",
            Op::Write,
            4096,
            (&mut set, &mut ceilings),
        )
        .expect("measured");
        let calls = counting.0.into_inner().expect("not poisoned");
        let slice = Duration::from_millis(20);
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert!(
            calls.iter().all(|&(_, run_for)| run_for == slice),
            "{calls:?}"
        );
        let mut before = began;
        for &(at, _) in &calls {
            assert!(at.duration_since(before) >= slice, "{calls:?}");
            before = at;
        }
        assert_eq!(p.raw_gbps, Some(2.0));
        assert!(p.gbps > 0.0, "{p:?}");
        assert!(p.fill_submit_p50_us <= p.fill_submit_max_us, "{p:?}");
        assert!(p.fill_submit_p50_us.is_some(), "{p:?}");
        // The calling thread's CPU time: some for each transfer, at most its one core.
        let cpu = p.caller_cpu_us_per_transfer.expect("the caller's CPU time");
        let cores = p.caller_cores().expect("the caller's share of a core");
        assert!(cpu > 0.0 && cores > 0.0 && cores <= 1.05, "{p:?}");
    }

    /// Each slice's first `depth` submits (before its first poll) are the fill, kept apart
    /// from the steady submits; every submit is one or the other.
    #[test]
    fn each_slices_fill_is_kept_apart_from_the_steady_submits() {
        let open = |n: u32| crate::TestShm.open("shm", n, 4096, Default::default(), false);
        let (a, b) = (open(64).expect("open"), open(64).expect("open"));
        a.add_remote_peer(
            &crate::remote::PEER.into(),
            &b.descriptor().expect("descriptor"),
        )
        .expect("connect");
        let shape = Shape {
            op: Op::Write,
            blocks: 64,
            block: 4096,
            batch: 4,
            depth: 3,
            run_for: Duration::from_millis(60),
            layout: crate::Layout::Scattered,
        };
        let driver = Driver::of(&crate::test_args(&[]));
        let (pumped, _) = sliced(&*a, &shape, 3, driver, |_| Ok(None)).expect("pumped");
        assert_eq!(pumped.fills.len(), 3 * 3, "one fill of `depth` per slice");
        assert!(!pumped.submits.is_empty());
        assert_eq!(
            pumped.fills.len() + pumped.submits.len(),
            pumped.completes.len(),
            "every transfer submitted once and done"
        );
    }
}
