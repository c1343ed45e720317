//! Memory access to a peer process through `process_vm_readv`/`process_vm_writev` (its
//! identity and liveness are `blockwire_core::kit::process`).

use std::io;

use blockwire_core::kit::ProcessWatch;
use blockwire_core::{BackendError, BackendErrorKind};

/// One contiguous piece of a copy: `len` bytes at local address `local` and remote `remote`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece {
    pub(crate) local: usize,
    pub(crate) remote: usize,
    pub(crate) len: usize,
}

/// Most iovecs one `process_vm_*` call takes (`IOV_MAX` on Linux).
pub(crate) const MAX_PIECES: usize = 1024;

/// Copies `pieces` between this process and `proc` (write: local to remote; read: remote to
/// local), resuming after partial transfers.
///
/// # Safety
///
/// Every local piece must lie in memory of this process that is valid for reads (write) or
/// writes (read) for its length, and that no reference aliases while the copy runs.
pub(crate) unsafe fn copy_pieces(
    proc: &ProcessWatch,
    pieces: &[Piece],
    write: bool,
) -> Result<(), BackendError> {
    let mut pieces: Vec<Piece> = pieces.to_vec();
    let mut start = 0;
    while start < pieces.len() {
        let batch = &pieces[start..pieces.len().min(start + MAX_PIECES)];
        let local: Vec<libc::iovec> = batch
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.local as *mut libc::c_void,
                iov_len: p.len,
            })
            .collect();
        let remote: Vec<libc::iovec> = batch
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.remote as *mut libc::c_void,
                iov_len: p.len,
            })
            .collect();
        let count = local.len() as libc::c_ulong;
        // SAFETY: both iovec arrays have `count` valid entries; the local entries are valid
        // per this function's contract; the kernel checks the remote entries against the
        // peer's mappings and reports EFAULT instead of touching anything else.
        let n = unsafe {
            if write {
                libc::process_vm_writev(
                    proc.pid(),
                    local.as_ptr(),
                    count,
                    remote.as_ptr(),
                    count,
                    0,
                )
            } else {
                libc::process_vm_readv(proc.pid(), local.as_ptr(), count, remote.as_ptr(), count, 0)
            }
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            let what = if write { "writing to" } else { "reading from" };
            return Err(classify(&format!("{what} process {}", proc.pid()), &err));
        }
        let mut moved = n as usize;
        if moved == 0 {
            return Err(BackendError::other(format!(
                "process {} accepted no bytes",
                proc.pid()
            )));
        }
        // Skip whole pieces moved, then trim a partly moved one.
        while moved > 0 && start < pieces.len() {
            let p = &mut pieces[start];
            if moved >= p.len {
                moved -= p.len;
                start += 1;
            } else {
                p.local += moved;
                p.remote += moved;
                p.len -= moved;
                moved = 0;
            }
        }
    }
    Ok(())
}

/// Maps an errno from a cross-process access to an error a caller can act on.
pub(crate) fn classify(context: &str, err: &io::Error) -> BackendError {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => BackendError::new(
            BackendErrorKind::PermissionDenied,
            format!(
                "{context}: {err}. The kernel forbids this process to access the peer's memory: \
                 the shm backend needs both processes to run as the same user with ptrace \
                 access allowed (see /proc/sys/kernel/yama/ptrace_scope; scope 1 allows only \
                 ancestors, 2 and 3 forbid it)"
            ),
        ),
        Some(libc::ESRCH) => BackendError::new(
            BackendErrorKind::RemoteDisconnect,
            format!("{context}: the peer process has exited"),
        ),
        Some(libc::EFAULT) => BackendError::new(
            BackendErrorKind::MalformedAddress,
            format!("{context}: the peer's region is not mapped at the address it announced"),
        ),
        _ => BackendError::from_io(context, err),
    }
}
