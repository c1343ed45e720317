//! A [`blockwire::Registration`] as a `concurrent.futures.Future`.

use blockwire::Registration;
use pyo3::prelude::*;

use crate::errors::to_py;

/// A running `concurrent.futures.Future` that resolves when `registration` does: `None` once
/// the peer is published, the registration's error (a `blockwire.Error`) otherwise.
///
/// A thread of its own waits for the registration, without the GIL, and takes the GIL only
/// to resolve the future; the registration always resolves (a closed transport resolves it
/// with `ClosedError`), so the thread always ends. Callbacks added with `add_done_callback`
/// run on that thread, as `concurrent.futures` documents for a future's resolver.
pub(crate) fn spawn(py: Python<'_>, registration: Registration) -> PyResult<Py<PyAny>> {
    let future = py
        .import("concurrent.futures")?
        .getattr("Future")?
        .call0()?;
    // Running: `Future.cancel()` cannot pretend to stop a registration it does not control.
    future.call_method0("set_running_or_notify_cancel")?;
    let resolved = future.clone().unbind();
    let waiter = move || {
        let result = registration.wait();
        // Nothing to resolve once the interpreter is shutting down.
        let _ = Python::try_attach(|py| {
            let f = resolved.bind(py);
            let set = match result {
                Ok(()) => f.call_method1("set_result", (py.None(),)),
                Err(e) => f.call_method1("set_exception", (to_py(e).into_value(py),)),
            };
            if let Err(e) = set {
                e.write_unraisable(py, Some(f));
            }
        });
    };
    std::thread::Builder::new()
        .name("bw-py-register".into())
        .spawn(waiter)
        .map_err(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "spawning the registration waiter: {e}"
            ))
        })?;
    Ok(future.unbind())
}
