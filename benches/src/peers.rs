//! The peers: engines users would pick instead of blockwire, measured at the bench's geometry
//! by `benches/peers/peer_driver.py` and its engine modules (embedded in the binary), each in
//! a python that has the engine. Their rows join the table, JSON and plot with `peer: true`.
//!
//! - [`MOONCAKE`]: Mooncake's transfer engine over TCP, with the python of a virtual
//!   environment that has `mooncake-transfer-engine-non-cuda` (`scripts/setup-python.sh`
//!   installs it into `target/python-venv`); against the TCP ceiling.
//! - [`NIXL`]: NIXL's own Python API (what vLLM's NIXL transports call), from the `nixl-cu12`
//!   wheel that `scripts/setup-backends.sh` unpacks into `target/nixl-runtime` (put on
//!   `PYTHONPATH`; `BLOCKWIRE_NIXL_LIB_DIR`'s parent where that is set), with the same python;
//!   against the ceiling of the bench's nixl backend (its UCX reads `UCX_TLS`).

use std::ffi::OsString;
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

/// An engine the driver measures.
pub(crate) struct Peer {
    /// Its name in `--peers` and the driver's `--engine`.
    pub name: &'static str,
    /// Its name in the tables and JSON.
    pub label: &'static str,
    /// The ceiling that bounds it.
    ceiling: fn(&Args) -> CeilingKind,
    /// Where the python finds the engine beyond its own packages (`PYTHONPATH`), if anywhere.
    python_path: fn() -> Option<PathBuf>,
}

/// Mooncake's transfer engine over its `tcp` protocol.
pub(crate) const MOONCAKE: Peer = Peer {
    name: "mooncake",
    label: "mooncake (peer)",
    ceiling: |_| CeilingKind::Tcp,
    python_path: || None,
};

/// NIXL's Python API with its UCX backend.
pub(crate) const NIXL: Peer = Peer {
    name: "nixl",
    label: "nixl python (peer)",
    ceiling: |args| CeilingKind::of("nixl", args),
    python_path: nixl_package_dir,
};

/// Every peer, in the order they run.
pub(crate) const PEERS: [&Peer; 2] = [&MOONCAKE, &NIXL];

/// The folder that holds the `nixl_cu12` package: the parent of `BLOCKWIRE_NIXL_LIB_DIR`
/// (the wheel's `.nixl_cu12.mesonpy.libs`) where that is set, else `target/nixl-runtime`.
fn nixl_package_dir() -> Option<PathBuf> {
    match std::env::var_os("BLOCKWIRE_NIXL_LIB_DIR") {
        Some(lib) => PathBuf::from(lib).parent().map(Path::to_path_buf),
        None => Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/nixl-runtime")),
    }
}

/// The driver and its engines, written to a temporary folder for each run.
const DRIVER: [(&str, &str); 3] = [
    ("peer_driver.py", include_str!("../peers/peer_driver.py")),
    (
        "engine_mooncake.py",
        include_str!("../peers/engine_mooncake.py"),
    ),
    ("engine_nixl.py", include_str!("../peers/engine_nixl.py")),
];

/// Seconds the driver gets in all under `--quick` (it skips what does not fit, and says so).
const QUICK_DEADLINE_S: f64 = 20.0;

/// Lines of the driver's standard error kept for a failure's message (the engines log there).
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
    /// The driver thread's CPU time per transfer, µs (absent from older drivers).
    #[serde(default)]
    caller_cpu_us_per_transfer: Option<f64>,
}

/// The python the driver runs with: `--peer-python`, else this workspace's
/// `target/python-venv/bin/python`.
fn python(args: &Args) -> PathBuf {
    args.peer_python.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/python-venv/bin/python")
    })
}

/// Runs each peer that `--peers` names: its points go into `run` (against its ceiling, which
/// `Run::settle` fills in, and `memcpy_1thr_gbps`, a single-thread `memcpy` measured just
/// before), or the reason it did not run into `run.skipped` (and printed): a missing python
/// or engine, the deadline, a driver that failed (with the end of its standard error).
pub(crate) fn run(args: &Args, memcpy_1thr_gbps: f64, run: &mut Run) {
    for peer in PEERS {
        if args.peers.iter().any(|p| p == peer.name) {
            println!("{}: measuring (Python driver)", peer.label);
            peer.run(args, memcpy_1thr_gbps, run);
        }
    }
}

