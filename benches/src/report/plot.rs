//! `throughput.svg`: GB/s by block size per backend and operation, the ceilings as lines.

use std::path::Path;

use plotters::prelude::*;

use super::Run;
use super::tables::series;
use crate::Res;
use crate::measure::Point;

pub(super) fn plot(run: &Run, path: &Path) -> Res<()> {
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
