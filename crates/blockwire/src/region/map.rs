//! The memory of owned regions: a private anonymous mapping, or a shared mapping of a sealed
//! memfd that peer processes can map too.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

use blockwire_core::kit::{self, advise_huge_pages};
use blockwire_core::{Error, Result};

use super::REGION_ALIGN;

/// Which memory an owned region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memory {
    /// A private anonymous mapping ([`super::Region::new`]).
    Private,
    /// A shared mapping of a sealed memfd ([`super::Region::new_shared`]).
    Shared,
}

/// A mapping made for a region, unmapped on drop unless handed over ([`Mapping::into_parts`]).
pub(super) struct Mapping {
    base: NonNull<u8>,
    len: usize,
    memfd: Option<OwnedFd>,
}

fn os_error(what: String) -> Error {
    Error::Region(format!("{what}: {}", std::io::Error::last_os_error()))
}

impl Mapping {
    /// Maps `len` (non-zero) zeroed bytes of `memory`.
    pub(super) fn new(len: usize, memory: Memory) -> Result<Mapping> {
        let memfd = match memory {
            Memory::Private => None,
            Memory::Shared => Some(sealed_memfd(len)?),
        };
        let (flags, fd) = match &memfd {
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
            Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
        };
        // SAFETY: a fresh mapping with no address hint, of an anonymous range or of a memfd
        // just created and sized to `len`: it aliases nothing in this process; `len` is
        // non-zero (the caller checked).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os_error(format!("mapping {len} bytes failed")));
        }
        let Some(base) = NonNull::new(ptr.cast::<u8>()) else {
            // mmap never returns address 0 without MAP_FIXED; refuse rather than assume.
            return Err(Error::Region(format!("mapping {len} bytes returned null")));
        };
        let mapping = Mapping { base, len, memfd };
        // Mappings start on a page boundary, and a page is a multiple of 4096 bytes on every
        // Linux target; checked rather than assumed, since registration relies on it (the
        // mapping is unmapped by its drop).
        if base.as_ptr() as usize % REGION_ALIGN != 0 {
            return Err(Error::Region(format!(
                "the kernel mapped {len} bytes at {base:p}, not {REGION_ALIGN}-aligned"
            )));
        }
        let what = match memory {
            Memory::Private => "a private region",
            Memory::Shared => "a region in shared memory",
        };
        // SAFETY: `base..base + len` is the mapping made above.
        unsafe { advise_huge_pages(base, len, what) };
        Ok(mapping)
    }

    pub(super) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Hands the mapping over to the region, which unmaps it: its length and its memfd.
    pub(super) fn into_parts(self) -> (usize, Option<OwnedFd>) {
        let mut this = std::mem::ManuallyDrop::new(self);
        (this.len, this.memfd.take())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Mapping::new` with exactly this base and length, not
        // handed to anyone (a mapping handed over is never dropped: `into_parts`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A memfd of `len` bytes, sealed so its size never changes.
fn sealed_memfd(len: usize) -> Result<OwnedFd> {
    kit::sealed_memfd(c"blockwire-region", len)
        .map_err(|e| Error::Region(format!("a memfd for a shared region of {len} bytes: {e}")))
}