/// Leaves a peer's measurement out, saying why, once: each round of `--rounds` runs the peers
/// again and would give the same reason.
fn skip(run: &mut Run, label: &str, why: impl std::fmt::Display) {
    if run.skip_once(format!("{label}: {why}")) {
        println!("{label}: skipped: {why}");
    }
}

impl Peer {
    fn run(&self, args: &Args, memcpy_1thr_gbps: f64, run: &mut Run) {
        let label = self.label;
        match self.points(args) {
            Ok((rows, skipped)) => {
                let ceiling = (self.ceiling)(args);
                run.points.extend(rows.into_iter().map(|r| Point {
                    backend: label.to_owned(),
                    op: r.op,
                    cross_process: r.cross_process,
                    block_bytes: r.block_bytes,
                    batch: r.batch,
                    depth: r.depth,
                    gbps: r.gbps,
                    round_gbps: Vec::new(),
                    ceiling,
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
                    spin_p99_us: None,
                    wake_p99_us: None,
                    fill_submit_p50_us: None,
                    fill_submit_max_us: None,
                    poll_p999_us: None,
                    caller_cpu_us_per_transfer: r.caller_cpu_us_per_transfer,
                    complete_avg_us: r.complete_avg_us,
                    complete_p99_us: r.complete_p99_us,
                }));
                for s in skipped {
                    skip(run, label, s);
                }
            }
            Err(e) => skip(run, label, e),
        }
    }

    /// Runs the driver: its rows and what it skipped, or why it could not run.
    fn points(&self, args: &Args) -> Res<(Vec<Row>, Vec<String>)> {
        let python = python(args);
        // A bare name (`python3`) is looked up in PATH when it starts; a path must be there.
        if python.components().count() > 1 && !python.exists() {
            return Err(format!(
                "no python at {} (scripts/setup-python.sh makes target/python-venv with \
                 numpy and mooncake-transfer-engine-non-cuda; or pass --peer-python)",
                python.display()
            )
            .into());
        }
        let dir = std::env::temp_dir().join(format!(
            "blockwire-bench-peer-{}-{}",
            self.name,
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        let written = DRIVER.iter().try_for_each(|(name, text)| {
            std::fs::write(dir.join(name), text)
                .map_err(|e| format!("writing the driver to {}: {e}", dir.display()))
        });
        let result = written
            .map_err(Into::into)
            .and_then(|()| drive(args, self.command(args, &python, &dir.join(DRIVER[0].0))));
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    /// The driver's command line at this run's geometry.
    fn command(&self, args: &Args, python: &Path, driver: &Path) -> Command {
        let join = |v: &[String]| v.join(",");
        let sizes: Vec<String> = args.sizes_kib.iter().map(|s| s.to_string()).collect();
        // Each size's batch, by the bench's own rule (`--same-bytes`).
        let batches: Vec<String> = args
            .sizes_kib
            .iter()
            .map(|s| args.sweep_batch(s << 10).to_string())
            .collect();
        let mut cmd = Command::new(python);
        cmd.arg(driver)
            .arg(format!("--engine={}", self.name))
            .arg(format!("--sizes-kib={}", join(&sizes)))
            .arg(format!("--ops={}", join(&args.ops)))
            .arg(format!("--batches={}", join(&batches)))
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
        if let Some(dir) = (self.python_path)() {
            let mut path = OsString::from(dir.as_os_str());
            if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
                path.push(":");
                path.push(old);
            }
            cmd.env("PYTHONPATH", path);
        }
        cmd
    }
}

fn drive(args: &Args, mut cmd: Command) -> Res<(Vec<Row>, Vec<String>)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", Path::new(cmd.get_program()).display()))?;
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
        let mut run = Run::new(64, crate::Layout::Scattered, 1, 1);
        // Two rounds (`--rounds 2`): each peer says why once.
        super::run(&args, 1.0, &mut run);
        super::run(&args, 1.0, &mut run);
        assert!(run.points.is_empty());
        // Each peer (both by default) says why.
        assert_eq!(run.skipped.len(), PEERS.len(), "{:?}", run.skipped);
        for (peer, why) in PEERS.iter().zip(&run.skipped) {
            assert!(
                why.starts_with(peer.label) && why.contains("/nonexistent/python"),
                "{why}"
            );
        }
        // `--peers=none` runs nothing and reports nothing.
        let mut quiet = Run::new(64, crate::Layout::Scattered, 1, 1);
        let none = test_args(&["--peers=none", "--peer-python=/nonexistent/python"]);
        super::run(&none, 1.0, &mut quiet);
        assert!(quiet.skipped.is_empty());
    }

