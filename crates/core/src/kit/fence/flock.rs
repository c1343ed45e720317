//! The close fence's agreement as a file lock, for a target whose library keeps a file its
//! peers open already (libfabric `shm`'s endpoint file): their posts hold a shared `flock` of
//! it, its close takes it exclusively (see the parent module).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::wait_until;

/// `flock(2)` without waiting: `Ok(false)` when another open of the file holds a conflicting
/// lock. (`File::try_lock` and friends need Rust 1.89, past the workspace's MSRV.)
pub(super) fn try_flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    // SAFETY: `flock` on a descriptor this `File` owns and keeps open through the call.
    let ret = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
    if ret == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock => Ok(false),
        _ => Err(e),
    }
}

/// Opens `path` for reading if it is a regular file, without following a link or waiting:
/// for a file whose name a peer gave, or that is in `/dev/shm`, where anyone may make names
/// (a FIFO there would otherwise hold the open until someone wrote to it). Another kind of
/// file is `InvalidData`.
///
/// ```
/// use blockwire_core::kit::fence::open_regular;
/// assert!(open_regular("/proc/self/stat".as_ref()).is_ok());
/// assert!(open_regular("/dev/null".as_ref()).is_err(), "a device");
/// assert!(open_regular("/proc/self/exe".as_ref()).is_err(), "a link");
/// ```
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// An initiator's open of a target's file, whose shared lock its posts hold.
///
/// The open is shared by every post to the target (a backend's posting and retry threads),
/// and a lock belongs to the open, not to a thread: the first holder takes it and the last
/// gives it back.
///
/// ```
/// use blockwire_core::kit::fence::{SharedFlock, wait_exclusive};
/// let path = std::env::temp_dir().join(format!("bw-fence-doc-{}", std::process::id()));
/// std::fs::write(&path, b"target")?;
/// let posts = SharedFlock::new(std::fs::File::open(&path)?);
/// assert!(posts.acquire()?, "the target is not closing");
/// posts.release();
/// // The target's close gets the lock at once: no post holds it.
/// assert!(wait_exclusive(&std::fs::File::open(&path)?, std::time::Duration::ZERO).is_ok());
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SharedFlock {
    file: File,
    holders: Mutex<usize>,
}

impl SharedFlock {
    /// Posts to the target whose file `file` is (this side's own open of it).
    pub fn new(file: File) -> Self {
        SharedFlock {
            file,
            holders: Mutex::new(0),
        }
    }

    /// The file, to read the target's mark from.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// One more holder. `Ok(false)` when the target holds the lock: it is closing, and the
    /// caller must not post (nor [`release`](Self::release)).
    pub fn acquire(&self) -> io::Result<bool> {
        let mut holders = self.holders.lock();
        if *holders == 0 && !try_flock(&self.file, libc::LOCK_SH)? {
            return Ok(false);
        }
        *holders += 1;
        Ok(true)
    }

    /// One holder fewer; the last gives the lock back.
    pub fn release(&self) {
        let mut holders = self.holders.lock();
        *holders = holders.saturating_sub(1);
        if *holders == 0 {
            if let Err(e) = try_flock(&self.file, libc::LOCK_UN) {
                tracing::warn!(error = %e, "giving back a close fence's shared lock");
            }
        }
    }
}

/// A closing target's wait (see the module docs): takes `file`'s lock exclusively, which
/// means no peer's post that checked before the target's mark is still running, and gives it
/// back. `Ok(waited)`; `Err(waited)` when a peer still held it after `bound`, or the lock
/// failed (logged).
pub fn wait_exclusive(file: &File, bound: Duration) -> Result<Duration, Duration> {
    let started = Instant::now();
    match wait_until(bound, || try_flock(file, libc::LOCK_EX)) {
        // Given back at once: a later holder sees the mark.
        Ok(true) => {
            if let Err(e) = try_flock(file, libc::LOCK_UN) {
                tracing::warn!(error = %e, "giving back a close fence's lock");
            }
            Ok(started.elapsed())
        }
        Ok(false) => {
            tracing::error!(
                waited = ?started.elapsed(),
                "a peer process is still inside a post to this closed transport: the close \
                 goes on, and that post may copy into or out of the region after it"
            );
            Err(started.elapsed())
        }
        Err(e) => {
            tracing::warn!(error = %e, "locking a close fence: peers' posts not waited for");
            Err(started.elapsed())
        }
    }
}
