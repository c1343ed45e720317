//! Reporting: the tables, `results.json`, and `throughput.svg`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Res;
use crate::ceiling::Ceilings;
use crate::measure::{Point, Registration, ratio};
use crate::notify::NotifyCost;
use crate::overhead::TelemetryCost;

mod plot;
mod tables;

pub(crate) use tables::print_tables;

/// Everything one run measured.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Run {
    /// Median of the single-thread `memcpy` measured before each point, GB/s.
    pub memcpy_gbps: f64,
    /// The memory and TCP ceilings, measured once at the start of the run.
    #[serde(default)]
    pub ceilings: Ceilings,
    /// Bytes of each region, MiB.
    pub region_mib: usize,
    /// Which blocks each transfer named (`--layout`).
    #[serde(default)]
    pub layout: crate::Layout,
    /// Throughput points, in the order measured.
    pub points: Vec<Point>,
    /// `add_remote_peer` times.
    pub registration: Vec<Registration>,
    /// The cost of a notification, per backend and operation.
    #[serde(default)]
    pub notify: Vec<NotifyCost>,
    /// The overhead of telemetry, per backend and operation.
    #[serde(default)]
    pub telemetry: Vec<TelemetryCost>,
    /// Backends left out, with the reason.
    pub skipped: Vec<String>,
    /// Rounds of the sweep (`--rounds`): each point is the round with the median GB/s.
    #[serde(default = "one")]
    pub rounds: u32,
    /// Slices of each shm point (`--slices`), each followed by a slice of the raw copy.
    #[serde(default = "one")]
    pub slices: u32,
}

/// What a run recorded before `rounds` and `slices` were: one of each.
fn one() -> u32 {
    1
}

impl Run {
    pub(crate) fn new(region_mib: usize, layout: crate::Layout, rounds: u32, slices: u32) -> Self {
        Run {
            region_mib,
            layout,
            rounds,
            slices,
            ..Default::default()
        }
    }

    /// Adds what another binary measured.
    pub(crate) fn merge(&mut self, other: Run) {
        self.points.extend(other.points);
        self.registration.extend(other.registration);
        self.notify.extend(other.notify);
        self.ceilings.keep_best(&other.ceilings);
        self.telemetry.extend(other.telemetry);
        // Another binary that runs once a round gives the same reasons each time.
        for why in other.skipped {
            self.skip_once(why);
        }
    }

    /// Records why a measurement was left out, unless that reason is already on record (each
    /// round of `--rounds` gives the same ones again); whether it was new.
    pub(crate) fn skip_once(&mut self, why: String) -> bool {
        let new = !self.skipped.contains(&why);
        if new {
            self.skipped.push(why);
        }
        new
    }

    /// Keeps, of the points measured in several rounds (same backend, operation, placement
    /// and block size), the one with the median GB/s (the lower middle of an even count), in
    /// the place the first was measured, with every round's GB/s in `round_gbps` (a point
    /// that already has them, settled in another binary, brings its own).
    pub(crate) fn keep_median_points(&mut self) {
        let key = |p: &Point| {
            (
                p.backend.clone(),
                p.op.clone(),
                p.cross_process,
                p.block_bytes,
                p.peer,
            )
        };
        let mut rounds: Vec<(_, Vec<Point>)> = Vec::new();
        for p in self.points.drain(..) {
            let k = key(&p);
            match rounds.iter_mut().find(|(q, _)| *q == k) {
                Some((_, same)) => same.push(p),
                None => rounds.push((k, vec![p])),
            }
        }
        self.points = rounds
            .into_iter()
            .filter_map(|(_, mut same)| {
                let every: Vec<f64> = same
                    .iter()
                    .flat_map(|p| match p.round_gbps.as_slice() {
                        [] => vec![p.gbps],
                        rounds => rounds.to_vec(),
                    })
                    .collect();
                same.sort_by(|a, b| a.gbps.total_cmp(&b.gbps));
                let mid = (same.len() - 1) / 2;
                let mut kept = same.into_iter().nth(mid)?;
                kept.round_gbps = every;
                Some(kept)
            })
            .collect();
    }

    /// Sets the headline single-thread figure (the median of the per-point ones), raises the
    /// memory ceiling to the best single-thread figure of the run if that was higher (the
    /// machine did reach it), and gives each point the run's value of its ceiling.
    pub(crate) fn settle(&mut self) {
        let mut c: Vec<f64> = self
            .points
            .iter()
            .filter(|p| !p.peer)
            .map(|p| p.memcpy_1thr_gbps)
            .collect();
        c.sort_by(f64::total_cmp);
        self.memcpy_gbps = c.get(c.len() / 2).copied().unwrap_or(0.0);
        if let Some(&top) = c.last() {
            if top > self.ceilings.mem_gbps {
                self.ceilings.mem_gbps = top;
                self.ceilings.mem_threads = 1;
            }
        }
        for p in &mut self.points {
            p.ceiling_gbps = self.ceilings.of(p.ceiling);
            p.ratio_to_ceiling = ratio(p.gbps, p.ceiling_gbps);
        }
    }
}

