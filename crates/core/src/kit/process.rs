//! Peer processes on this host: identity (pid plus start time) and liveness through a pidfd,
//! for backends whose peer is a process they can name (the shm backend, libfabric's `shm`
//! provider).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::{BackendError, BackendErrorKind};

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`):
/// with the pid, it names one process even after the pid is reused.
///
/// ```
/// let (pid, start) = blockwire_core::kit::process::current()?;
/// assert_eq!(blockwire_core::kit::process::start_time(pid)?, start);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn start_time(pid: u32) -> io::Result<u64> {
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
///
/// ```
/// let (pid, _start) = blockwire_core::kit::process::current()?;
/// assert_eq!(pid, std::process::id());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn current() -> io::Result<(u32, u64)> {
    let pid = std::process::id();
    Ok((pid, start_time(pid)?))
}

/// A peer process, pinned by a pidfd: once opened, a reused pid can no longer be mistaken for
/// it, and [`ProcessWatch::has_exited`] is one non-blocking `poll`.
///
/// ```
/// use blockwire_core::kit::ProcessWatch;
/// let mut child = std::process::Command::new("sleep").arg("30").spawn()?;
/// let peer = ProcessWatch::open(child.id(), None)?;
/// assert!(!peer.has_exited());
/// child.kill()?;
/// child.wait()?;
/// assert!(peer.has_exited());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ProcessWatch {
    pid: libc::pid_t,
    pidfd: OwnedFd,
}

impl ProcessWatch {
    /// Opens process `pid`; with `start`, only if it is still the process that started then
    /// (see [`start_time`]). A process that is gone, or whose pid now names another process,
    /// is a [`BackendErrorKind::RemoteDisconnect`].
    ///
    /// ```
    /// use blockwire_core::{BackendErrorKind, kit::ProcessWatch};
    /// let (pid, start) = blockwire_core::kit::process::current()?;
    /// assert_eq!(ProcessWatch::open(pid, Some(start))?.pid() as u32, pid);
    /// let gone = ProcessWatch::open(pid, Some(start + 1)).err().unwrap();
    /// assert_eq!(gone.kind(), BackendErrorKind::RemoteDisconnect);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(pid: u32, start: Option<u64>) -> Result<Self, BackendError> {
        let gone = |why: String| BackendError::new(BackendErrorKind::RemoteDisconnect, why);
        let check = || match (start_time(pid), start) {
            (Ok(t), Some(s)) if t != s => Err(gone(format!(
                "process {pid} exited (its pid now names another process)"
            ))),
            (Ok(_), _) => Ok(()),
            (Err(e), _) => Err(gone(format!("process {pid} is gone: {e}"))),
        };
        check()?;
        let pid_t = libc::pid_t::try_from(pid).map_err(|_| {
            BackendError::new(BackendErrorKind::MalformedAddress, "pid out of range")
        })?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is
        // passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid_t, 0) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ESRCH) {
                return Err(gone(format!("process {pid} is gone: {err}")));
            }
            return Err(BackendError::from_io(
                &format!("opening process {pid}"),
                &err,
            ));
        }
        let fd = i32::try_from(fd).map_err(|_| BackendError::other("pidfd out of range"))?;
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // The pid could have been reused between the first check and pidfd_open.
        check()?;
        Ok(ProcessWatch { pid: pid_t, pidfd })
    }

    /// The process id.
    ///
    /// ```
    /// let me = blockwire_core::kit::ProcessWatch::open(std::process::id(), None)?;
    /// assert_eq!(me.pid() as u32, std::process::id());
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// A duplicate of the process's file descriptor `fd` (`pidfd_getfd`; the kernel allows
    /// it only with ptrace access to the process, like `process_vm_writev`).
    ///
    /// ```
    /// use std::os::fd::AsRawFd;
    /// let me = blockwire_core::kit::ProcessWatch::open(std::process::id(), None)?;
    /// let file = std::fs::File::open("/proc/self/stat").expect("proc");
    /// let copy = me.duplicate_fd(file.as_raw_fd())?;
    /// assert_ne!(copy.as_raw_fd(), file.as_raw_fd());
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn duplicate_fd(&self, fd: i32) -> Result<OwnedFd, BackendError> {
        // SAFETY: pidfd_getfd takes a pidfd, a file descriptor number of that process and
        // flags, and returns a new fd of this process or -1; no memory is passed.
        let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.pidfd.as_raw_fd(), fd, 0) };
        if got < 0 {
            let err = io::Error::last_os_error();
            return Err(BackendError::from_io(
                &format!("duplicating file descriptor {fd} of process {}", self.pid),
                &err,
            ));
        }
        let got = i32::try_from(got).map_err(|_| BackendError::other("fd out of range"))?;
        // SAFETY: `got` was just returned by pidfd_getfd and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(got) })
    }

    /// Whether the process is dying: it has exited, has begun to exit (the kernel's
    /// `PF_EXITING`), or has a `SIGKILL` pending. Between a kill and the exit, which for a
    /// large process takes milliseconds, it still looks alive to
    /// [`ProcessWatch::has_exited`]. Reads `/proc`: for occasional use.
    ///
    /// ```
    /// let me = blockwire_core::kit::ProcessWatch::open(std::process::id(), None)?;
    /// assert!(!me.is_dying());
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn is_dying(&self) -> bool {
        if self.has_exited() {
            return true;
        }
        // Field 9 of /proc/<pid>/stat (after the parenthesized name): the kernel's task
        // flags, with PF_EXITING set from the start of the exit.
        const PF_EXITING: u64 = 0x4;
        let exiting = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|stat| {
                let after = &stat[stat.rfind(')')? + 1..];
                after.split_whitespace().nth(6)?.parse::<u64>().ok()
            })
            .is_none_or(|flags| flags & PF_EXITING != 0);
        if exiting {
            return true;
        }
        let kill = 1u64 << (libc::SIGKILL - 1);
        std::fs::read_to_string(format!("/proc/{}/status", self.pid)).is_ok_and(|status| {
            status.lines().any(|line| {
                line.strip_prefix("ShdPnd:")
                    .or_else(|| line.strip_prefix("SigPnd:"))
                    .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                    .is_some_and(|mask| mask & kill != 0)
            })
        })
    }

    /// Whether the process has exited (its pidfd became readable: a zombie not yet reaped by
    /// its parent counts as exited). Never blocks.
    ///
    /// ```
    /// let me = blockwire_core::kit::ProcessWatch::open(std::process::id(), None)?;
    /// assert!(!me.has_exited());
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn has_exited(&self) -> bool {
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

impl std::fmt::Debug for ProcessWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessWatch")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_process_is_dying_before_it_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let peer = ProcessWatch::open(child.id(), None).expect("open");
        assert!(!peer.is_dying());
        child.kill().expect("kill");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !peer.is_dying() {
            assert!(std::time::Instant::now() < deadline, "never seen dying");
            std::thread::yield_now();
        }
        child.wait().expect("reap");
        assert!(peer.is_dying());
    }

    #[test]
    fn a_process_that_never_existed_is_a_disconnect() {
        let err = ProcessWatch::open(i32::MAX as u32 - 1, Some(1)).expect_err("no such pid");
        assert_eq!(err.kind(), BackendErrorKind::RemoteDisconnect);
        let err = ProcessWatch::open(i32::MAX as u32 - 1, None).expect_err("no such pid");
        assert_eq!(err.kind(), BackendErrorKind::RemoteDisconnect);
    }
}
