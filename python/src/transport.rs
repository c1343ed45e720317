//! `blockwire.Transport`: the Rust transport over the caller's buffer.

use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use blockwire::{AnyTransport, CancelMode, PeerId, Region, TransferId, Transport};
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::buffer;
use crate::errors::IntoPy;
use crate::future;
use crate::indices;
use crate::options::Settings;
use crate::peer_args;
use crate::results;

/// A block transport over a buffer this object keeps referenced.
///
/// Every call into the transport that takes one of its locks runs with the GIL released: a
/// library thread may log (which takes the GIL) while it holds such a lock, and a caller
/// waiting for that lock with the GIL held would deadlock.
///
/// `Transport(view, backend="shm", *, name=None, config_fields=None, options=None,
/// stall_timeout=None, close_timeout=None, max_consecutive_failures=None,
/// notification_capacity=None, telemetry=False)`: see `blockwire/_native.pyi` for the whole
/// API. Thread-safe: Python threads may share one transport; every call that can wait or copy
/// runs with the GIL released.
#[pyclass(module = "blockwire._native", name = "Transport", frozen)]
pub(crate) struct PyTransport {
    /// Dropped first, without the GIL (`Drop`), before `owner` is released.
    inner: ManuallyDrop<AnyTransport>,
    /// What keeps the buffer exported; `None` once released after a clean close.
    owner: Mutex<Option<Py<PyAny>>>,
}

/// Whether a peer may still reach the memory after this transport stopped: a forced close
/// (a transfer could not be stopped) or a backend setting that cannot revoke a same-host
/// peer's access. The buffer must then stay referenced for the process's lifetime.
fn memory_still_reachable(t: &AnyTransport) -> bool {
    t.region().is_leaked() || !t.capabilities().revoke
}

fn peer_id(peer: &str) -> PeerId {
    PeerId::from(peer)
}

/// The longest a `poll_wait` sleeps without the GIL before it checks for a signal.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

impl PyTransport {
    fn t(&self) -> &AnyTransport {
        &self.inner
    }

    fn post(
        &self,
        py: Python<'_>,
        write: bool,
        peer: &str,
        local_idxs: &Bound<'_, PyAny>,
        remote_idxs: &Bound<'_, PyAny>,
        notification: Option<&[u8]>,
    ) -> PyResult<u64> {
        let local = indices::extract(local_idxs, "local")?;
        let remote = indices::extract(remote_idxs, "remote")?;
        let peer = peer_id(peer);
        let t = self.t();
        let id = py.detach(|| match (write, notification) {
            (true, None) => t.write_blocks(&peer, &local, &remote),
            (true, Some(m)) => t.write_blocks_notify(&peer, &local, &remote, m),
            (false, None) => t.read_blocks(&peer, &local, &remote),
            (false, Some(m)) => t.read_blocks_notify(&peer, &local, &remote, m),
        });
        id.map(TransferId::get).py()
    }
}