/// Writes `results.json` and `throughput.svg` into a new folder under `results/`.
pub(crate) fn write(run: &Run, root: &Path) -> Res<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dir = root.join(format!("run-{stamp}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(run)?)?;
    plot::plot(run, &dir.join("throughput.svg"))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::Run;
    use crate::{CeilingKind, Ceilings, Point};

    fn point(backend: &str, ceiling: CeilingKind, gbps: f64, one_thread: f64, peer: bool) -> Point {
        Point {
            backend: backend.into(),
            op: "WRITE".into(),
            cross_process: false,
            block_bytes: 65536,
            batch: 16,
            depth: 4,
            gbps,
            round_gbps: Vec::new(),
            ceiling,
            ceiling_gbps: 0.0,
            ratio_to_ceiling: 0.0,
            memcpy_1thr_gbps: one_thread,
            ratio_to_memcpy: gbps / one_thread,
            peer,
            raw_gbps: None,
            submit_avg_us: 0.0,
            submit_p99_us: 0.0,
            submit_preempted: None,
            submit_p99_on_core_us: None,
            spin_p99_us: None,
            wake_p99_us: None,
            fill_submit_p50_us: None,
            fill_submit_max_us: None,
            poll_p999_us: None,
            caller_cpu_us_per_transfer: None,
            complete_avg_us: 0.0,
            complete_p99_us: 0.0,
        }
    }

    #[test]
    fn of_several_rounds_each_point_keeps_its_median_in_first_place_and_every_round() {
        let mut run = Run::new(64, crate::Layout::Scattered, 3, 1);
        let shm = |gbps| point("shm", CeilingKind::Mem, gbps, 9.0, false);
        let peer = |gbps| point("mooncake (peer)", CeilingKind::Tcp, gbps, 9.0, true);
        let mut read = shm(7.0);
        read.op = "READ".into();
        let mut big = shm(8.0);
        big.block_bytes = 1 << 20;
        // Settled in another binary (nixl's): its rounds come with it.
        let mut elsewhere = point("nixl", CeilingKind::Mem, 6.0, 9.0, false);
        elsewhere.round_gbps = vec![9.0, 6.0, 4.0];
        run.points = vec![
            shm(1.0),
            read,
            big,
            elsewhere,
            shm(5.0),
            peer(2.0),
            shm(3.0),
            peer(4.0),
        ];
        run.keep_median_points();
        let kept: Vec<(&str, &str, usize, f64, &[f64])> = run
            .points
            .iter()
            .map(|p| {
                let rounds = p.round_gbps.as_slice();
                (
                    p.backend.as_str(),
                    p.op.as_str(),
                    p.block_bytes,
                    p.gbps,
                    rounds,
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                ("shm", "WRITE", 65536, 3.0, &[1.0, 5.0, 3.0][..]),
                ("shm", "READ", 65536, 7.0, &[7.0][..]),
                ("shm", "WRITE", 1 << 20, 8.0, &[8.0][..]),
                ("nixl", "WRITE", 65536, 6.0, &[9.0, 6.0, 4.0][..]),
                // Of an even count, the lower middle.
                ("mooncake (peer)", "WRITE", 65536, 2.0, &[2.0, 4.0][..]),
            ]
        );
    }

    #[test]
    fn settling_gives_each_point_its_ceiling() {
        let mut run = Run::new(64, crate::Layout::Scattered, 1, 1);
        run.ceilings = Ceilings {
            mem_gbps: 20.0,
            mem_threads: 2,
            mem_by_threads: vec![10.0, 20.0],
            tcp_gbps: 4.0,
            tcp_connections: 1,
            tcp_by_connections: vec![(1, 4.0)],
            ..Default::default()
        };
        run.points = vec![
            point("shm", CeilingKind::Mem, 10.0, 9.0, false),
            point("libfabric", CeilingKind::Tcp, 2.0, 11.0, false),
            point("mooncake (peer)", CeilingKind::Tcp, 1.0, 30.0, true),
        ];
        run.settle();
        let r: Vec<(f64, f64)> = run
            .points
            .iter()
            .map(|p| (p.ceiling_gbps, p.ratio_to_ceiling))
            .collect();
        assert_eq!(r, [(20.0, 0.5), (4.0, 0.5), (4.0, 0.25)]);
        // The single-thread headline leaves the peer's figure out.
        assert_eq!(run.memcpy_gbps, 11.0);
        // A single thread faster than the ceiling raises it.
        run.points[0].memcpy_1thr_gbps = 25.0;
        run.settle();
        assert_eq!(run.ceilings.mem_gbps, 25.0);
        assert_eq!(run.points[0].ratio_to_ceiling, 0.4);
    }

    #[test]
    fn a_run_without_the_cost_tables_still_reads() {
        let old =
            r#"{"memcpy_gbps":1.0,"region_mib":64,"points":[],"registration":[],"skipped":[]}"#;
        let run: Run = serde_json::from_str(old).expect("an older run's JSON");
        assert!(run.notify.is_empty() && run.telemetry.is_empty());
    }
}
