//! Mooncake's transfer engine as a peer: the engine many users would pick instead, measured
//! at the bench's geometry by `benches/peers/mooncake_driver.py` (embedded in the binary)
//! with the python of a virtual environment that has `mooncake-transfer-engine-non-cuda`
//! (`scripts/setup-python.sh` installs it into `target/python-venv`). Its rows join the
//! table, JSON and plot as backend [`BACKEND`], with `peer: true`, against the TCP ceiling.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::ceiling::CeilingKind;
use crate::measure::{Point, ratio};
use crate::report::Run;
use crate::{Args, Res};

/// The peer's name in the tables and JSON.
pub const BACKEND: &str = "mooncake (peer)";

/// The driver, written to a temporary file for each run.
const DRIVER: &str = include_str!("../peers/mooncake_driver.py");

/// Seconds the driver gets in all under `--quick` (it skips what does not fit, and says so).
const QUICK_DEADLINE_S: f64 = 20.0;

/// Lines of the driver's standard error kept for a failure's message (Mooncake logs there).
const STDERR_TAIL: usize = 8;

/// One line the driver prints.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Line {
    Point(Row),
    Skipped(String),
}

/// One measurement of the driver: the fields of [`Point`] it knows.
#[derive(Deserialize)]
struct Row {
    op: String,
    cross_process: bool,
    block_bytes: usize,
    batch: u32,
    depth: usize,
    gbps: f64,
    submit_avg_us: f64,
    submit_p99_us: f64,
    complete_avg_us: f64,
    complete_p99_us: f64,
}

/// The python the driver runs with: `--peer-python`, else this workspace's
/// `target/python-venv/bin/python`.
fn python(args: &Args) -> PathBuf {
    args.peer_python.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/python-venv/bin/python")
    })
}

/// Runs the Mooncake peer when `--peers` has it: its points go into `run` (against the TCP
/// ceiling, which `Run::settle` fills in, and `memcpy_1thr_gbps`, a single-thread `memcpy`
/// measured just before), or
/// the reason it did not run into `run.skipped` (and printed): a missing python or mooncake,
/// the deadline, a driver that failed (with the end of its standard error).
pub(crate) fn run(args: &Args, memcpy_1thr_gbps: f64, run: &mut Run) {
    if !args.peers.iter().any(|p| p == "mooncake") {
        return;
    }
    match points(args) {
        Ok((rows, skipped)) => {
            run.points.extend(rows.into_iter().map(|r| Point {
                backend: BACKEND.to_owned(),
                op: r.op,
                cross_process: r.cross_process,
                block_bytes: r.block_bytes,
                batch: r.batch,
                depth: r.depth,
                gbps: r.gbps,
                ceiling: CeilingKind::Tcp,
                ceiling_gbps: 0.0,
                ratio_to_ceiling: 0.0,
                memcpy_1thr_gbps,
                ratio_to_memcpy: ratio(r.gbps, memcpy_1thr_gbps),
                peer: true,
                raw_gbps: None,
                submit_avg_us: r.submit_avg_us,
                submit_p99_us: r.submit_p99_us,
                submit_preempted: None,
                submit_p99_on_core_us: None,
                complete_avg_us: r.complete_avg_us,
                complete_p99_us: r.complete_p99_us,
            }));
            for s in skipped {
                println!("{BACKEND}: skipped: {s}");
                run.skipped.push(format!("{BACKEND}: {s}"));
            }
        }
        Err(e) => {
            println!("{BACKEND}: skipped: {e}");
            run.skipped.push(format!("{BACKEND}: {e}"));
        }
    }
}

