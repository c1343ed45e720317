//! What the transport reports, as Python objects: completions (`blockwire._types.PollResult`),
//! notifications (`blockwire._types.Notification`), the notification queue's counters and
//! per-peer telemetry (dicts).

use blockwire::{InboxStats, Notification, PollResult, TelemetrySnapshot};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyType};

/// `blockwire._types.PollResult(done, failed, peer_fault)` of `r`.
pub(crate) fn poll_result(py: Python<'_>, r: PollResult) -> PyResult<Bound<'_, PyAny>> {
    static POLL_RESULT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let done: Vec<u64> = r.done.iter().map(|i| i.get()).collect();
    let failed: Vec<u64> = r.failed.iter().map(|(i, _)| i.get()).collect();
    let fault = r.peer_fault.map(|f| f.to_string());
    cached_type(py, &POLL_RESULT, "PollResult")?.call1((done, failed, fault))
}

/// `(done, [(id, reason, message)], peer_fault)` of `r`: why each transfer failed, `reason`
/// being the failure's stable label.
#[allow(clippy::type_complexity)]
pub(crate) fn detailed(
    r: PollResult,
) -> (Vec<u64>, Vec<(u64, &'static str, String)>, Option<String>) {
    (
        r.done.iter().map(|i| i.get()).collect(),
        r.failed
            .iter()
            .map(|(i, why)| (i.get(), why.label(), why.to_string()))
            .collect(),
        r.peer_fault.map(|f| f.to_string()),
    )
}

/// A list of `blockwire._types.Notification(sender, message)`, in arrival order.
pub(crate) fn notifications(
    py: Python<'_>,
    got: Vec<Notification>,
) -> PyResult<Vec<Bound<'_, PyAny>>> {
    static NOTIFICATION: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let class = cached_type(py, &NOTIFICATION, "Notification")?;
    got.into_iter()
        .map(|n| class.call1((n.sender, PyBytes::new(py, &n.message))))
        .collect()
}

/// The notification queue's counters as a dict.
pub(crate) fn notification_stats<'py>(
    py: Python<'py>,
    s: &InboxStats,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("received", s.received)?;
    d.set_item("drained", s.drained)?;
    d.set_item("queued", s.queued)?;
    d.set_item("dropped_full", s.dropped_full)?;
    d.set_item("discarded_closed", s.discarded_closed)?;
    d.set_item("malformed", s.malformed)?;
    Ok(d)
}

/// A dict of peer id to that peer's counters and its `latency` and `submit` summaries.
pub(crate) fn telemetry(
    py: Python<'_>,
    snapshot: TelemetrySnapshot,
) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for p in snapshot.peers {
        let d = PyDict::new(py);
        d.set_item("transfers", p.transfers)?;
        d.set_item("done", p.done)?;
        d.set_item("failed", p.failed)?;
        d.set_item("cancelled", p.cancelled)?;
        d.set_item("bytes", p.bytes)?;
        for (what, l) in [("latency", p.latency), ("submit", p.submit)] {
            let s = PyDict::new(py);
            s.set_item("count", l.count)?;
            s.set_item("p50", l.p50.as_secs_f64())?;
            s.set_item("p90", l.p90.as_secs_f64())?;
            s.set_item("p99", l.p99.as_secs_f64())?;
            s.set_item("max", l.max.as_secs_f64())?;
            d.set_item(what, s)?;
        }
        out.set_item(p.peer.to_string(), d)?;
    }
    Ok(out)
}

fn cached_type<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.import(py, "blockwire._types", name)
}
