//! The caller's block memory: a 2-D, writable, C-contiguous buffer, kept referenced for as
//! long as a peer may reach it.

use pyo3::prelude::*;

use crate::errors::raise;

/// A buffer's geometry and address, and the objects that keep its memory exported.
pub(crate) struct Buffer {
    pub(crate) base: *mut u8,
    pub(crate) num_blocks: u32,
    pub(crate) block_len: usize,
    /// `(memoryview, ctypes array)`: while referenced, the exporter keeps the memory where it
    /// is (numpy refuses to resize an array with a live export).
    pub(crate) owner: Py<PyAny>,
}

fn invalid(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidBufferError", "buffer", message)
}

/// Checks `view` (anything with the buffer protocol: a memoryview, a numpy array, a
/// bytearray viewed as 2-D) and takes its address the way vLLM's `DataTransport` does
/// (`ctypes.addressof(ctypes.c_char.from_buffer(view))`).
pub(crate) fn take(py: Python<'_>, view: &Bound<'_, PyAny>) -> PyResult<Buffer> {
    let mv = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((view,))
        .map_err(|e| {
            invalid(
                py,
                format!("the block memory must support the buffer protocol: {e}"),
            )
        })?;
    if mv.getattr("readonly")?.extract::<bool>()? {
        return Err(invalid(
            py,
            "the block memory is read-only: peers write into it".into(),
        ));
    }
    if !mv.getattr("c_contiguous")?.extract::<bool>()? {
        return Err(invalid(
            py,
            "the block memory must be C-contiguous (blocks are contiguous rows)".into(),
        ));
    }
    let shape: Vec<usize> = mv.getattr("shape")?.extract()?;
    let itemsize: usize = mv.getattr("itemsize")?.extract()?;
    let [rows, cols] = shape[..] else {
        return Err(invalid(
            py,
            format!(
                "the block memory must be 2-D (num_blocks x block_len bytes), not of shape \
                 {shape:?}: reshape it, for example `array.reshape(num_blocks, -1)`"
            ),
        ));
    };
    let num_blocks = u32::try_from(rows).map_err(|_| {
        invalid(
            py,
            format!("{rows} blocks: at most {} are supported", u32::MAX),
        )
    })?;
    let block_len = cols.checked_mul(itemsize).unwrap_or(0);
    if num_blocks == 0 || block_len == 0 {
        return Err(invalid(
            py,
            format!("the block memory is empty (shape {shape:?}, itemsize {itemsize})"),
        ));
    }
    let ctypes = py.import("ctypes")?;
    let array = ctypes
        .getattr("c_char")?
        .call_method1("from_buffer", (&mv,))?;
    let addr: usize = ctypes.call_method1("addressof", (&array,))?.extract()?;
    let owner = (mv, array).into_pyobject(py)?.into_any().unbind();
    Ok(Buffer {
        base: addr as *mut u8,
        num_blocks,
        block_len,
        owner,
    })
}
