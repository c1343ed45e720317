//! blockwire for Python: the extension module `blockwire._native`.
//!
//! One class, `transport::PyTransport` (`blockwire.Transport` in Python): the Rust
//! [`blockwire::Transport`] over a buffer the caller owns, with every call that can wait or
//! copy run with the GIL released. The vLLM-shaped adapters (`blockwire.P2PTransport`,
//! `blockwire.ECTransport`, `blockwire.vllm`) are Python, in `blockwire/`, over this class:
//! the contract's rules stay in the Rust crate, once.
//!
//! The library's `tracing` events reach Python's `logging`, under the `blockwire` logger
//! (module `logging`).

mod buffer;
mod errors;
mod future;
mod indices;
mod logging;
mod options;
mod transport;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let handle = logging::install(m)?;
    m.add_class::<transport::PyTransport>()?;
    m.add_class::<LoggingCache>()?;
    m.add("_logging", LoggingCache { handle })?;
    m.add_function(wrap_pyfunction!(backends, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add("MAX_NOTIFICATION_LEN", blockwire::MAX_NOTIFICATION_LEN)?;
    m.add("MAX_NAME_LEN", blockwire::MAX_NAME_LEN)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// The backends compiled into this build, for example `["shm", "ucx", "libfabric"]`.
#[pyfunction]
fn backends() -> Vec<&'static str> {
    blockwire::backends().to_vec()
}

/// The config fingerprint of `config_fields` (a dict), as Rust computes it: the same string
/// as `hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
/// .hexdigest()[:16]`, and `""` for `None` or an empty dict.
#[pyfunction]
#[pyo3(signature = (config_fields=None))]
fn fingerprint(config_fields: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    let fields = options::config_fields(config_fields)?;
    Ok(blockwire::fingerprint::fingerprint(fields.as_ref()))
}

/// What a peer's descriptor (its `get_agent_metadata()` bytes) says: a dict of `backend`,
/// `name`, `base_addr`, `num_blocks`, `block_len` and `fingerprint`. Malformed or altered
/// bytes raise `DescriptorError`.
#[pyfunction]
fn describe<'py>(py: Python<'py>, descriptor: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = blockwire::PeerDescriptor::from_bytes(descriptor)
        .map_err(|e| errors::to_py(blockwire::Error::from(e)))?;
    let out = PyDict::new(py);
    out.set_item("backend", d.backend)?;
    out.set_item("name", d.name)?;
    out.set_item("base_addr", d.base_addr)?;
    out.set_item("num_blocks", d.num_blocks)?;
    out.set_item("block_len", d.block_len)?;
    out.set_item("fingerprint", d.fingerprint)?;
    Ok(out)
}

/// Python's logging levels are cached on the Rust side (a disabled level costs nothing);
/// `reset()` makes it read them again after the program changed them.
#[pyclass(module = "blockwire._native", frozen)]
struct LoggingCache {
    handle: Option<pyo3_log::ResetHandle>,
}

#[pymethods]
impl LoggingCache {
    /// Forgets the cached loggers and levels.
    fn reset(&self) {
        if let Some(h) = &self.handle {
            h.reset();
        }
    }
}
