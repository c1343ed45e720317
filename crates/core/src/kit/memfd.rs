//! Sealed memfds: files in memory whose size nothing can change once made, so a mapping of
//! one can never fault for a page that went away, whatever the process that made it does.
//! Shared regions, the `shm` backend's lease and the close fences are such files.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// The seals a sealed memfd carries: no shrinking (a mapping would fault beyond the new end),
/// no growing, and no more sealing changes.
pub const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd named `name` (as `/proc/<pid>/fd` shows it), of `len` zero bytes, carrying
/// [`SEALS`]; closed on `exec`.
///
/// ```
/// let fd = blockwire_core::kit::sealed_memfd(c"doc", 4096)?;
/// assert!(blockwire_core::kit::is_sealed(&fd));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn sealed_memfd(name: &CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and flags; returns a new descriptor or -1.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{len} bytes do not fit a file size"),
        )
    })?;
    // SAFETY: plain system calls on the descriptor just created, which `fd` keeps open.
    let sized = unsafe {
        libc::ftruncate(fd.as_raw_fd(), size) == 0
            && libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) == 0
    };
    if !sized {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Whether `fd` is a memfd carrying every seal in [`SEALS`] (a file of any other kind is not).
pub fn is_sealed(fd: &impl AsRawFd) -> bool {
    // SAFETY: plain fcntl on a live descriptor; -1 (EINVAL) for anything that is not a memfd.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & SEALS == SEALS
}

/// Maps `len` bytes of `fd` from `offset`, shared, readable and writable, at an address the
/// kernel picks.
///
/// # Safety
///
/// Accesses to the result fault unless `fd`'s file covers `offset + len` for as long as it is
/// mapped (a memfd sealed against shrinking, checked by the caller); the caller unmaps it.
///
/// ```
/// use blockwire_core::kit::{map_shared, sealed_memfd};
/// let fd = sealed_memfd(c"doc", 4096)?;
/// // SAFETY: a sealed memfd of one page, mapped whole, unmapped below.
/// let p = unsafe { map_shared(&fd, 4096, 0)? };
/// // SAFETY: the page mapped above, unmapped once.
/// unsafe { libc::munmap(p.as_ptr().cast(), 4096) };
/// # Ok::<(), std::io::Error>(())
/// ```
pub unsafe fn map_shared(
    fd: &impl AsRawFd,
    len: usize,
    offset: libc::off_t,
) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping with no address hint: no existing memory is touched; whether
    // accesses to it can fault is the caller's contract.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))
}