#[pymethods]
impl PyTransport {
    #[new]
    #[pyo3(signature = (
        view, backend = "shm", *, name = None, config_fields = None, options = None,
        stall_timeout = None, close_timeout = None, max_consecutive_failures = None,
        notification_capacity = None, telemetry = false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        view: &Bound<'py, PyAny>,
        backend: &str,
        name: Option<String>,
        config_fields: Option<Bound<'py, PyAny>>,
        options: Option<Bound<'py, PyDict>>,
        stall_timeout: Option<f64>,
        close_timeout: Option<f64>,
        max_consecutive_failures: Option<u32>,
        notification_capacity: Option<usize>,
        telemetry: bool,
    ) -> PyResult<Self> {
        let settings = Settings {
            name,
            config_fields,
            options,
            stall_timeout,
            close_timeout,
            max_consecutive_failures,
            notification_capacity,
            telemetry,
        };
        let options = settings.options(py)?;
        let buffer = buffer::take(py, view)?;
        // SAFETY: `buffer.owner` holds the buffer's export (a memoryview and a ctypes array
        // over it), so its `num_blocks * block_len` bytes at `base` stay allocated and in
        // place while it is referenced. This object keeps it referenced until a close after
        // which no peer reaches the memory, or for the process's lifetime when one still
        // may (`memory_still_reachable`: a forced close, or a backend that cannot revoke).
        // Python code reaches the bytes only through the buffer protocol (raw memory), never
        // through Rust references.
        let region =
            unsafe { Region::from_raw_parts(buffer.base, buffer.num_blocks, buffer.block_len) }
                .py()?;
        let backend = backend.to_owned();
        let inner = py
            .detach(move || blockwire::open(&backend, region, options))
            .py()?;
        Ok(PyTransport {
            inner: ManuallyDrop::new(inner),
            owner: Mutex::new(Some(buffer.owner)),
        })
    }

    /// The backend's name (`"shm"`, `"ucx"`, `"libfabric"`, `"nixl"`).
    #[getter]
    fn backend(&self) -> &'static str {
        self.t().backend_kind()
    }

    /// This transport's name: the sender name its notifications carry.
    #[getter]
    fn name(&self) -> String {
        self.t().name().to_owned()
    }

    /// Address of block 0.
    #[getter]
    fn base_addr(&self) -> u64 {
        self.t().base_addr()
    }

    /// Number of blocks in the local region.
    #[getter]
    fn num_blocks(&self) -> u32 {
        self.t().num_blocks()
    }

    /// Length of each block in bytes.
    #[getter]
    fn block_len(&self) -> usize {
        self.t().block_len()
    }

    /// The config fingerprint (`""`: none, compatible with every peer).
    #[getter]
    fn config_fingerprint(&self) -> String {
        self.t().fingerprint().to_owned()
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.t().is_closed()
    }

    /// Transfers submitted and not yet reported by `poll`.
    #[getter]
    fn inflight_count(&self, py: Python<'_>) -> usize {
        let t = self.t();
        py.detach(|| t.in_flight(None))
    }

    /// Published peers, sorted.
    #[getter]
    fn peers(&self, py: Python<'_>) -> Vec<String> {
        let t = self.t();
        let mut p: Vec<String> = py
            .detach(|| t.peers())
            .iter()
            .map(|p| p.to_string())
            .collect();
        p.sort();
        p
    }

    /// Whether close revokes every peer's access to the memory in this setting; when false,
    /// the buffer stays referenced for the process's lifetime.
    #[getter]
    fn revokes_access(&self, py: Python<'_>) -> bool {
        let t = self.t();
        py.detach(|| t.capabilities().revoke)
    }

    /// Transfers of `peer_id` (of every peer: `None`) submitted and not yet reported.
    #[pyo3(signature = (peer_id = None))]
    fn in_flight(&self, py: Python<'_>, peer_id: Option<&str>) -> usize {
        let peer = peer_id.map(self::peer_id);
        let t = self.t();
        py.detach(|| t.in_flight(peer.as_ref()))
    }

    /// The bytes a peer passes to its `add_remote_peer`.
    fn descriptor<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let t = self.t();
        let d = py.detach(|| t.descriptor()).py()?;
        Ok(PyBytes::new(py, &d.to_bytes()))
    }

    /// Registers a peer from its descriptor, blocking until it is published. The optional
    /// geometry must agree with the descriptor (`GeometryMismatchError`).
    #[pyo3(signature = (peer_id, descriptor, *, base_addr = None, num_blocks = None, block_len = None))]
    fn add_remote_peer(
        &self,
        py: Python<'_>,
        peer_id: &str,
        descriptor: &[u8],
        base_addr: Option<u64>,
        num_blocks: Option<u32>,
        block_len: Option<u64>,
    ) -> PyResult<()> {
        let desc = peer_args::descriptor(py, descriptor, base_addr, num_blocks, block_len)?;
        let peer = self::peer_id(peer_id);
        let t = self.t();
        py.detach(|| t.add_remote_peer(&peer, &desc)).py()
    }

    /// Starts registering a peer; returns a `concurrent.futures.Future` resolving to `None`
    /// once it is published, or failing (a registration superseded by a later add or a
    /// remove fails with `SupersededError`). Bad arguments fail the future too.
    #[pyo3(signature = (peer_id, descriptor, *, base_addr = None, num_blocks = None, block_len = None))]
    fn add_remote_peer_async(
        &self,
        py: Python<'_>,
        peer_id: &str,
        descriptor: &[u8],
        base_addr: Option<u64>,
        num_blocks: Option<u32>,
        block_len: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let registration =
            match peer_args::descriptor(py, descriptor, base_addr, num_blocks, block_len) {
                Ok(desc) => {
                    let peer = self::peer_id(peer_id);
                    let t = self.t();
                    py.detach(|| t.add_remote_peer_async(&peer, &desc))
                }
                Err(e) => {
                    let f = py
                        .import("concurrent.futures")?
                        .getattr("Future")?
                        .call0()?;
                    f.call_method1("set_exception", (e.into_value(py),))?;
                    return Ok(f.unbind());
                }
            };
        future::spawn(py, registration)
    }

    /// Unpublishes a peer; its transfers in flight fail (`PeerRemoved`) once they stop.
    fn remove_remote_peer(&self, py: Python<'_>, peer_id: &str) -> PyResult<()> {
        let peer = self::peer_id(peer_id);
        let t = self.t();
        py.detach(|| t.remove_remote_peer(&peer)).py()
    }

    /// Submits a WRITE of local blocks into the peer's blocks; returns its transfer id. With
    /// `notification`, the peer receives that message once every byte landed.
    #[pyo3(signature = (peer_id, local_idxs, remote_idxs, notification = None))]
    fn write_blocks(
        &self,
        py: Python<'_>,
        peer_id: &str,
        local_idxs: &Bound<'_, PyAny>,
        remote_idxs: &Bound<'_, PyAny>,
        notification: Option<&[u8]>,
    ) -> PyResult<u64> {
        self.post(py, true, peer_id, local_idxs, remote_idxs, notification)
    }

    /// Submits a READ of the peer's blocks into local blocks; returns its transfer id. With
    /// `notification`, the peer (whose blocks were read) receives it once the READ is done.
    #[pyo3(signature = (peer_id, local_idxs, remote_idxs, notification = None))]
    fn read_blocks(
        &self,
        py: Python<'_>,
        peer_id: &str,
        local_idxs: &Bound<'_, PyAny>,
        remote_idxs: &Bound<'_, PyAny>,
        notification: Option<&[u8]>,
    ) -> PyResult<u64> {
        self.post(py, false, peer_id, local_idxs, remote_idxs, notification)
    }

    /// Sends a notification without a transfer; returns a transfer id done once delivered.
    fn notify(&self, py: Python<'_>, peer_id: &str, message: &[u8]) -> PyResult<u64> {
        let peer = self::peer_id(peer_id);
        let t = self.t();
        py.detach(|| t.notify(&peer, message))
            .map(TransferId::get)
            .py()
    }

    /// Completions of `peer_id`'s transfers (every peer's: `None`) since the last poll, as
    /// `PollResult(done, failed, peer_fault)`; each id is reported once.
    #[pyo3(signature = (peer_id = None))]
    fn poll<'py>(&self, py: Python<'py>, peer_id: Option<&str>) -> PyResult<Bound<'py, PyAny>> {
        let peer = peer_id.map(self::peer_id);
        let t = self.t();
        let r = py.detach(|| t.poll(peer.as_ref())).py()?;
        results::poll_result(py, r)
    }

    /// As `poll`, waiting up to `timeout` seconds for something to report: while nothing is
    /// done or failed (and no fault) but `peer_id`'s transfers are in flight, the thread sleeps
    /// (without the GIL, using no CPU) until one ends. Returns at once with nothing in flight.
    /// Ctrl-C interrupts a long wait within a tenth of a second.
    #[pyo3(signature = (peer_id = None, timeout = 1.0))]
    fn poll_wait<'py>(
        &self,
        py: Python<'py>,
        peer_id: Option<&str>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !(timeout >= 0.0 && timeout.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "timeout must be a finite number of seconds, at least 0 (got {timeout})"
            )));
        }
        let peer = peer_id.map(self::peer_id);
        let t = self.t();
        let deadline = Instant::now() + Duration::from_secs_f64(timeout);
        loop {
            // In slices, so that a signal (Ctrl-C) is seen between them.
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_SLICE);
            let r = py.detach(|| t.poll_wait(peer.as_ref(), slice)).py()?;
            if !r.is_empty()
                || r.peer_fault.is_some()
                || Instant::now() >= deadline
                || py.detach(|| t.in_flight(peer.as_ref())) == 0
            {
                return results::poll_result(py, r);
            }
            py.check_signals()?;
        }
    }

    /// As `poll`, with why each transfer failed: `(done, [(id, reason, message)],
    /// peer_fault)`; `reason` is a stable label (`"remote_disconnect"`, `"aborted"`, ...).
    #[pyo3(signature = (peer_id = None))]
    #[allow(clippy::type_complexity)]
    fn poll_detailed(
        &self,
        py: Python<'_>,
        peer_id: Option<&str>,
    ) -> PyResult<(Vec<u64>, Vec<(u64, &'static str, String)>, Option<String>)> {
        let peer = peer_id.map(self::peer_id);
        let t = self.t();
        let r = py.detach(|| t.poll(peer.as_ref())).py()?;
        Ok(results::detailed(r))
    }

    /// Cancels transfers. `mode="immediate"`: stop tracking them, return `[]`. `mode="wait"`:
    /// release only those that stopped; the ids returned are still running and surface later
    /// through `poll`. Unknown ids are ignored.
    #[pyo3(signature = (transfer_ids, mode = "immediate"))]
    fn cancel(
        &self,
        py: Python<'_>,
        transfer_ids: &Bound<'_, PyAny>,
        mode: &str,
    ) -> PyResult<Vec<u64>> {
        let mode = match mode {
            "immediate" => CancelMode::Immediate,
            "wait" => CancelMode::Wait,
            other => {
                return Err(PyValueError::new_err(format!(
                    "cancel mode {other:?}: expected \"immediate\" or \"wait\""
                )));
            }
        };
        let mut ids = Vec::new();
        for item in transfer_ids.try_iter()? {
            // An id that cannot be one of ours (negative, not an int) is unknown: ignored.
            if let Ok(id) = item?.extract::<u64>() {
                ids.push(TransferId(id));
            }
        }
        let t = self.t();
        py.detach(|| t.cancel(&ids, mode))
            .map(|still| still.into_iter().map(TransferId::get).collect())
            .py()
    }

    /// Notifications received, in arrival order, each once: from `sender` only (a transport
    /// name), or from every sender (`None`). A list of `Notification(sender, message)`.
    #[pyo3(signature = (sender = None))]
    fn notifications<'py>(
        &self,
        py: Python<'py>,
        sender: Option<&str>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let t = self.t();
        let got = py.detach(|| t.notifications(sender)).py()?;
        results::notifications(py, got)
    }

    /// Counters of the notification queue: received, drained, queued, dropped_full,
    /// discarded_closed, malformed.
    fn notification_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.t();
        let s = py.detach(|| t.notification_stats());
        results::notification_stats(py, &s)
    }

    /// Per-peer telemetry (needs `telemetry=True`), `None` when off: a dict of peer id to
    /// `transfers`, `done`, `failed` (a dict of failure reason to count), `cancelled`,
    /// `bytes`, and `latency` and `submit` (count, p50, p90, p99, max, in seconds).
    fn telemetry<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let t = self.t();
        let Some(snapshot) = py.detach(|| t.telemetry()) else {
            return Ok(None);
        };
        results::telemetry(py, snapshot).map(Some)
    }

    /// Closes the transport: stops registrations, cancels transfers, waits (bounded by the
    /// close timeout) until none runs, revokes every peer's access. Idempotent; every other
    /// call afterwards raises `ClosedError`. Once it returns, the buffer may be freed (unless
    /// `revokes_access` is false or the close had to be forced: then this object keeps it).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.t();
        let (closed, reachable) = py.detach(|| (t.close(), memory_still_reachable(t)));
        if !reachable {
            // No peer reaches the memory any more: the caller may free it.
            drop(self.owner.lock().take());
        }
        closed.py()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let t = self.t();
        py.detach(|| {
            format!(
                "Transport(backend='{}', name='{}', blocks={} x {} B at {:#x}, peers={}, \
             inflight={}, closed={})",
                t.backend_kind(),
                t.name(),
                t.num_blocks(),
                t.block_len(),
                t.base_addr(),
                t.peers().len(),
                t.in_flight(None),
                if t.is_closed() { "True" } else { "False" },
            )
        })
    }
}

impl Drop for PyTransport {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and never used again (the object is going).
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        let (leaked, revokes) = Python::attach(|py| {
            // Dropping closes: that waits for transfers, so without the GIL.
            py.detach(move || {
                let _ = inner.close();
                let state = (inner.region().is_leaked(), inner.capabilities().revoke);
                drop(inner);
                state
            })
        });
        if leaked || !revokes {
            if let Some(owner) = self.owner.lock().take() {
                if leaked {
                    tracing::warn!(
                        "blockwire transport closed while a transfer could not be stopped: \
                         its buffer stays referenced for the process's lifetime"
                    );
                } else {
                    tracing::debug!(
                        "this backend setting cannot revoke a same-host peer's access: the \
                         transport's buffer stays referenced for the process's lifetime"
                    );
                }
                std::mem::forget(owner);
            }
        }
    }
}
