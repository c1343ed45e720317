//! Regions in shared memory: the region's side ([`SharedRegion`]: the memfd a peer process
//! duplicates) and the peer's ([`PeerMapping`]: that memfd mapped, copied into directly).
//!
//! A region allocated in shared memory (`Region::new_shared` in `blockwire`) is a shared
//! mapping of a memfd sealed against shrinking and growing. Its backend keeps a duplicate of
//! the memfd and names it in the identity record; a peer in another process duplicates it in
//! turn (`pidfd_getfd`, which needs the same ptrace access as `process_vm_writev`), checks the
//! seals and the size, and maps it: its copies are then plain (streaming) stores into memory,
//! with no system call per chunk. Because the size is sealed, the mapping can never fault for a
//! page that disappeared, whatever the region's process does. Each chunk is still counted in
//! on the region's lease (see `lease`), so close revokes mapped peers exactly as it revokes
//! `process_vm_*` ones.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use blockwire_core::kit::{self, ProcessWatch, advise_huge_pages, is_sealed};
use blockwire_core::{BackendError, BackendErrorKind, RegionSpan};

/// What the identity record names when the region is not in shared memory.
pub(crate) const NO_FD: u64 = u64::MAX;

/// The size of the file `fd` refers to.
fn file_size(fd: &OwnedFd) -> Result<u64, BackendError> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into `st`, which is live and writable.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(BackendError::from_io(
            "fstat of a shared region",
            &std::io::Error::last_os_error(),
        ));
    }
    u64::try_from(st.st_size).map_err(|_| BackendError::other("negative file size"))
}

/// Checks that `fd` can back `len` bytes from `offset`: sealed, large enough, page-aligned.
fn check_backing(fd: &OwnedFd, offset: u64, len: usize) -> Result<(), String> {
    if !is_sealed(fd) {
        return Err("not a memfd sealed against resizing".into());
    }
    if offset % 4096 != 0 {
        return Err(format!("offset {offset} is not page-aligned"));
    }
    let size = file_size(fd).map_err(|e| e.message().to_owned())?;
    let end = offset.checked_add(len as u64).ok_or("its end overflows")?;
    if size < end {
        return Err(format!(
            "{size} bytes, fewer than the region's end at {end}"
        ));
    }
    Ok(())
}

/// Maps `len` bytes of `fd` from `offset`, shared, readable and writable, at an address the
/// kernel picks. `what` names the mapping in the error.
///
/// # Safety
///
/// Accesses to the result fault unless `fd`'s file covers `offset + len` for as long as it is
/// mapped (a memfd sealed against shrinking, checked by the caller).
pub(crate) unsafe fn map_shared(
    fd: &OwnedFd,
    len: usize,
    offset: u64,
    what: &str,
) -> Result<NonNull<u8>, BackendError> {
    let off = libc::off_t::try_from(offset).map_err(|_| {
        BackendError::new(BackendErrorKind::MalformedAddress, "offset out of range")
    })?;
    // SAFETY: the caller's contract is `kit::map_shared`'s.
    let base = unsafe { kit::map_shared(fd, len, off) }
        .map_err(|e| BackendError::from_io(&format!("mapping {what}"), &e))?;
    // Copies into a peer's region cross as many pages here as in its own mapping: ask for the
    // huge pages its owner asked for (taken where the kernel allows them for shared memory).
    // SAFETY: `base..base + len` is the mapping made above.
    unsafe { advise_huge_pages(base, len, what) };
    Ok(base)
}

/// The region's side: a duplicate of its memfd, kept open so peers can duplicate it.
pub(crate) struct SharedRegion {
    fd: OwnedFd,
    offset: u64,
}

