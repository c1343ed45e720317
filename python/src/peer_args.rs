//! A peer's descriptor as `add_remote_peer` receives it: the bytes, and the geometry the
//! caller may pass beside them, which must agree.

use blockwire::PeerDescriptor;
use pyo3::prelude::*;

use crate::errors::{IntoPy, raise};

/// The descriptor in `descriptor`, once `base_addr`, `num_blocks` and `block_len` (where
/// given) agree with it: malformed or altered bytes raise `DescriptorError`, a disagreement
/// `GeometryMismatchError` naming each field.
pub(crate) fn descriptor(
    py: Python<'_>,
    descriptor: &[u8],
    base_addr: Option<u64>,
    num_blocks: Option<u32>,
    block_len: Option<u64>,
) -> PyResult<PeerDescriptor> {
    let desc = PeerDescriptor::from_bytes(descriptor)
        .map_err(blockwire::Error::from)
        .py()?;
    let mut wrong = Vec::new();
    if base_addr.is_some_and(|a| a != desc.base_addr) {
        wrong.push(format!(
            "base_addr {:#x} (the metadata says {:#x})",
            base_addr.unwrap_or_default(),
            desc.base_addr
        ));
    }
    if num_blocks.is_some_and(|n| n != desc.num_blocks) {
        wrong.push(format!(
            "num_blocks {} (the metadata says {})",
            num_blocks.unwrap_or_default(),
            desc.num_blocks
        ));
    }
    if block_len.is_some_and(|l| l != desc.block_len) {
        wrong.push(format!(
            "block_len {} (the metadata says {})",
            block_len.unwrap_or_default(),
            desc.block_len
        ));
    }
    if !wrong.is_empty() {
        return Err(raise(
            py,
            "GeometryMismatchError",
            "geometry_mismatch",
            format!(
                "the peer's arguments disagree with its metadata: {}",
                wrong.join(", ")
            ),
        ));
    }
    Ok(desc)
}
