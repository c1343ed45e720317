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
mod peer_args;
mod results;
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
    m.add_function(wrap_pyfunction!(descriptor_from_nixl, m)?)?;
    m.add_function(wrap_pyfunction!(nixl_agent_metadata, m)?)?;
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

/// A peer's descriptor (bytes for `Transport.add_remote_peer`) from NIXL's own handshake:
/// a plain NIXL agent's `get_agent_metadata()` bytes and the geometry of its one DRAM
/// registration, as vLLM's `NixlTransport` hands them over, plus a config fingerprint (`""`:
/// compatible with every peer). The agent's name is read from the metadata. Raises
/// `DescriptorError` for bytes that are not NIXL metadata or a geometry that cannot be, and
/// `UnsupportedError` in a build without the nixl backend.
#[pyfunction]
#[pyo3(signature = (agent_metadata, base_addr, num_blocks, block_len, fingerprint = ""))]
fn descriptor_from_nixl<'py>(
    py: Python<'py>,
    agent_metadata: &[u8],
    base_addr: u64,
    num_blocks: u32,
    block_len: u64,
    fingerprint: &str,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    #[cfg(feature = "nixl")]
    {
        let d = blockwire::nixl::descriptor_from_nixl(
            agent_metadata,
            base_addr,
            num_blocks,
            block_len,
            fingerprint,
        )
        .map_err(|e| nixl_metadata_error(py, &e))?;
        Ok(pyo3::types::PyBytes::new(py, &d.to_bytes()))
    }
    #[cfg(not(feature = "nixl"))]
    {
        let _ = (
            agent_metadata,
            base_addr,
            num_blocks,
            block_len,
            fingerprint,
        );
        Err(no_nixl(py, "descriptor_from_nixl"))
    }
}

/// The raw NIXL agent metadata inside a nixl transport's descriptor (`Transport.descriptor()`
/// bytes): what a plain NIXL agent's `add_remote_agent` (vLLM's `NixlTransport`
/// `add_remote_peer`, as `agent_metadata`) accepts. Raises `DescriptorError` for malformed
/// bytes or another backend's descriptor, `UnsupportedError` in a build without nixl.
#[pyfunction]
fn nixl_agent_metadata<'py>(
    py: Python<'py>,
    descriptor: &[u8],
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    #[cfg(feature = "nixl")]
    {
        let d = blockwire::PeerDescriptor::from_bytes(descriptor)
            .map_err(|e| errors::to_py(blockwire::Error::from(e)))?;
        let md = blockwire::nixl::agent_metadata(&d).map_err(|e| nixl_metadata_error(py, &e))?;
        Ok(pyo3::types::PyBytes::new(py, md))
    }
    #[cfg(not(feature = "nixl"))]
    {
        let _ = descriptor;
        Err(no_nixl(py, "nixl_agent_metadata"))
    }
}

#[cfg(feature = "nixl")]
fn nixl_metadata_error(py: Python<'_>, e: &blockwire::nixl::MetadataError) -> PyErr {
    // The whole chain, as `Error::report` gives it for the library's own errors.
    errors::raise(
        py,
        "DescriptorError",
        "descriptor",
        blockwire::report_chain(e),
    )
}

#[cfg(not(feature = "nixl"))]
fn no_nixl(py: Python<'_>, what: &str) -> PyErr {
    errors::raise(
        py,
        "UnsupportedError",
        "unsupported",
        format!("{what}: this build of blockwire has no nixl backend (feature `nixl`)"),
    )
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
