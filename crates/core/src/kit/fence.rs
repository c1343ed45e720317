//! A target's close against peer processes on its host that copy straight into or out of its
//! memory inside their own posts.
//!
//! Some libraries move same-host data in the initiator's post, with `process_vm_readv` or
//! `process_vm_writev` on the target process: libfabric 1.17's `shm` provider for READs
//! without `FI_DELIVERY_COMPLETE`, UCX's `cma` transport (so NIXL's UCX plugin) for puts and
//! gets. Nothing the target does stops such a copy: closing its endpoint or destroying its
//! agent only stops the copies its own progress makes. The two sides therefore agree through
//! a file both hold open, each with an open of its own (`flock` locks belong to an open file,
//! so the two sides' locks conflict):
//!
//! - an initiator posts under a shared lock of the target's file ([`SharedFlock::acquire`]),
//!   taken before it checks that the target has not closed, and given back after the post;
//! - a closing target first marks itself closed, then takes the lock exclusively
//!   ([`wait_exclusive`]), which it gets only once every post that checked before the mark
//!   has returned, its copy done. A post that checks later sees the mark, or finds the lock
//!   taken (`acquire` says `false`), and is refused.
//!
//! A target waits at most [`CLOSE_WAIT`] (an initiator stopped inside a post keeps its lock):
//! past it the close goes on, and says so at `error` level. Peers in the target's own process
//! hold a count and a flag in memory instead of the lock ([`PeerFence::open`]): the same
//! protocol without a system call per post ([`Admission`], which the `shm` backend's lease
//! keeps in a page its peer processes map).
//!
//! [`CloseFence`] is such a file for a backend that has none: a memfd, named in the backend's
//! address by pid, descriptor number and a random token ([`FenceRef`]); a peer reopens it
//! through `/proc/<pid>/fd/<n>` ([`PeerFence::open`]), which needs the same permission as
//! `process_vm_readv` into that process: a peer that cannot reopen it (another host, another
//! pid namespace, no ptrace access) cannot copy into the target that way either. Where the
//! handshake's bytes are another library's (NIXL's agent metadata), the target publishes the
//! reference under those bytes ([`CloseFence::publish`]) and a peer given them finds it
//! ([`FenceRef::published`]).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::BackendError;
use crate::kit::{AddressReader, AddressWriter};

pub use admission::Admission;
#[cfg(test)]
use flock::try_flock;
pub use flock::{SharedFlock, wait_exclusive};

mod admission;
mod flock;
mod local;
mod published;

/// How long a closing target waits for the posts that checked before its close to return.
pub const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Naps, from 20 µs doubling up to 2 ms, until `ready` says so, for at most `bound`:
/// `Ok(true)` when ready, `Ok(false)` when the bound passed first, or `ready`'s error. The
/// one wait of a closing target, for this process's posts and for other processes' locks.
fn wait_until(bound: Duration, mut ready: impl FnMut() -> io::Result<bool>) -> io::Result<bool> {
    let started = Instant::now();
    let mut nap = Duration::from_micros(20);
    loop {
        if ready()? {
            return Ok(true);
        }
        if started.elapsed() >= bound {
            return Ok(false);
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(2));
    }
}

const MAGIC: &[u8; 8] = b"BWFENCE1";
const TOKEN_LEN: usize = 16;
/// Where the closed mark is: after the magic and the token.
const MARK_AT: u64 = (MAGIC.len() + TOKEN_LEN) as u64;

/// Where a peer finds a target's [`CloseFence`]: in the target's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceRef {
    /// The target's process.
    pub pid: u32,
    /// The fence's descriptor number in that process.
    pub fd: u32,
    /// What the file holds after its magic: tells it from any other file that descriptor
    /// could be.
    pub token: [u8; TOKEN_LEN],
}

impl FenceRef {
    /// Appends `fence` (or its absence) to an address.
    ///
    /// ```
    /// use blockwire_core::kit::{AddressReader, AddressWriter, fence::FenceRef};
    /// let f = FenceRef { pid: 7, fd: 3, token: [1; 16] };
    /// let bytes = FenceRef::write(Some(&f), AddressWriter::new(b"")).finish();
    /// let mut r = AddressReader::new("x", b"", &bytes)?;
    /// assert_eq!(FenceRef::read(&mut r)?, Some(f));
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn write(fence: Option<&FenceRef>, w: AddressWriter) -> AddressWriter {
        match fence {
            None => w.u8(0),
            Some(f) => w
                .u8(1)
                .u64(u64::from(f.pid))
                .u64(u64::from(f.fd))
                .bytes(&f.token),
        }
    }