impl SharedRegion {
    /// The shared memory `span` lives in, if any, checked (a span that names shared memory it
    /// does not live in is refused: peers would map the wrong bytes).
    pub(crate) fn of(span: &RegionSpan) -> Result<Option<SharedRegion>, BackendError> {
        let Some(shared) = span.shared_memory() else {
            return Ok(None);
        };
        // SAFETY: F_DUPFD_CLOEXEC on an fd the span's contract keeps open; the result is a
        // new fd of this process or -1.
        let dup = unsafe { libc::fcntl(shared.fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(BackendError::from_io(
                "duplicating the region's memfd",
                &std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `dup` was just returned by fcntl and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        check_backing(&fd, shared.offset, span.len()).map_err(|why| {
            BackendError::new(
                BackendErrorKind::InvalidOption,
                format!("the region's shared memory (fd {}): {why}", shared.fd),
            )
        })?;
        Ok(Some(SharedRegion {
            fd,
            offset: shared.offset,
        }))
    }

    /// The memfd number a peer duplicates, and the region's offset in it.
    pub(crate) fn named(&self) -> (u64, u64) {
        (self.fd.as_raw_fd() as u64, self.offset)
    }
}

/// The peer's side: a peer region mapped into this process.
pub(crate) struct PeerMapping {
    map: NonNull<u8>,
    len: usize,
    /// The region's base address in its own process (what the descriptor names).
    remote_base: usize,
}

// SAFETY: a mapping is an address range of this process; it is only accessed through raw
// copies (by the copy threads, within a lease entry) and unmapped once, on drop.
unsafe impl Send for PeerMapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for PeerMapping {}

impl PeerMapping {
    /// Maps the region of `proc` at `remote_base`, `len` bytes at `offset` of its memfd `fd`.
    pub(crate) fn attach(
        proc: &ProcessWatch,
        fd: u64,
        offset: u64,
        len: usize,
        remote_base: usize,
    ) -> Result<PeerMapping, BackendError> {
        let bad = |why: String| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("process {}'s shared region: {why}", proc.pid()),
            )
        };
        let fd = i32::try_from(fd).map_err(|_| bad(format!("descriptor {fd} out of range")))?;
        let dup = proc.duplicate_fd(fd)?;
        check_backing(&dup, offset, len).map_err(bad)?;
        // SAFETY: the memfd's size is sealed and covers `offset + len` (checked above), so no
        // access to the mapping can fault.
        let map = unsafe {
            map_shared(
                &dup,
                len,
                offset,
                &format!("process {}'s shared region", proc.pid()),
            )
        }?;
        tracing::debug!(
            pid = proc.pid(),
            bytes = len,
            "shm: mapped a peer process's shared region"
        );
        Ok(PeerMapping {
            map,
            len,
            remote_base,
        })
    }

    /// Where the peer's byte at `remote` (an address in its process, inside its region) is
    /// mapped here.
    pub(crate) fn at(&self, remote: usize) -> *mut u8 {
        let offset = remote - self.remote_base;
        debug_assert!(offset < self.len);
        // SAFETY: `remote` lies in the peer's region (pieces are checked at post against its
        // registered extent), so `offset` is below `len` and the result inside the mapping.
        unsafe { self.map.as_ptr().add(offset) }
    }
}

impl Drop for PeerMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `attach`, unmapped once; the copy threads hold the
        // target (and so this mapping) for as long as they copy.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwire_core::kit::SEALS;

    /// A memfd of `len` bytes, sealed with `seals`.
    fn memfd(len: usize, seals: libc::c_int) -> OwnedFd {
        // SAFETY: a NUL-terminated name and flags; returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: `fd` was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscalls on the fd just created.
        unsafe {
            assert_eq!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t), 0);
            if seals != 0 {
                assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals), 0);
            }
        }
        fd
    }

    fn me() -> ProcessWatch {
        ProcessWatch::open(std::process::id(), None).expect("watch this process")
    }

    #[test]
    fn a_sealed_memfd_is_mapped_and_writes_land_in_its_pages() {
        let len = 4 * 4096;
        let fd = memfd(len, SEALS);
        // The region's own view: a shared mapping of the same memfd.
        // SAFETY: the memfd is sized to `len` and sealed.
        let own = unsafe { map_shared(&fd, len, 0, "the test region") }
            .expect("map")
            .as_ptr()
            .cast::<libc::c_void>();
        let remote_base = 0x10_0000;
        let m = PeerMapping::attach(&me(), fd.as_raw_fd() as u64, 0, len, remote_base)
            .expect("a sealed memfd maps");
        // SAFETY: byte 4097 of the mapping, inside it.
        unsafe { m.at(remote_base + 4097).write(0x5A) };
        // SAFETY: the same byte through the region's own mapping.
        assert_eq!(unsafe { own.cast::<u8>().add(4097).read() }, 0x5A);
        drop(m);
        // SAFETY: the mapping made above, unused any more.
        unsafe { libc::munmap(own, len) };
    }

    #[test]
    fn unsealed_short_or_misaligned_memory_is_refused() {
        let me = me();
        let unsealed = memfd(4096, 0);
        let err = PeerMapping::attach(&me, unsealed.as_raw_fd() as u64, 0, 4096, 0)
            .err()
            .expect("an unsealed memfd could shrink under the mapping");
        assert_eq!(err.kind(), BackendErrorKind::MalformedAddress);
        assert!(err.message().contains("sealed"), "{err}");

        let short = memfd(4096, SEALS);
        let err = PeerMapping::attach(&me, short.as_raw_fd() as u64, 0, 8192, 0)
            .err()
            .expect("a region longer than its memfd");
        assert!(err.message().contains("fewer than"), "{err}");
        let err = PeerMapping::attach(&me, short.as_raw_fd() as u64, 100, 100, 0)
            .err()
            .expect("a misaligned offset");
        assert!(err.message().contains("page-aligned"), "{err}");
        assert!(PeerMapping::attach(&me, u64::MAX, 0, 4096, 0).is_err());

        // A regular file is no memfd.
        let file = std::fs::File::open("/proc/self/stat").expect("a file");
        let err = PeerMapping::attach(&me, file.as_raw_fd() as u64, 0, 1, 0)
            .err()
            .expect("a file that is not a memfd");
        assert!(err.message().contains("sealed"), "{err}");
    }
}
