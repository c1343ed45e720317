//! The overhead of telemetry: one throughput point (`--batch` blocks of `--telemetry-kib`
//! KiB, `--depth` in flight) measured by two initiators to the same remote transport, one
//! with telemetry off and one with it on, alternated for `--telemetry-rounds` rounds (off
//! then on, then on then off, ...) so that both see the same machine load; the best of each
//! is kept. Both are timed by the bench's own clocks (telemetry off has none).

use std::time::Duration;

use blockwire::Op;
use serde::{Deserialize, Serialize};

use crate::measure::{Driver, Summary, pump, shape};
use crate::remote::{Remote, initiator};
use crate::{Args, Backends, Res};

/// Telemetry off against on at one throughput point of one backend and operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TelemetryCost {
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
    /// Measurements of each setting.
    pub rounds: usize,
    /// Seconds of each measurement.
    pub round_secs: f64,
    /// Best GB/s with telemetry off.
    pub off_gbps: f64,
    /// Best GB/s with telemetry on.
    pub on_gbps: f64,
    /// `on_gbps / off_gbps`.
    pub gbps_ratio: f64,
    /// Lowest average time in the submit call, telemetry off, µs.
    pub off_submit_avg_us: f64,
    /// Lowest average time in the submit call, telemetry on, µs.
    pub on_submit_avg_us: f64,
    /// `on_submit_avg_us / off_submit_avg_us`.
    pub submit_ratio: f64,
    /// Lowest median time in the submit call, telemetry off, µs.
    pub off_submit_p50_us: f64,
    /// Lowest median time in the submit call, telemetry on, µs.
    pub on_submit_p50_us: f64,
    /// `on_submit_p50_us / off_submit_p50_us` (the steadiest on a loaded machine).
    pub submit_p50_ratio: f64,
    /// Lowest average time from submit to reported done, telemetry off, µs.
    pub off_complete_avg_us: f64,
    /// Lowest average time from submit to reported done, telemetry on, µs.
    pub on_complete_avg_us: f64,
}

/// The best of one setting's rounds.
struct Best {
    gbps: f64,
    submit_us: f64,
    submit_p50_us: f64,
    complete_us: f64,
}

/// Measures the point `--telemetry-rounds` times with telemetry off and as many with it on.
pub(crate) fn cost(
    backends: &dyn Backends,
    args: &Args,
    backend: &str,
    op: Op,
) -> Res<TelemetryCost> {
    let rounds = args.telemetry_rounds.unwrap_or(0).max(1);
    let secs = args.telemetry_duration.unwrap_or(args.duration);
    let shape = shape(
        args,
        op,
        args.telemetry_kib << 10,
        Duration::from_secs_f64(secs),
    )?;
    let remote = Remote::open(backends, args, backend, shape.blocks, shape.block)?;
    let size = (shape.blocks, shape.block);
    let off = initiator(
        backends,
        args,
        backend,
        size,
        args.options(backend)?,
        &remote,
    )?;
    let on_options = args.options(backend)?.with_telemetry(true);
    let on = initiator(backends, args, backend, size, on_options, &remote)?;
    let mut best = [(); 2].map(|()| Best {
        gbps: 0.0,
        submit_us: f64::MAX,
        submit_p50_us: f64::MAX,
        complete_us: f64::MAX,
    });
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let a = if k == 0 { &*off } else { &*on };
            let p = pump(a, &shape, Driver::of(args))?;
            let b = &mut best[k];
            b.gbps = b.gbps.max(p.gbps());
            let submit = Summary::of(p.submits);
            b.submit_us = b.submit_us.min(submit.avg);
            b.submit_p50_us = b.submit_p50_us.min(submit.p50);
            b.complete_us = b.complete_us.min(Summary::of(p.completes).avg);
        }
    }
    on.close()?;
    off.close()?;
    drop((on, off, remote));
    let [off, on] = best;
    Ok(TelemetryCost {
        backend: backend.to_owned(),
        op: op.to_string(),
        cross_process: args.cross_process,
        block_bytes: shape.block,
        batch: shape.batch,
        depth: shape.depth,
        rounds,
        round_secs: secs,
        off_gbps: off.gbps,
        on_gbps: on.gbps,
        gbps_ratio: on.gbps / off.gbps,
        off_submit_avg_us: off.submit_us,
        on_submit_avg_us: on.submit_us,
        submit_ratio: on.submit_us / off.submit_us,
        off_submit_p50_us: off.submit_p50_us,
        on_submit_p50_us: on.submit_p50_us,
        submit_p50_ratio: on.submit_p50_us / off.submit_p50_us,
        off_complete_avg_us: off.complete_us,
        on_complete_avg_us: on.complete_us,
    })
}

/// Prints the telemetry-overhead table.
pub(crate) fn print_table(rows: &[TelemetryCost]) {
    if rows.is_empty() {
        return;
    }
    println!(
        "telemetry overhead: the same point with telemetry off and on, alternated, best of \
         each; submit: average (and median) time in the submit call, µs"
    );
    println!(
        "{:>10} {:>5} {:>4} {:>5} {:>5} {:>5} {:>6} {:>8} {:>8} {:>6} {:>10} {:>10} {:>6} {:>6}",
        "backend",
        "op",
        "peer",
        "block",
        "batch",
        "depth",
        "rounds",
        "GB/s off",
        "GB/s on",
        "on/off",
        "submit off",
        "submit on",
        "on/off",
        "p50 /"
    );
    for r in rows {
        println!(
            "{:>10} {:>5} {:>4} {:>4}K {:>5} {:>5} {:>6} {:>8.2} {:>8.2} {:>6.3} {:>10.2} \
             {:>10.2} {:>6.3} {:>6.3}",
            r.backend,
            r.op,
            if r.cross_process { "proc" } else { "here" },
            r.block_bytes >> 10,
            r.batch,
            r.depth,
            r.rounds,
            r.off_gbps,
            r.on_gbps,
            r.gbps_ratio,
            r.off_submit_avg_us,
            r.on_submit_avg_us,
            r.submit_ratio,
            r.submit_p50_ratio
        );
    }
    println!();
}

#[cfg(test)]
mod tests {
    use blockwire::Op;

    use super::cost;
    use crate::{TestShm, test_args};

    #[test]
    fn measures_telemetry_off_and_on() {
        let args = test_args(&[
            "--telemetry-rounds=2",
            "--telemetry-duration=0.02",
            "--region-mib=2",
        ]);
        let c = cost(&TestShm, &args, "shm", Op::Write).expect("measured");
        assert_eq!((c.rounds, c.depth, c.batch), (2, 4, 16));
        assert!(c.off_gbps > 0.0 && c.on_gbps > 0.0, "{c:?}");
        assert!(
            c.gbps_ratio.is_finite() && c.submit_ratio.is_finite(),
            "{c:?}"
        );
    }
}