    /// Reads what [`FenceRef::write`] appended.
    pub fn read(r: &mut AddressReader<'_>) -> Result<Option<FenceRef>, BackendError> {
        match r.u8("close fence")? {
            0 => Ok(None),
            1 => {
                let pid = r.u64("close fence pid")?;
                let fd = r.u64("close fence descriptor")?;
                let token = r.bytes("close fence token", TOKEN_LEN)?;
                let (Ok(pid), Ok(fd), Ok(token)) =
                    (u32::try_from(pid), u32::try_from(fd), token.try_into())
                else {
                    return Err(r.bad("close fence out of range"));
                };
                Ok(Some(FenceRef { pid, fd, token }))
            }
            _ => Err(r.bad("close fence flag is neither 0 nor 1")),
        }
    }

    /// The reference a target of this host published under `key` ([`CloseFence::publish`]),
    /// if any: for a peer whose handshake bytes have no room for it. Reopen it with
    /// [`PeerFence::open`], which checks it names a live fence.
    ///
    /// ```
    /// use blockwire_core::kit::fence::{CloseFence, FenceRef};
    /// let key = format!("the handshake bytes of doc test {}", std::process::id());
    /// assert_eq!(FenceRef::published(key.as_bytes()), None);
    /// let mut target = CloseFence::create()?;
    /// target.publish(key.as_bytes())?;
    /// assert_eq!(FenceRef::published(key.as_bytes()), Some(target.reference()));
    /// drop(target);
    /// assert_eq!(FenceRef::published(key.as_bytes()), None, "it goes with the fence");
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn published(key: &[u8]) -> Option<FenceRef> {
        published::read(key)
    }
}

/// A target's fence: a memfd holding a magic, a random token and the closed mark, which its
/// peers reopen and lock around their posts (see the module docs).
///
/// ```
/// use blockwire_core::kit::fence::{CloseFence, PeerFence};
/// let target = CloseFence::create()?;
/// let peer = PeerFence::open(&target.reference()).expect("this process can reopen it");
/// let post = peer.hold().expect("not closed");
/// drop(post); // the post returned
/// assert!(target.close().is_ok());
/// assert!(peer.hold().is_err(), "a post after the close is refused");
/// # Ok::<(), blockwire_core::BackendError>(())
/// ```
pub struct CloseFence {
    file: File,
    reference: FenceRef,
    /// What peers in this process hold instead of the file's lock.
    local: Arc<Admission>,
    /// Where [`CloseFence::publish`] wrote the reference, removed on drop.
    published: Option<PathBuf>,
}

impl CloseFence {
    /// A new fence, not closed.
    pub fn create() -> Result<Self, BackendError> {
        let fail = |what: &str| BackendError::from_io(what, &io::Error::last_os_error());
        let file = File::from(
            super::sealed_memfd(c"blockwire-close-fence", MARK_AT as usize + 1)
                .map_err(|e| BackendError::from_io("a memfd for the close fence", &e))?,
        );
        let mut token = [0u8; TOKEN_LEN];
        // SAFETY: `token` is writable for its whole length, which is what is passed.
        let n = unsafe { libc::getrandom(token.as_mut_ptr().cast(), TOKEN_LEN, 0) };
        if n != TOKEN_LEN as isize {
            return Err(fail("getrandom for the close fence's token"));
        }
        let mut content = MAGIC.to_vec();
        content.extend_from_slice(&token);
        content.push(0);
        file.write_all_at(&content, 0)
            .map_err(|e| BackendError::from_io("writing the close fence", &e))?;
        let reference = FenceRef {
            pid: std::process::id(),
            fd: file.as_raw_fd().unsigned_abs(),
            token,
        };
        let local = local::register(reference);
        Ok(CloseFence {
            file,
            reference,
            local,
            published: None,
        })
    }

    /// Publishes the reference under `key` (bytes the target hands its peers, which have no
    /// room for it: NIXL's agent metadata), for peers on this host to find with
    /// [`FenceRef::published`] until the fence is dropped. Fails, publishing nothing, where a
    /// file of that key exists already or `/dev/shm` cannot be written.
    pub fn publish(&mut self, key: &[u8]) -> Result<(), BackendError> {
        if let Some(old) = self.published.take() {
            let _ = std::fs::remove_file(old);
        }
        let path = published::publish(key, &self.reference)
            .map_err(|e| BackendError::from_io("publishing the close fence", &e))?;
        tracing::debug!(path = %path.display(), "close fence published");
        self.published = Some(path);
        Ok(())
    }

    /// Where peers find it, for the address.
    pub fn reference(&self) -> FenceRef {
        self.reference
    }