    /// The real driver at a tiny geometry, with this workspace's venv and the engine in it:
    /// every point of both placements, checked. Ignored unless asked for (`--ignored`, as
    /// `.ci/run` does after installing both engines): without them it fails, with the reason.
    fn measures_both_placements(peer: &Peer) {
        let args = test_args(&[
            "--sizes-kib=64",
            "--region-mib=2",
            "--duration=0.05",
            "--batch=4",
            "--depth=2",
        ]);
        assert!(
            python(&args).exists(),
            "no {}: scripts/setup-python.sh makes it",
            python(&args).display()
        );
        let mut run = Run::new(2, crate::Layout::Scattered, 1, 1);
        peer.run(&args, 1.0, &mut run);
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
            assert!(p.peer && p.backend == peer.label && p.ceiling == (peer.ceiling)(&args));
            assert!(p.gbps > 0.0 && p.batch == 4 && p.depth == 2 && p.block_bytes == 65536);
        }
    }

    #[test]
    #[ignore = "needs Mooncake in target/python-venv (scripts/setup-python.sh); .ci/run runs it"]
    fn mooncake_measures_both_placements() {
        measures_both_placements(&MOONCAKE);
    }

    #[test]
    #[ignore = "needs target/nixl-runtime and numpy in target/python-venv (scripts/setup-backends.sh, \
                scripts/setup-python.sh); .ci/run runs it"]
    fn nixl_measures_both_placements() {
        measures_both_placements(&NIXL);
    }

    #[test]
    fn the_driver_gets_the_bench_geometry() {
        let args = test_args(&["--quick", "--batch=8", "--depth=2"]);
        for peer in PEERS {
            let cmd = peer.command(&args, Path::new("py"), Path::new("d.py"));
            let argv: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            for want in [
                &format!("--engine={}", peer.name),
                "--sizes-kib=64,1024",
                "--ops=write,read",
                "--batches=8,8",
                "--depth=2",
                "--duration=0.3",
                "--region-mib=64",
                "--processes=one,two",
            ] {
                assert!(argv.iter().any(|a| a == want), "{want} not in {argv:?}");
            }
            assert!(argv.iter().any(|a| a.starts_with("--deadline=")));
            // `--same-bytes`: each size's batch carries the bytes of 8 blocks of the largest.
            let same = test_args(&["--quick", "--batch=8", "--same-bytes"]);
            let cmd_same = peer.command(&same, Path::new("py"), Path::new("d.py"));
            assert!(
                cmd_same.get_args().any(|a| a == "--batches=128,8"),
                "{:?}",
                cmd_same.get_args().collect::<Vec<_>>()
            );
            // NIXL's package goes on PYTHONPATH, Mooncake's comes with the python.
            let path = cmd
                .get_envs()
                .find(|(k, _)| *k == "PYTHONPATH")
                .and_then(|(_, v)| v);
            match (peer.python_path)() {
                Some(dir) => {
                    let path = path.map(|p| p.to_string_lossy().into_owned());
                    assert!(
                        path.as_deref()
                            .is_some_and(|p| p.starts_with(&*dir.to_string_lossy())),
                        "{path:?}"
                    );
                }
                None => assert!(path.is_none()),
            }
        }
    }
}
