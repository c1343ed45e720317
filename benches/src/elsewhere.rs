//! A backend that cannot run in this process (NIXL beside the system UCX) runs in a sibling
//! binary that can: it gets the same arguments, writes what it measured as JSON, and this
//! binary merges it.

use std::path::Path;

use crate::{Args, Backends, Res, Run, Scale, scale};

/// Runs `backend` in the other binary that can (`Backends::elsewhere`) and reads back what it
/// measured (its scale results into `scaled`).
pub(crate) fn run_elsewhere(
    backends: &dyn Backends,
    args: &Args,
    backend: &str,
    scaled: &mut Vec<Scale>,
) -> Res<Run> {
    let mut cmd = backends
        .elsewhere(backend)
        .ok_or_else(|| format!("{backend}: no other binary runs it"))?;
    let dir = tempdir()?;
    let out = dir.join("run.json");
    println!(
        "{backend}: runs in its own process ({:?})",
        cmd.get_program()
    );
    let status = cmd
        .args(args.forwarded(backend))
        .arg(format!("--emit-json={}", out.display()))
        .status()
        .map_err(|e| format!("starting {:?} for {backend}: {e}", cmd.get_program()))?;
    if !status.success() {
        return Err(format!("{backend}: {:?} failed ({status})", cmd.get_program()).into());
    }
    let run = serde_json::from_slice(&std::fs::read(&out)?)?;
    scaled.extend(scale::read_beside(&out)?);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(run)
}

fn tempdir() -> Res<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("blockwire-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The sibling binary `name` beside the running one, building it first with the features this
/// binary was built with when it is missing and this runs under `cargo run` (`CARGO` is set).
pub fn sibling(name: &str, features: &[&str]) -> Option<std::process::Command> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.with_file_name(name);
    let stale = |p: &Path| {
        let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
        match (modified(p), modified(&exe)) {
            (Some(s), Some(e)) => s < e,
            _ => true,
        }
    };
    if stale(&path) {
        if let Ok(cargo) = std::env::var("CARGO") {
            let release = exe.parent().and_then(|d| d.file_name()) == Some("release".as_ref());
            println!("building {name} (cargo build -p blockwire-bench --bin {name})");
            let mut build = std::process::Command::new(cargo);
            build.args(["build", "-q", "-p", "blockwire-bench", "--bin", name]);
            build.arg(format!("--features={}", features.join(",")));
            if release {
                build.arg("--release");
            }
            if !build.status().is_ok_and(|s| s.success()) {
                return None;
            }
        }
    }
    path.exists().then(|| std::process::Command::new(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Shape, Transport, TransportOptions};

    /// A backend (`far`) that opens only in another binary: a shell script that appends its
    /// arguments to a log and writes one throughput point (or none) where `--emit-json` says.
    struct Far {
        log: std::path::PathBuf,
    }

    impl Backends for Far {
        fn open(
            &self,
            backend: &str,
            _blocks: u32,
            _block: usize,
            _options: TransportOptions,
            _allocate: bool,
        ) -> Res<Box<dyn Transport>> {
            Err(Box::new(blockwire::Error::Open {
                kind: backend.into(),
                source: blockwire::BackendError::new(
                    blockwire::BackendErrorKind::Unsupported,
                    "only in its own binary",
                ),
            }))
        }

        fn raw_gbps(&self, _backend: &str, _shape: &Shape, _args: &Args) -> Res<Option<f64>> {
            Ok(None)
        }

        fn names(&self) -> Vec<String> {
            vec!["far".into()]
        }

        fn elsewhere(&self, _backend: &str) -> Option<std::process::Command> {
            // Each call reports a different GB/s (its call number), a skip reason every call
            // gives, and a point only when asked for the sweep.
            let script = r#"
log="$0"; echo "$*" >> "$log"; n=$(wc -l < "$log")
for a in "$@"; do case "$a" in --emit-json=*) out="${a#--emit-json=}";; esac; done
case "$*" in
  *--measures=throughput*) points='[{"backend":"far","op":"WRITE","cross_process":false,"block_bytes":65536,"batch":16,"depth":4,"gbps":'$n',"ceiling_gbps":0,"ratio_to_memcpy":0,"raw_gbps":null,"submit_avg_us":0,"submit_p99_us":0,"complete_avg_us":0,"complete_p99_us":0}]';;
  *) points='[]';;
esac
echo '{"memcpy_gbps":0,"region_mib":1,"points":'"$points"',"registration":[],"skipped":["far: no notify here"]}' > "$out"
"#;
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c").arg(script).arg(&self.log);
            Some(cmd)
        }
    }

    #[test]
    fn a_backend_elsewhere_runs_once_a_round_then_once_for_the_rest() {
        // Not under `tempdir()`, which each call of the other binary removes.
        let dir = std::env::temp_dir().join(format!(
            "blockwire-bench-elsewhere-test-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("calls");
        let _ = std::fs::remove_file(&log);
        let mut args = crate::test_args(&[
            "--quick",
            "--rounds=3",
            "--region-mib=1",
            "--sizes-kib=64",
            "--ops=write",
            "--peers=none",
            "--measures=throughput,registration",
        ]);
        args.emit_json = Some(dir.join("run.json"));
        crate::drive::run(&Far { log: log.clone() }, &mut args).expect("run");
        let calls = std::fs::read_to_string(&log).expect("log");
        let calls: Vec<&str> = calls.lines().collect();
        assert_eq!(calls.len(), 4, "{calls:#?}");
        for sweep in &calls[..3] {
            assert!(sweep.contains("--rounds=1 "), "{sweep}");
            assert!(sweep.contains("--measures=throughput "), "{sweep}");
        }
        assert!(calls[3].contains("--rounds=3 "), "{}", calls[3]);
        assert!(
            calls[3].contains("--measures=registration "),
            "{}",
            calls[3]
        );
        let json = std::fs::read_to_string(dir.join("run.json")).expect("json");
        let run: Run = serde_json::from_str(&json).expect(&json);
        // One point, the median of the three rounds, every round on record; the reason given
        // four times, kept once.
        assert_eq!(run.points.len(), 1);
        assert_eq!(run.points[0].gbps, 2.0);
        assert_eq!(run.points[0].round_gbps, [1.0, 2.0, 3.0]);
        assert_eq!(run.skipped, ["far: no notify here"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