    /// Marks the target closed, then waits (at most [`CLOSE_WAIT`]) for the peers' posts that
    /// checked before the mark: those of this process, then those of others
    /// ([`wait_exclusive`]). Idempotent.
    pub fn close(&self) -> Result<Duration, Duration> {
        let started = Instant::now();
        self.local.mark_closed();
        if let Err(e) = self.file.write_all_at(&[1], MARK_AT) {
            tracing::error!(error = %e, "marking the close fence closed: peers' posts go on");
            return Err(started.elapsed());
        }
        if !self.local.close(CLOSE_WAIT) {
            tracing::error!(
                waited = ?started.elapsed(),
                "a post of this process is still inside a post to this closed transport: the \
                 close goes on, and that post may copy into or out of the region after it"
            );
            return Err(started.elapsed());
        }
        let left = CLOSE_WAIT.saturating_sub(started.elapsed());
        match wait_exclusive(&self.file, left) {
            Ok(_) => Ok(started.elapsed()),
            Err(_) => Err(started.elapsed()),
        }
    }
}

impl Drop for CloseFence {
    fn drop(&mut self) {
        if let Some(path) = self.published.take() {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "removing a published close fence");
            }
        }
    }
}

/// A peer's [`CloseFence`] as an initiator holds it around its posts.
pub struct PeerFence {
    held: Held,
    pid: u32,
}

/// How a peer holds a target's fence.
enum Held {
    /// A target of this process: its count and flag.
    Local(Arc<Admission>),
    /// A target of another process: the file's shared lock and mark.
    Shared(SharedFlock),
}

/// A post's hold on its target's fence; given back when dropped.
pub struct FenceHold(Arc<PeerFence>);

impl Drop for FenceHold {
    fn drop(&mut self) {
        match &self.0.held {
            Held::Local(fence) => fence.leave(),
            Held::Shared(lock) => lock.release(),
        }
    }
}

impl PeerFence {
    /// The target's fence `r` names: its count and flag for a target of this process, else
    /// its file, reopened. `None` when this process cannot reopen it (another host or pid
    /// namespace, no ptrace access to the target, a descriptor that is not the fence): then
    /// it cannot copy into the target's memory inside its posts either.
    pub fn open(r: &FenceRef) -> Option<Arc<Self>> {
        match (r.pid == std::process::id())
            .then(|| local::find(r))
            .flatten()
        {
            Some(fence) => Some(Arc::new(PeerFence {
                held: Held::Local(fence),
                pid: r.pid,
            })),
            None => Self::open_shared(r),
        }
    }

    /// The target's fence `r` names, by its file, reopened (see [`PeerFence::open`]); also
    /// for a target of this process, to test the way other processes hold it.
    pub fn open_shared(r: &FenceRef) -> Option<Arc<Self>> {
        let path = format!("/proc/{}/fd/{}", r.pid, r.fd);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) => {
                tracing::debug!(%path, error = %e, "the peer's close fence cannot be reopened");
                return None;
            }
        };
        let mut head = [0u8; MAGIC.len() + TOKEN_LEN];
        let ours = file.read_exact_at(&mut head, 0).is_ok()
            && head[..MAGIC.len()] == MAGIC[..]
            && head[MAGIC.len()..] == r.token;
        if !ours {
            tracing::debug!(%path, "not the peer's close fence (another host or pid namespace)");
            return None;
        }
        Some(Arc::new(PeerFence {
            held: Held::Shared(SharedFlock::new(file)),
            pid: r.pid,
        }))
    }

    /// Holds the fence for a post: `Err(why)` when the target closed, or is closing (the post
    /// must not be made).
    pub fn hold(self: &Arc<Self>) -> Result<FenceHold, String> {
        let closed = || format!("the peer's transport in process {} closed", self.pid);
        let lock = match &self.held {
            Held::Local(fence) => {
                return match fence.enter() {
                    true => Ok(FenceHold(self.clone())),
                    false => Err(closed()),
                };
            }
            Held::Shared(lock) => lock,
        };
        match lock.acquire() {
            Ok(true) => {}
            Ok(false) => return Err(closed()),
            Err(e) => return Err(format!("locking the peer's close fence: {e}")),
        }
        let hold = FenceHold(self.clone());
        let mut mark = [0u8; 1];
        match lock.file().read_exact_at(&mut mark, MARK_AT) {
            Ok(()) if mark[0] == 0 => Ok(hold),
            Ok(()) => Err(closed()),
            Err(e) => Err(format!("reading the peer's close fence: {e}")),
        }
    }
}

#[cfg(test)]
mod tests;
