//! Reporting: the tables, `results.json`, and `throughput.svg`.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::Res;
use crate::ceiling::Ceilings;
use crate::measure::{Point, Registration, ratio};
use crate::notify::{self, NotifyCost};
use crate::overhead::{self, TelemetryCost};

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

/// The tables' keys: backend, operation and whether the peer was in another process, in the
/// order first measured.
fn series(run: &Run) -> Vec<(String, String, bool)> {
    let mut keys = Vec::new();
    for p in &run.points {
        let k = (p.backend.clone(), p.op.clone(), p.cross_process);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// GB/s by thread count (index 0: one thread), as `1 thread a, 2 threads b`.
fn per_thread(gbps: &[f64]) -> String {
    let each: Vec<String> = gbps
        .iter()
        .enumerate()
        .map(|(i, g)| format!("{} thread{} {g:.2}", i + 1, if i == 0 { "" } else { "s" }))
        .collect();
    each.join(", ")
}

/// Prints the ceilings of the run.
fn print_ceilings(run: &Run) {
    let c = &run.ceilings;
    let by_conns: Vec<String> = c
        .tcp_by_connections
        .iter()
        .map(|(n, g)| format!("{n} connection{} {g:.2}", if *n == 1 { "" } else { "s" }))
        .collect();
    let (lo, hi) = run
        .points
        .iter()
        .filter(|p| !p.peer)
        .fold((f64::MAX, 0f64), |(lo, hi), p| {
            (lo.min(p.memcpy_1thr_gbps), hi.max(p.memcpy_1thr_gbps))
        });
    println!(
        "ceilings, measured before and after the sweep and probed before each point, the best \
         kept (/ceil: the one that bounds the setting):"
    );
    println!(
        "  mem  {:>6.2} GB/s: memcpy or streaming copy over {} MiB, best of 1 to {} threads ({}) and of /1thr",
        c.mem_gbps,
        run.region_mib,
        c.mem_by_threads.len(),
        per_thread(&c.mem_by_threads)
    );
    if c.mem_shared_gbps > 0.0 {
        println!(
            "       {:>6.2} GB/s between two shared-memory mappings ({}): not a ceiling, what \
             a copy into a peer's shared region reaches here at best",
            c.mem_shared_gbps,
            per_thread(&c.mem_shared_by_threads)
        );
    }
    let congestion = c
        .tcp_congestion_control
        .as_deref()
        .map(|cc| format!(" (congestion control {cc})"))
        .unwrap_or_default();
    println!(
        "  tcp  {:>6.2} GB/s: one loopback TCP stream per connection, best of {}{congestion}",
        c.tcp_gbps,
        by_conns.join(", ")
    );
    println!(
        "  /1thr: single-thread memcpy over {} MiB, measured before each point: median {:.2} \
         GB/s, {:.2} to {:.2}\n",
        run.region_mib,
        run.memcpy_gbps,
        lo.min(hi),
        hi
    );
}

/// The Mooncake peer's point at the same operation, block size and process placement as `p`.
fn mooncake_of<'a>(run: &'a Run, p: &Point) -> Option<&'a Point> {
    run.points.iter().find(|q| {
        q.peer
            && q.backend == crate::peers::MOONCAKE.label
            && q.op == p.op
            && q.block_bytes == p.block_bytes
            && q.cross_process == p.cross_process
    })
}

