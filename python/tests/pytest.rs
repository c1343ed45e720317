//! The Python package's pytest suite (`python/tests/*.py`), run by `cargo test`.
//!
//! Each trial installs the package the way a user does (`pip install ./python`, here with
//! `--no-build-isolation` so that nothing is fetched; `MATURIN_PEP517_ARGS` passes the
//! features) into the virtual environment made by `scripts/setup-python.sh` (or the one
//! `BLOCKWIRE_PYTHON` names), then runs pytest on the backends of that build. The features are
//! this crate's: plain `cargo test` tests shm; `--all-features` tests shm, ucx and libfabric in
//! one build and nixl in a second one (NIXL's bundled UCX cannot share a process with the
//! system UCX the `ucx` feature links). Without such an environment the trials are reported
//! ignored, with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Arguments, Completion, Failed, Trial};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The venv's interpreter, or why there is none.
fn python() -> Result<PathBuf, String> {
    let python = match std::env::var_os("BLOCKWIRE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => repo().join("target/python-venv/bin/python"),
    };
    if !python.exists() {
        return Err(format!(
            "no Python environment at {} (run scripts/setup-python.sh, or set BLOCKWIRE_PYTHON)",
            python.display()
        ));
    }
    let check = Command::new(&python)
        .args(["-c", "import maturin, pytest, numpy"])
        .output()
        .map_err(|e| format!("running {}: {e}", python.display()))?;
    if !check.status.success() {
        return Err(format!(
            "{} lacks maturin, pytest or numpy (run scripts/setup-python.sh)",
            python.display()
        ));
    }
    Ok(python)
}

fn run(what: &str, cmd: &mut Command) -> Result<(), Failed> {
    let out = cmd
        .output()
        .map_err(|e| Failed::from(format!("{what}: {e}")))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({})", out.status).into())
    }
}

/// Installs the package with `features` and runs pytest on `backends`.
fn install_and_test(features: &[&str], backends: &[&str]) -> Result<Completion, Failed> {
    let python = match python() {
        Ok(p) => p,
        Err(why) => return Ok(Completion::ignored_with(why)),
    };
    let root = repo();
    let bin = python.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .map_err(|e| Failed::from(format!("PATH: {e}")))?;
    let venv = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    run(
        "pip install ./python",
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-build-isolation"])
            .args(["--no-deps", "--force-reinstall"])
            .arg(root.join("python"))
            .env("PATH", &path)
            .env("VIRTUAL_ENV", &venv)
            .env(
                "MATURIN_PEP517_ARGS",
                format!("--features={}", features.join(",")),
            )
            // Its own target folder: this test runs while cargo holds the workspace's.
            .env("CARGO_TARGET_DIR", root.join("target/python-build")),
    )?;
    run(
        "pytest",
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
            .arg(root.join("python/tests"))
            // Not python/: there `import blockwire` would find the source folder (with
            // whatever a `maturin develop` left in it) before the package just installed.
            .current_dir(root.join("python/tests"))
            .env("PATH", &path)
            .env("BLOCKWIRE_TEST_BACKENDS", backends.join(",")),
    )?;
    Ok(Completion::Completed)
}

fn main() {
    let mut args = Arguments::from_args();
    // One environment, installed into in turn.
    args.test_threads = Some(1);
    let mut features: Vec<&'static str> = Vec::new();
    let mut backends = vec!["shm"];
    if cfg!(feature = "ucx") {
        features.push("ucx");
        backends.push("ucx");
    }
    if cfg!(feature = "libfabric") {
        features.push("libfabric");
        backends.push("libfabric");
    }
    let mut trials = vec![Trial::ignorable_test(
        format!("python::pytest[{}]", backends.join(",")),
        move || install_and_test(&features, &backends),
    )];
    if cfg!(feature = "nixl") {
        trials.push(Trial::ignorable_test("python::pytest[nixl]", || {
            install_and_test(&["nixl"], &["nixl"])
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
