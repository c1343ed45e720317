//! A target's close against peers on its host that copy straight into or out of its memory
//! inside their own posts.
//!
//! Some libraries move same-host data in the initiator's post, with `process_vm_readv` or
//! `process_vm_writev` on the target process: libfabric 1.17's `shm` provider for READs
//! without `FI_DELIVERY_COMPLETE`, UCX's `cma` transport (so NIXL's UCX plugin) for puts and
//! gets; the `shm` backend copies that way itself, or into a mapping of the target's region.
//! Nothing the target does stops such a copy: closing its endpoint or destroying its agent
//! only stops the copies its own progress makes. The two sides therefore agree:
//!
//! - an initiator counts a post in before it checks that the target has not closed, and out
//!   after the post returned, its copy done;
//! - a closing target first marks itself closed, then waits until no post is counted in. A
//!   post that checks later sees the mark and is refused.
//!
//! [`CloseFence`] is that agreement in one page of a sealed memfd that the target and each
//! peer map, with a slot per peer (no system call per post on either side; a peer whose
//! process is gone holds nothing). It is named in the backend's address by pid, descriptor
//! number and a random token ([`FenceRef`]); a peer reopens it through `/proc/<pid>/fd/<n>`
//! ([`PeerFence::open`]), which needs the same permission as `process_vm_readv` into that
//! process: a peer that cannot reopen it (another host, another pid namespace, no ptrace
//! access) cannot copy into the target that way either. A backend that names the memfd in a
//! record of its own duplicates it instead ([`PeerFence::from_duplicate`]). Where the
//! handshake's bytes are another library's (NIXL's agent metadata), the target publishes the
//! reference under those bytes ([`CloseFence::publish`]) and a peer given them finds it
//! ([`FenceRef::published`]).
//!
//! Where the library keeps a file its peers open already (libfabric `shm`'s endpoint file),
//! the same agreement is a `flock` of it: posts hold it shared ([`SharedFlock`]), the close
//! takes it exclusively ([`wait_exclusive`]).
//!
//! A target waits at most [`CLOSE_WAIT`] (a peer stopped inside a post holds it): past it the
//! close goes on, and says so at `error` level.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::BackendError;
use crate::kit::{AddressReader, AddressWriter};

pub use flock::{SharedFlock, open_regular, wait_exclusive};
use page::{FencePage, PageSlot};

mod flock;
mod page;
mod published;

/// How long a closing target waits for the posts that checked before its close to return.
pub const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Naps, from 20 µs doubling up to 2 ms, until `ready` says so, for at most `bound`:
/// `Ok(true)` when ready, `Ok(false)` when the bound passed first, or `ready`'s error. The
/// one wait of a closing target, for its page's posts and for a file's lock.
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

const TOKEN_LEN: usize = 16;

/// Where a peer finds a target's [`CloseFence`]: in the target's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceRef {
    /// The target's process.
    pub pid: u32,
    /// The fence's descriptor number in that process.
    pub fd: u32,
    /// What the fence's page holds after its magic: tells it from any other file that
    /// descriptor could be.
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

/// A target's fence: a page of a sealed memfd holding a magic, a random token, the closed
/// mark and a slot per peer, which its peers map and count their posts in (see the module
/// docs).
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
    /// The page's memfd, which peers reopen or duplicate.
    fd: OwnedFd,
    page: FencePage,
    reference: FenceRef,
    /// Where [`CloseFence::publish`] wrote the reference, removed on drop.
    published: Option<published::Published>,
}

impl CloseFence {
    /// A new fence, not closed.
    pub fn create() -> Result<Self, BackendError> {
        let mut token = [0u8; TOKEN_LEN];
        // SAFETY: `token` is writable for its whole length, which is what is passed.
        let n = unsafe { libc::getrandom(token.as_mut_ptr().cast(), TOKEN_LEN, 0) };
        if n != TOKEN_LEN as isize {
            return Err(BackendError::from_io(
                "getrandom for the close fence's token",
                &io::Error::last_os_error(),
            ));
        }
        let (fd, page) = FencePage::create(token)
            .map_err(|e| BackendError::from_io("a memfd page for the close fence", &e))?;
        let reference = FenceRef {
            pid: std::process::id(),
            fd: fd.as_raw_fd().unsigned_abs(),
            token,
        };
        Ok(CloseFence {
            fd,
            page,
            reference,
            published: None,
        })
    }

