//! A transfer's blocks as NIXL takes them: indices into the prepared lists, or descriptor
//! lists of byte runs.

use blockwire_core::kit::ByteRun;
use blockwire_core::{BackendError, BackendErrorKind, BlockIndex};
use nixl_sys::{MemType, XferDescList};

use crate::agent::nixl_error;

/// Block indices as NIXL takes them (`i32`).
pub(crate) fn to_i32(v: &[BlockIndex]) -> Result<Vec<i32>, BackendError> {
    v.iter()
        .map(|&i| {
            i32::try_from(i).map_err(|_| {
                BackendError::new(BackendErrorKind::Other, format!("block {i} too large"))
            })
        })
        .collect()
}

/// The descriptor lists of a transfer's runs: one descriptor per run on each side, at the
/// local region's base `near` and the peer's `far` (both registered as a whole, so NIXL finds
/// every run inside one registration).
pub(crate) fn run_lists(
    near: u64,
    far: usize,
    runs: &[ByteRun],
) -> Result<(XferDescList<'static>, XferDescList<'static>), BackendError> {
    let list = || XferDescList::new(MemType::Dram).map_err(|e| nixl_error("descriptors", e));
    let bad = || BackendError::new(BackendErrorKind::Other, "a run's address overflows");
    let near = usize::try_from(near).map_err(|_| bad())?;
    let (mut l, mut r) = (list()?, list()?);
    for run in runs {
        let remote = usize::try_from(run.remote).map_err(|_| bad())?;
        l.add_desc(near.checked_add(run.local).ok_or_else(bad)?, run.len, 0);
        r.add_desc(far.checked_add(remote).ok_or_else(bad)?, run.len, 0);
    }
    Ok((l, r))
}
