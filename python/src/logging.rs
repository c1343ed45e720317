//! The library's `tracing` events as Python `logging` records, under one logger tree.
//!
//! With no tracing subscriber installed, `tracing` (feature `log`) emits every event as a
//! `log` record; pyo3-log hands each to the Python logger named after its target. The crates'
//! targets are renamed first so that every event is under `blockwire`: `blockwire_shm::copy`
//! becomes `blockwire.shm.copy`, `blockwire::block_transport` stays
//! `blockwire.block_transport`. Configuring `logging.getLogger("blockwire")` covers them all.
//!
//! Records are forwarded only while the interpreter runs: from the `atexit` hook on (and if
//! the GIL cannot be taken), a background thread's event is dropped rather than waiting for
//! an interpreter that is going away.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use log::{LevelFilter, Log, Metadata, Record};
use pyo3::prelude::*;

/// Set by the `atexit` hook.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// `blockwire_<x>` becomes `blockwire.<x>`; other targets are kept.
fn python_target(target: &str) -> Cow<'_, str> {
    match target.strip_prefix("blockwire_") {
        Some(rest) => Cow::Owned(format!("blockwire.{rest}")),
        None => Cow::Borrowed(target),
    }
}

struct Renamed {
    inner: pyo3_log::Logger,
}

impl Log for Renamed {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        if SHUTTING_DOWN.load(Ordering::Relaxed) {
            return false;
        }
        let target = python_target(metadata.target());
        self.inner.enabled(
            &Metadata::builder()
                .level(metadata.level())
                .target(&target)
                .build(),
        )
    }

    fn log(&self, record: &Record<'_>) {
        if SHUTTING_DOWN.load(Ordering::Relaxed) {
            return;
        }
        let target = python_target(record.target());
        let renamed = Record::builder()
            .level(record.level())
            .target(&target)
            .args(*record.args())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        // Nothing to log into while the interpreter is not running.
        let _ = Python::try_attach(|_| self.inner.log(&renamed));
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

/// Called by `atexit`: stop forwarding.
#[pyfunction]
fn _stop_logging() {
    SHUTTING_DOWN.store(true, Ordering::Relaxed);
}

/// Installs the logger (once per process: a second import keeps the first) and the `atexit`
/// hook. Returns the handle that makes the logger read Python's levels again.
pub(crate) fn install(m: &Bound<'_, PyModule>) -> PyResult<Option<pyo3_log::ResetHandle>> {
    let py = m.py();
    let logger = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels)?;
    let handle = logger.reset_handle();
    let installed = log::set_boxed_logger(Box::new(Renamed { inner: logger })).is_ok();
    if !installed {
        return Ok(None);
    }
    log::set_max_level(LevelFilter::Debug);
    let stop = wrap_pyfunction!(_stop_logging, m)?;
    py.import("atexit")?.call_method1("register", (stop,))?;
    Ok(Some(handle))
}