    /// Publishes the reference under `key` (bytes the target hands its peers, which have no
    /// room for it: NIXL's agent metadata), for peers on this host to find with
    /// [`FenceRef::published`] until the fence is dropped. Fails, publishing nothing, where a
    /// live fence published under that key already or `/dev/shm` cannot be written. It also
    /// removes the files that processes which ended without dropping their fences left.
    pub fn publish(&mut self, key: &[u8]) -> Result<(), BackendError> {
        drop(self.published.take());
        let published = published::publish(key, &self.reference)
            .map_err(|e| BackendError::from_io("publishing the close fence", &e))?;
        tracing::debug!(path = %published.path().display(), "close fence published");
        self.published = Some(published);
        Ok(())
    }

    /// Where peers find it, for the address.
    pub fn reference(&self) -> FenceRef {
        self.reference
    }

    /// The memfd's descriptor number, for a backend that names it in a record of its own
    /// (peers duplicate it: [`PeerFence::from_duplicate`]).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Marks the target closed, then waits (at most [`CLOSE_WAIT`]) for the peers' posts that
    /// checked before the mark: `Ok(waited)`, or `Err(waited)` when a peer's process still
    /// had one in flight after the bound (logged). Idempotent.
    pub fn close(&self) -> Result<Duration, Duration> {
        let started = Instant::now();
        if self.page.close(CLOSE_WAIT) {
            return Ok(started.elapsed());
        }
        tracing::error!(
            waited = ?started.elapsed(),
            "a peer is still inside a post to this closed transport (its process stopped?): \
             the close goes on, and that post may copy into or out of the region after it"
        );
        Err(started.elapsed())
    }
}

/// A peer's [`CloseFence`] as an initiator holds it around its posts: its slot in the
/// target's page.
pub struct PeerFence {
    slot: PageSlot,
    pid: u32,
}

/// A post's hold on its target's fence; given back when dropped.
pub struct FenceHold(Arc<PeerFence>);

impl Drop for FenceHold {
    fn drop(&mut self) {
        self.0.slot.leave();
    }
}

impl PeerFence {
    /// The target's fence `r` names, reopened and mapped. `None` when this process cannot
    /// reopen it (another host or pid namespace, no ptrace access to the target, a
    /// descriptor that is not the fence): then it cannot copy into the target's memory inside
    /// its posts either; or when every slot of the page belongs to a live peer (logged).
    pub fn open(r: &FenceRef) -> Option<Arc<Self>> {
        let path = format!("/proc/{}/fd/{}", r.pid, r.fd);
        // Read and write: the page is mapped shared and written (the peer's slot). Without
        // waiting: the descriptor is the peer's word, and a device's open may wait (a serial
        // line for its carrier); anything but a sealed memfd is refused below.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) => {
                tracing::debug!(%path, error = %e, "the peer's close fence cannot be reopened");
                return None;
            }
        };
        match FencePage::attach(&file) {
            Ok(page) if page.token() == r.token => Self::holding(page, r.pid).ok(),
            Ok(_) => {
                tracing::debug!(%path, "another close fence than the peer's");
                None
            }
            Err(why) => {
                tracing::debug!(%path, %why, "not the peer's close fence (another host or pid namespace)");
                None
            }
        }
    }

    /// The fence whose memfd `fd` is, duplicated from process `pid` (which names it in a
    /// record of its own, so there is no token to check). `Err(why)` when it is not a close
    /// fence's page, or every slot belongs to a live peer.
    pub fn from_duplicate(fd: &impl AsRawFd, pid: u32) -> Result<Arc<Self>, String> {
        Self::holding(FencePage::attach(fd)?, pid)
    }

    fn holding(page: FencePage, pid: u32) -> Result<Arc<Self>, String> {
        match Arc::new(page).claim() {
            Some(slot) => Ok(Arc::new(PeerFence { slot, pid })),
            None => {
                let why = format!(
                    "every one of the {} slots of the close fence of process {pid} belongs to \
                     a live peer: posts to it are not fenced off its close",
                    page::SLOTS
                );
                tracing::warn!("{why}");
                Err(why)
            }
        }
    }

    /// Holds the fence for a post: `Err(why)` when the target closed, or is closing (the post
    /// must not be made).
    pub fn hold(self: &Arc<Self>) -> Result<FenceHold, String> {
        match self.slot.enter() {
            true => Ok(FenceHold(self.clone())),
            false => Err(format!(
                "the peer's transport in process {} closed",
                self.pid
            )),
        }
    }
}

#[cfg(test)]
mod tests;