/// Prints one table per backend, operation and placement (the peers' too), then the
/// notification cost, the telemetry overhead and the registration tables.
pub(crate) fn print_tables(run: &Run) {
    if !run.points.is_empty() {
        print_ceilings(run);
        println!(
            "blocks per transfer: {} (--layout)",
            match run.layout {
                crate::Layout::Scattered => "scattered, none adjacent",
                crate::Layout::Contiguous => "one contiguous run",
            }
        );
        if run.slices > 1 {
            println!(
                "each shm point: {} slices of its transfers, each followed by one of the raw \
                 copy (/raw: the two over the same moments; --slices)",
                run.slices
            );
        }
        match run.rounds {
            0 | 1 => println!(),
            n => println!("each point: the round with the median GB/s of {n} (--rounds)\n"),
        }
    }
    let fmt = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"));
    let us = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| format!("{t:.1}us"));
    for (backend, op, xp) in series(run) {
        println!(
            "{backend} {op}{}",
            if xp { " (peer in another process)" } else { "" }
        );
        println!(
            "{:>9} {:>6} {:>6} {:>8} {:>6} {:>5} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "block",
            "batch",
            "depth",
            "GB/s",
            "/ceil",
            "ceil",
            "/1thr",
            "/raw",
            "/mooncake",
            "submit",
            "sub p99",
            "core p99",
            "wake p99",
            "complete",
            "cmp p99"
        );
        for p in run
            .points
            .iter()
            .filter(|p| p.backend == backend && p.op == op && p.cross_process == xp)
        {
            let raw = p.raw_gbps.map(|r| p.gbps / r);
            let peer = mooncake_of(run, p)
                .filter(|q| !p.peer && q.gbps > 0.0)
                .map(|q| p.gbps / q.gbps);
            println!(
                "{:>8}K {:>6} {:>6} {:>8.2} {:>6.2} {:>5} {:>6.2} {:>6} {:>9} {:>7.1}us {:>7.1}us \
                 {:>9} {:>9} {:>8.1}us {:>8.1}us",
                p.block_bytes >> 10,
                p.batch,
                p.depth,
                p.gbps,
                p.ratio_to_ceiling,
                p.ceiling.as_str(),
                p.ratio_to_memcpy,
                fmt(raw),
                fmt(peer),
                p.submit_avg_us,
                p.submit_p99_us,
                us(p.submit_p99_on_core_us),
                us(p.wake_p99_us),
                p.complete_avg_us,
                p.complete_p99_us
            );
        }
        println!();
    }
    notify::print_table(&run.notify);
    overhead::print_table(&run.telemetry);
    if !run.registration.is_empty() {
        println!("add_remote_peer (median of 5)");
        println!("{:>10} {:>12} {:>12}", "backend", "blocks", "time");
        for r in &run.registration {
            println!("{:>10} {:>12} {:>10.1}us", r.backend, r.blocks, r.median_us);
        }
    }
    for s in &run.skipped {
        println!("\nskipped: {s}");
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
    plot(run, &dir.join("throughput.svg"))?;
    Ok(dir)
}

fn plot(run: &Run, path: &Path) -> Res<()> {
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let sizes: Vec<f64> = run
        .points
        .iter()
        .map(|p| (p.block_bytes as f64 / 1024.0).log2())
        .collect();
    let (xmin, xmax) = sizes
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (xmin, xmax) = if xmin > xmax {
        (0.0, 1.0)
    } else {
        (xmin - 0.5, xmax + 0.5)
    };
    let c = &run.ceilings;
    let ymax = run
        .points
        .iter()
        .map(|p| p.gbps)
        .fold(run.memcpy_gbps.max(c.mem_gbps), f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("blockwire: GB/s by block size", ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(xmin..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("block size (KiB, log2)")
        .y_desc("GB/s")
        .x_label_formatter(&|x| format!("{}", 2f64.powf(*x).round()))
        .draw()?;
    // The ceilings: horizontal lines, each labelled at its left end.
    let lines = [
        (
            c.mem_gbps,
            format!(
                "memory ceiling ({} threads) {:.1} GB/s",
                c.mem_threads, c.mem_gbps
            ),
            BLACK,
        ),
        (
            c.tcp_gbps,
            format!(
                "TCP ceiling ({} conn.{}) {:.1} GB/s",
                c.tcp_connections,
                c.tcp_congestion_control
                    .as_deref()
                    .map(|cc| format!(", {cc}"))
                    .unwrap_or_default(),
                c.tcp_gbps
            ),
            RGBColor(0, 90, 160),
        ),
        (
            run.memcpy_gbps,
            format!("single-thread memcpy {:.1} GB/s", run.memcpy_gbps),
            RGBColor(140, 140, 140),
        ),
    ];
    for (gbps, label, color) in lines.into_iter().filter(|l| l.0 > 0.0) {
        chart
            .draw_series(LineSeries::new(
                [(xmin, gbps), (xmax, gbps)],
                color.stroke_width(2),
            ))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        chart.draw_series(std::iter::once(Text::new(
            label,
            (xmin + 0.05, gbps + ymax * 0.01),
            ("sans-serif", 13).into_font().color(&color),
        )))?;
    }
    // blockwire's series solid; the peers' dashed, with circles at their points.
    for (i, (backend, op, xp)) in series(run).iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<&Point> = run
            .points
            .iter()
            .filter(|p| &p.backend == backend && &p.op == op && p.cross_process == *xp)
            .collect();
        let xy: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| ((p.block_bytes as f64 / 1024.0).log2(), p.gbps))
            .collect();
        let label = format!("{backend} {op}{}", if *xp { " (2 processes)" } else { "" });
        if pts.first().is_some_and(|p| p.peer) {
            chart
                .draw_series(DashedLineSeries::new(
                    xy.clone(),
                    8,
                    5,
                    color.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 6, y)], color));
            chart.draw_series(
                xy.into_iter()
                    .map(|p| Circle::new(p, 4, color.stroke_width(2))),
            )?;
        } else {
            chart
                .draw_series(LineSeries::new(xy, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
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
            wake_p99_us: None,
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