/// Runs the driver: its rows and what it skipped, or why it could not run.
fn points(args: &Args) -> Res<(Vec<Row>, Vec<String>)> {
    let python = python(args);
    // A bare name (`python3`) is looked up in PATH when it starts; a path must be there.
    if python.components().count() > 1 && !python.exists() {
        return Err(format!(
            "no python at {} (scripts/setup-python.sh makes target/python-venv with \
             mooncake-transfer-engine-non-cuda; or pass --peer-python)",
            python.display()
        )
        .into());
    }
    let dir = std::env::temp_dir().join(format!("blockwire-bench-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let driver = dir.join("mooncake_driver.py");
    std::fs::write(&driver, DRIVER)
        .map_err(|e| format!("writing the driver to {}: {e}", driver.display()))?;
    let result = drive(args, &python, &driver);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The driver's command line at this run's geometry.
fn command(args: &Args, python: &Path, driver: &Path) -> Command {
    let join = |v: &[String]| v.join(",");
    let sizes: Vec<String> = args.sizes_kib.iter().map(|s| s.to_string()).collect();
    let mut cmd = Command::new(python);
    cmd.arg(driver)
        .arg(format!("--sizes-kib={}", join(&sizes)))
        .arg(format!("--ops={}", join(&args.ops)))
        .arg(format!("--batch={}", args.batch))
        .arg(format!("--depth={}", args.depth))
        .arg(format!("--duration={}", args.duration))
        .arg(format!("--region-mib={}", args.region_mib))
        .arg("--processes=one,two");
    if args.layout == crate::Layout::Contiguous {
        cmd.arg("--contiguous");
    }
    if args.quick {
        cmd.arg(format!("--deadline={QUICK_DEADLINE_S}"));
    }
    cmd
}

fn drive(args: &Args, python: &Path, driver: &Path) -> Res<(Vec<Row>, Vec<String>)> {
    let mut child = command(args, python, driver)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", python.display()))?;
    let (tx, rx) = mpsc::channel::<String>();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let stderr = child.stderr.take().map(|err| {
        std::thread::spawn(move || {
            let mut tail = std::collections::VecDeque::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            Vec::from(tail).join(" | ")
        })
    });
    // Past its own deadline (or the points' time, with room for setup and checks), the
    // driver is stuck: end it.
    let points = (args.sizes_kib.len() * args.ops.len() * 2) as f64;
    let limit = if args.quick {
        QUICK_DEADLINE_S + 20.0
    } else {
        points * (args.duration * 2.0 + 5.0) + 30.0
    };
    let deadline = Instant::now() + Duration::from_secs_f64(limit);
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    let mut stuck = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => match serde_json::from_str::<Line>(&line) {
                Ok(Line::Point(r)) => rows.push(r),
                Ok(Line::Skipped(s)) => skipped.push(s),
                Err(_) => {} // not one of the driver's rows
            },
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                stuck = true;
                let _ = child.kill();
                break;
            }
        }
    }
    let status = child.wait()?;
    let tail = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if stuck {
        return Err(format!("the driver ran past {limit:.0} s and was ended: {tail}").into());
    }
    if !status.success() {
        return Err(format!("the driver failed ({status}): {tail}").into());
    }
    Ok((rows, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_args;

    #[test]
    fn driver_lines_parse_and_others_do_not() {
        let p = r#"{"point": {"op": "WRITE", "cross_process": true, "block_bytes": 65536,
            "batch": 16, "depth": 4, "gbps": 1.5, "submit_avg_us": 1.0, "submit_p99_us": 2.0,
            "complete_avg_us": 3.0, "complete_p99_us": 4.0, "verified_blocks": 1024}}"#;
        match serde_json::from_str::<Line>(p) {
            Ok(Line::Point(r)) => assert!(r.cross_process && r.block_bytes == 65536),
            _ => panic!("a point"),
        }
        let s = r#"{"skipped": "no mooncake"}"#;
        assert!(
            matches!(serde_json::from_str::<Line>(s), Ok(Line::Skipped(w)) if w == "no mooncake")
        );
        assert!(serde_json::from_str::<Line>("I1202 glog line").is_err());
    }

    #[test]
    fn a_missing_python_is_reported_skipped() {
        let args = test_args(&["--quick", "--peer-python=/nonexistent/python"]);
        let mut run = Run::new(64, crate::Layout::Scattered);
        super::run(&args, 1.0, &mut run);
        assert!(run.points.is_empty());
        assert_eq!(run.skipped.len(), 1);
        assert!(
            run.skipped[0].starts_with(BACKEND) && run.skipped[0].contains("/nonexistent/python"),
            "{:?}",
            run.skipped
        );
        // `--peers=none` runs nothing and reports nothing.
        let mut quiet = Run::new(64, crate::Layout::Scattered);
        let none = test_args(&["--peers=none", "--peer-python=/nonexistent/python"]);
        super::run(&none, 1.0, &mut quiet);
        assert!(quiet.skipped.is_empty());
    }

    /// The real driver at a tiny geometry, with this workspace's venv: with mooncake there,
    /// every point of both placements, checked; without it, the reason.
    #[test]
    fn the_driver_measures_both_placements_or_says_why_not() {
        let args = test_args(&[
            "--sizes-kib=64",
            "--region-mib=2",
            "--duration=0.05",
            "--batch=4",
            "--depth=2",
        ]);
        if !python(&args).exists() {
            eprintln!(
                "no {}: scripts/setup-python.sh makes it",
                python(&args).display()
            );
            return;
        }
        let mut run = Run::new(2, crate::Layout::Scattered);
        super::run(&args, 1.0, &mut run);
        if run.points.is_empty() {
            assert_eq!(run.skipped.len(), 1, "{:?}", run.skipped);
            assert!(run.skipped[0].contains("mooncake"), "{:?}", run.skipped);
            return;
        }
        assert!(run.skipped.is_empty(), "{:?}", run.skipped);
        let mut seen: Vec<(String, bool)> = run
            .points
            .iter()
            .map(|p| (p.op.clone(), p.cross_process))
            .collect();
        seen.sort();
        let want = [
            ("READ", false),
            ("READ", true),
            ("WRITE", false),
            ("WRITE", true),
        ];
        assert_eq!(seen, want.map(|(o, x)| (o.to_owned(), x)));
        for p in &run.points {
            assert!(p.peer && p.backend == BACKEND && p.ceiling == CeilingKind::Tcp);
            assert!(p.gbps > 0.0 && p.batch == 4 && p.depth == 2 && p.block_bytes == 65536);
        }
    }

    #[test]
    fn the_driver_gets_the_bench_geometry() {
        let args = test_args(&["--quick", "--batch=8", "--depth=2"]);
        let cmd = command(&args, Path::new("py"), Path::new("d.py"));
        let argv: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for want in [
            "--sizes-kib=64,1024",
            "--ops=write,read",
            "--batch=8",
            "--depth=2",
            "--duration=0.3",
            "--region-mib=64",
            "--processes=one,two",
        ] {
            assert!(argv.iter().any(|a| a == want), "{want} not in {argv:?}");
        }
        assert!(argv.iter().any(|a| a.starts_with("--deadline=")));
    }
}
