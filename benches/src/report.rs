//! Reporting: the tables, `results.json`, and `throughput.svg`.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::Res;
use crate::measure::{Point, Registration};
use crate::notify::{self, NotifyCost};
use crate::overhead::{self, TelemetryCost};

/// Everything one run measured.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Run {
    /// Median of the memory ceilings measured before each point, GB/s.
    pub memcpy_gbps: f64,
    /// Bytes of each region, MiB.
    pub region_mib: usize,
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
}

impl Run {
    pub(crate) fn new(region_mib: usize) -> Self {
        Run {
            region_mib,
            ..Default::default()
        }
    }

    /// Adds what another binary measured.
    pub(crate) fn merge(&mut self, other: Run) {
        self.points.extend(other.points);
        self.registration.extend(other.registration);
        self.notify.extend(other.notify);
        self.telemetry.extend(other.telemetry);
        self.skipped.extend(other.skipped);
    }

    /// Sets the headline ceiling: the median of the per-point ceilings.
    pub(crate) fn settle(&mut self) {
        let mut c: Vec<f64> = self.points.iter().map(|p| p.ceiling_gbps).collect();
        c.sort_by(f64::total_cmp);
        self.memcpy_gbps = c.get(c.len() / 2).copied().unwrap_or(0.0);
    }
}

/// Prints one table per backend and operation, then the notification cost, the telemetry
/// overhead and the registration tables.
pub(crate) fn print_tables(run: &Run) {
    let (lo, hi) = run.points.iter().fold((f64::MAX, 0f64), |(lo, hi), p| {
        (lo.min(p.ceiling_gbps), hi.max(p.ceiling_gbps))
    });
    if !run.points.is_empty() {
        println!(
            "memory ceiling (single-thread memcpy over {} MiB, measured before each point): \
             median {:.2} GB/s, {:.2} to {:.2}\n",
            run.region_mib,
            run.memcpy_gbps,
            lo.min(hi),
            hi
        );
    }
    let mut keys: Vec<(String, String)> = run
        .points
        .iter()
        .map(|p| (p.backend.clone(), p.op.clone()))
        .collect();
    keys.dedup();
    for (backend, op) in keys {
        let xp = run
            .points
            .iter()
            .any(|p| p.backend == backend && p.op == op && p.cross_process);
        println!(
            "{backend} {op}{}",
            if xp { " (peer in another process)" } else { "" }
        );
        println!(
            "{:>9} {:>6} {:>6} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10}",
            "block",
            "batch",
            "depth",
            "GB/s",
            "/memcpy",
            "/raw",
            "submit",
            "sub p99",
            "complete",
            "cmp p99"
        );
        for p in run
            .points
            .iter()
            .filter(|p| p.backend == backend && p.op == op)
        {
            let raw = p
                .raw_gbps
                .map_or_else(|| "-".to_owned(), |r| format!("{:.2}", p.gbps / r));
            println!(
                "{:>8}K {:>6} {:>6} {:>8.2} {:>8.2} {:>8} {:>7.1}us {:>7.1}us {:>8.1}us {:>8.1}us",
                p.block_bytes >> 10,
                p.batch,
                p.depth,
                p.gbps,
                p.ratio_to_memcpy,
                raw,
                p.submit_avg_us,
                p.submit_p99_us,
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
    let ymax = run
        .points
        .iter()
        .map(|p| p.gbps)
        .fold(run.memcpy_gbps, f64::max)
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
    chart
        .draw_series(LineSeries::new(
            [(xmin, run.memcpy_gbps), (xmax, run.memcpy_gbps)],
            BLACK.stroke_width(2),
        ))?
        .label("memcpy ceiling")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
    let mut keys: Vec<(String, String)> = run
        .points
        .iter()
        .map(|p| (p.backend.clone(), p.op.clone()))
        .collect();
    keys.dedup();
    for (i, (backend, op)) in keys.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series: Vec<(f64, f64)> = run
            .points
            .iter()
            .filter(|p| &p.backend == backend && &p.op == op)
            .map(|p| ((p.block_bytes as f64 / 1024.0).log2(), p.gbps))
            .collect();
        chart
            .draw_series(LineSeries::new(series, color.stroke_width(2)))?
            .label(format!("{backend} {op}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
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

    #[test]
    fn a_run_without_the_cost_tables_still_reads() {
        let old =
            r#"{"memcpy_gbps":1.0,"region_mib":64,"points":[],"registration":[],"skipped":[]}"#;
        let run: Run = serde_json::from_str(old).expect("an older run's JSON");
        assert!(run.notify.is_empty() && run.telemetry.is_empty());
    }
}
