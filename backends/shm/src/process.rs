//! Processes: identity (pid plus start time), liveness through a pidfd, and memory access
//! through `process_vm_readv`/`process_vm_writev`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use blockwire_core::{BackendError, BackendErrorKind};

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub(crate) fn start_time(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is parenthesized and may contain anything: fields after it
    // start after the last ')'.
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed stat"))?;
    after
        .split_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed stat"))
}

/// This process's pid and start time.
pub(crate) fn current() -> io::Result<(u32, u64)> {
    let pid = std::process::id();
    Ok((pid, start_time(pid)?))
}

/// A peer process, pinned by a pidfd so a reused pid is detected.
pub(crate) struct RemoteProcess {
    pid: libc::pid_t,
    pidfd: OwnedFd,
}

impl RemoteProcess {
    /// Opens process `pid` if it is still the one that started at `start`.
    pub(crate) fn open(pid: u32, start: u64) -> Result<Self, BackendError> {
        let gone = |why: String| BackendError::new(BackendErrorKind::RemoteDisconnect, why);
        let check = || match start_time(pid) {
            Ok(t) if t == start => Ok(()),
            Ok(_) => Err(gone(format!(
                "process {pid} exited (its pid now names another process)"
            ))),
            Err(e) => Err(gone(format!("process {pid} is gone: {e}"))),
        };
        check()?;
        let pid_t = libc::pid_t::try_from(pid).map_err(|_| {
            BackendError::new(BackendErrorKind::MalformedAddress, "pid out of range")
        })?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is
        // passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid_t, 0) };
        if fd < 0 {
            return Err(BackendError::from_io(
                &format!("opening process {pid}"),
                &io::Error::last_os_error(),
            ));
        }
        let fd = i32::try_from(fd).map_err(|_| BackendError::other("pidfd out of range"))?;
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // The pid could have been reused between the first check and pidfd_open.
        check()?;
        Ok(RemoteProcess { pid: pid_t, pidfd })
    }

    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Whether the process has exited (its pidfd became readable).
    pub(crate) fn has_exited(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, timeout 0: poll only reads and writes that struct.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }
}

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
    proc: &RemoteProcess,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_stable() {
        let (pid, t) = current().expect("own stat");
        assert_eq!(start_time(pid).expect("own stat"), t);
    }

    #[test]
    fn a_process_that_never_existed_is_a_disconnect() {
        let err = RemoteProcess::open(i32::MAX as u32 - 1, 1)
            .err()
            .expect("no such pid");
        assert_eq!(err.kind(), BackendErrorKind::RemoteDisconnect);
    }
}
