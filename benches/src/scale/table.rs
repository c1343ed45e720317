//! The scale mode's table and its `scale.json`.

use std::path::Path;

use super::Scale;
use crate::Res;

/// One row of the table: its label, its cell of each result, its goal.
type Row = (String, Box<dyn Fn(&Scale) -> String>, &'static str);

/// Prints one column per backend (and settings), one row per figure, with its goal.
pub(crate) fn print_table(results: &[Scale]) {
    let Some(first) = results.first() else {
        return;
    };
    println!(
        "scale: one transport, {} peers (each its own transport in this process) of {} blocks \
         x {} B; resident memory counts both sides",
        first.peers, first.blocks_per_peer, first.block_bytes
    );
    let heads: Vec<String> = results.iter().map(head).collect();
    let width = heads.iter().map(String::len).max().unwrap_or(0).max(10);
    print!("{:<34}", "");
    for h in &heads {
        print!(" {h:>width$}");
    }
    println!("  goal");
    let mib = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |m| format!("{m:.0} MiB"));
    let grew = |from: Option<f64>, to: Option<f64>| match (from, to) {
        (Some(a), Some(b)) => format!("{:+.0} MiB", b - a),
        _ => "-".to_owned(),
    };
    let rows: Vec<Row> = vec![
        (
            "add_remote_peer median".into(),
            Box::new(|s| format!("{:.0} us", s.add_peer_median_us)),
            "< 1 ms (nixl < 4 ms)",
        ),
        (
            "add_remote_peer max".into(),
            Box::new(|s| format!("{:.0} us", s.add_peer_max_us)),
            "",
        ),
        (
            "VmRSS before the peers".into(),
            Box::new(move |s| mib(s.rss_before_peers_mib)),
            "",
        ),
        (
            "  after adding them".into(),
            Box::new(move |s| grew(s.rss_before_peers_mib, s.rss_after_peers_mib)),
            "",
        ),
        (
            "  after first traffic to each".into(),
            Box::new(move |s| grew(s.rss_before_peers_mib, s.rss_after_traffic_mib)),
            "",
        ),
        (
            "poll(peer), none tracked".into(),
            Box::new(|s| format!("{:.0} ns", s.poll_idle_ns)),
            "",
        ),
        (
            format!("  {} tracked for others", first.tracked),
            Box::new(|s| format!("{:.0} ns", s.poll_loaded_ns)),
            "",
        ),
        (
            "  none again (after the drain)".into(),
            Box::new(|s| format!("{:.0} ns", s.poll_idle_again_ns)),
            "",
        ),
        (
            "  ratio (tracked / none)".into(),
            Box::new(|s| format!("{:.2}", s.poll_ratio)),
            "<= 1.5",
        ),
        (
            format!("{}-block WRITE submit avg", first.big_blocks),
            Box::new(|s| format!("{:.0} us", s.big_submit_avg_us)),
            "",
        ),
        (
            "  submit p99".into(),
            Box::new(|s| format!("{:.0} us", s.big_submit_p99_us)),
            "",
        ),
        (
            "  complete avg".into(),
            Box::new(|s| format!("{:.0} us", s.big_complete_avg_us)),
            "",
        ),
        (
            "  complete p99".into(),
            Box::new(|s| format!("{:.0} us", s.big_complete_p99_us)),
            "",
        ),
        (
            format!(
                "VmRSS over {} WRITEs{}",
                first.churn_transfers,
                if first.churn_reduced {
                    " (reduced)"
                } else {
                    ""
                }
            ),
            Box::new(move |s| grew(s.rss_before_churn_mib, s.rss_after_churn_mib)),
            "flat",
        ),
        (
            "  WRITEs per second".into(),
            Box::new(|s| format!("{:.0}", s.churn_per_sec)),
            "",
        ),
    ];
    for (label, cell, goal) in rows {
        print!("{label:<34}");
        for s in results {
            print!(" {:>width$}", cell(s));
        }
        println!("  {goal}");
    }
    println!();
}

/// A column's head: the backend and its `--opt` settings.
fn head(s: &Scale) -> String {
    if s.options.is_empty() {
        s.backend.clone()
    } else {
        format!("{} {}", s.backend, s.options.join(","))
    }
}

/// Writes `scale.json` into the run's folder `dir` (nothing when there are no results).
pub(crate) fn write(results: &[Scale], dir: &Path) -> Res<()> {
    if results.is_empty() {
        return Ok(());
    }
    let path = dir.join("scale.json");
    std::fs::write(&path, serde_json::to_string_pretty(results)?)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(())
}
