//! [`Region`]: the local block memory a transport registers.

mod map;

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use blockwire_core::{BlockIndex, Error, RegionSpan, Result, SharedMemory};

use map::Memory;

/// Alignment of owned regions: one page, which every registration API accepts.
pub const REGION_ALIGN: usize = 4096;

/// The local block memory: `num_blocks` blocks of `block_len` bytes, contiguous.
///
/// Either owned (a private anonymous mapping, [`Region::new`], or shared memory a peer process
/// can map, [`Region::new_shared`]: page-aligned, zeroed, unmapped on drop) or borrowed from
/// memory the caller manages, such as a KV cache ([`Region::from_raw_parts`]).
///
/// Peers write into this memory while the program runs, so the region never hands out a `&[u8]`
/// or `&mut [u8]` to its bytes (that would promise the compiler nobody else changes them).
/// Blocks are read and written through copies: [`Region::write_block`],
/// [`Region::read_block`].
///
/// ```
/// use blockwire::Region;
/// let region = Region::new(8, 4096)?;
/// region.write_block(3, &[7u8; 4096])?;
/// let mut out = vec![0u8; 4096];
/// region.read_block(3, &mut out)?;
/// assert_eq!(out, vec![7u8; 4096]);
/// assert_eq!(region.block(0)?, vec![0u8; 4096]);
/// # Ok::<(), blockwire::Error>(())
/// ```
#[derive(Debug)]
pub struct Region {
    span: RegionSpan,
    /// `Some(length of the mapping)` when this region mapped its memory (and unmaps it on
    /// drop).
    owned: Option<usize>,
    /// The memfd of a region in shared memory ([`Region::new_shared`]), which peers map.
    _memfd: Option<OwnedFd>,
    /// Set when a transport could not stop a transfer in time: the memory is then never freed.
    leaked: AtomicBool,
}

// SAFETY: a region is a pointer to memory that is only ever accessed through raw copies
// (`ptr::copy`), never through references, so moving or sharing the handle between threads
// creates no aliasing references; concurrent copies are what one-sided transfers are.
unsafe impl Send for Region {}
// SAFETY: see `Send`.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates a zeroed, page-aligned region.
    ///
    /// The memory is a private anonymous mapping: the kernel hands out zeroed pages as they are
    /// first touched, so allocating costs the same for any size (no byte is written here), and
    /// a page's zeroing is paid by its first write or read, once. Regions of 2 MiB or more are
    /// marked for transparent huge pages (a hint the kernel may ignore).
    ///
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(4, 1024)?;
    /// assert_eq!(r.len(), 4096);
    /// assert_eq!(r.base_addr() % 4096, 0);
    /// assert!(Region::new(0, 1024).is_err());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn new(num_blocks: u32, block_len: usize) -> Result<Region> {
        Region::allocate(num_blocks, block_len, Memory::Private)
    }

    /// Allocates a zeroed, page-aligned region in shared memory (a sealed memfd), which a
    /// peer in another process of this host can map: the shm backend's peers then copy
    /// straight into it at memory speed, where a [`Region::new`] or caller-provided region is
    /// reached through the kernel (`process_vm_writev`). Other backends treat it like any
    /// region. [`open_allocated`](crate::open_allocated) with `"shm"` allocates this.
    ///
    /// Zeroed pages come lazily, as for [`Region::new`]. It asks for transparent huge pages,
    /// which the kernel gives shared memory only where
    /// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` is `advise` or `always` (with
    /// `never`, 4 KiB pages, which copy slower: figures in the shm backend's docs). Close
    /// revokes every peer's access as for any region. A peer process that mapped it keeps
    /// the pages (not this process's address range) until it removes this transport or
    /// exits, so the memory is returned to the system only then. Unlike a private mapping,
    /// a child made by `fork` shares these pages with this process instead of getting a copy.
    ///
    /// ```
    /// use blockwire::Region;
    /// let r = Region::new_shared(4, 4096)?;
    /// r.write_block(1, &[3u8; 4096])?;
    /// assert_eq!(r.block(1)?, vec![3u8; 4096]);
    /// assert!(r.span().shared_memory().is_some());
    /// assert!(Region::new(4, 4096)?.span().shared_memory().is_none());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn new_shared(num_blocks: u32, block_len: usize) -> Result<Region> {
        Region::allocate(num_blocks, block_len, Memory::Shared)
    }

    fn allocate(num_blocks: u32, block_len: usize, memory: Memory) -> Result<Region> {
        let len = (num_blocks as usize)
            .checked_mul(block_len)
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::Region(format!(
                    "{num_blocks} blocks of {block_len} bytes is empty or overflows"
                ))
            })?;
        let mapping = map::Mapping::new(len, memory)?;
        let Some(span) = RegionSpan::new(mapping.base(), num_blocks, block_len) else {
            return Err(Error::Region(format!(
                "{len} bytes at {:p} overflow",
                mapping.base()
            )));
        };
        let (len, memfd) = mapping.into_parts();
        let span = match &memfd {
            // SAFETY: `memfd` is sealed against shrinking (`Mapping::new`), kept open in the
            // region for as long as the region lives (which outlives every backend over its
            // span), and the span's base is a shared mapping of its bytes from offset 0.
            Some(fd) => unsafe {
                span.with_shared_memory(SharedMemory {
                    fd: fd.as_raw_fd(),
                    offset: 0,
                })
            },
            None => span,
        };
        Ok(Region {
            span,
            owned: Some(len),
            _memfd: memfd,
            leaked: AtomicBool::new(false),
        })
    }

    /// A region over memory the caller manages (a KV cache, a pinned buffer). Never freed by
    /// blockwire.
    ///
    /// # Safety
    ///
    /// `base` must point to `num_blocks * block_len` bytes that stay allocated and are not
    /// unmapped until the transport using this region has been closed or dropped. Close
    /// revokes every peer's access before it returns: afterwards neither this process's
    /// backend nor any peer, in this process or another, touches the memory, so it may be
    /// freed. Two exceptions keep it needed longer:
    ///
    /// - a close that had to be forced (a transfer still running at the close timeout, logged
    ///   as a warning): the memory must then stay allocated for the process's lifetime;
    /// - a backend whose [`Capabilities::revoke`](blockwire_core::Capabilities::revoke) is
    ///   false in its setting (a same-host peer copies straight into the region and nothing
    ///   here can stop it): the memory must stay allocated until every peer has removed this
    ///   transport.
    ///
    /// Other code may read and write the bytes concurrently only through raw pointers, never
    /// through references.
    ///
    /// ```
    /// use blockwire::Region;
    /// let mut cache = vec![0u8; 16 * 256];
    /// // SAFETY: `cache` outlives `region` and is not touched through references meanwhile.
    /// let region = unsafe { Region::from_raw_parts(cache.as_mut_ptr(), 16, 256)? };
    /// region.write_block(15, &[1u8; 256])?;
    /// drop(region);
    /// assert_eq!(cache[15 * 256], 1);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub unsafe fn from_raw_parts(
        base: *mut u8,
        num_blocks: u32,
        block_len: usize,
    ) -> Result<Region> {
        let base = NonNull::new(base).ok_or_else(|| Error::Region("null base pointer".into()))?;
        let span = RegionSpan::new(base, num_blocks, block_len).ok_or_else(|| {
            Error::Region(format!(
                "{num_blocks} blocks of {block_len} bytes at {base:p} is empty or overflows"
            ))
        })?;
        Ok(Region {
            span,
            owned: None,
            _memfd: None,
            leaked: AtomicBool::new(false),
        })
    }

    /// The address and shape, as a backend sees it.
    ///
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(2, 64)?;
    /// assert_eq!(r.span().num_blocks(), 2);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn span(&self) -> RegionSpan {
        self.span
    }

    /// Number of blocks.
    ///
    /// ```
    /// # use blockwire::Region;
    /// assert_eq!(Region::new(2, 64)?.num_blocks(), 2);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn num_blocks(&self) -> u32 {
        self.span.num_blocks()
    }

    /// Bytes per block.
    ///
    /// ```
    /// # use blockwire::Region;
    /// assert_eq!(Region::new(2, 64)?.block_len(), 64);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn block_len(&self) -> usize {
        self.span.block_len()
    }

    /// Bytes in the region.
    ///
    /// ```
    /// # use blockwire::Region;
    /// assert_eq!(Region::new(2, 64)?.len(), 128);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // a region is never empty
    pub fn len(&self) -> usize {
        self.span.len()
    }

    /// Address of block 0.
    ///
    /// ```
    /// # use blockwire::Region;
    /// assert_ne!(Region::new(1, 64)?.base_addr(), 0);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn base_addr(&self) -> u64 {
        self.span.base_addr()
    }

    fn block_ptr(&self, index: BlockIndex, len: usize) -> Result<*mut u8> {
        let offset = self.span.block_offset(index).ok_or_else(|| {
            Error::Region(format!(
                "block {index} out of range ({} blocks)",
                self.num_blocks()
            ))
        })?;
        if len != self.block_len() {
            return Err(Error::Region(format!(
                "buffer of {len} bytes for a block of {} bytes",
                self.block_len()
            )));
        }
        // SAFETY: `offset` is less than the region's length (`block_offset` checked the index),
        // so the result stays inside the region's allocation.
        Ok(unsafe { self.span.base().as_ptr().add(offset) })
    }

    /// Copies `data` (exactly one block) into block `index`.
    ///
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(2, 4)?;
    /// r.write_block(1, b"abcd")?;
    /// assert!(r.write_block(2, b"abcd").is_err());
    /// assert!(r.write_block(0, b"abc").is_err());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn write_block(&self, index: BlockIndex, data: &[u8]) -> Result<()> {
        let dst = self.block_ptr(index, data.len())?;
        // SAFETY: `dst` is valid for `data.len()` (= block_len) bytes inside the region;
        // `data` is a caller's slice, which cannot overlap the region because the region never
        // hands out references to its bytes. A raw copy creates no reference to the region.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Copies block `index` into `out` (exactly one block long).
    ///
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(2, 4)?;
    /// let mut out = [9u8; 4];
    /// r.read_block(0, &mut out)?;
    /// assert_eq!(out, [0; 4]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn read_block(&self, index: BlockIndex, out: &mut [u8]) -> Result<()> {
        let src = self.block_ptr(index, out.len())?;
        // SAFETY: as in `write_block`, with source and destination swapped.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Block `index` as a new vector.
    ///
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(1, 3)?;
    /// r.fill_block(0, 5)?;
    /// assert_eq!(r.block(0)?, vec![5, 5, 5]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn block(&self, index: BlockIndex) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.block_len()];
        self.read_block(index, &mut out)?;
        Ok(out)
    }

    /// Sets every byte of block `index` to `byte`.
    ///
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(1, 3)?;
    /// r.fill_block(0, 1)?;
    /// assert_eq!(r.block(0)?, vec![1, 1, 1]);
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn fill_block(&self, index: BlockIndex, byte: u8) -> Result<()> {
        let dst = self.block_ptr(index, self.block_len())?;
        // SAFETY: `dst` is valid for one block inside the region; raw write, no reference.
        unsafe { std::ptr::write_bytes(dst, byte, self.block_len()) };
        Ok(())
    }

    /// Whether a transport using this region could not stop a transfer before its close
    /// returned (a forced close, logged as a warning). The memory must then stay allocated for
    /// the process's lifetime: an owned region is never freed, and the owner of borrowed memory
    /// ([`Region::from_raw_parts`]) must keep it, as the Python binding keeps its buffer.
    ///
    /// ```
    /// # use blockwire::Region;
    /// assert!(!Region::new(2, 64)?.is_leaked());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn is_leaked(&self) -> bool {
        self.leaked.load(Ordering::SeqCst)
    }

    /// Never free this memory (used when a transfer could not be stopped before close).
    pub(crate) fn leak(&self) {
        self.leaked.store(true, Ordering::SeqCst);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(len) = self.owned {
            if self.leaked.load(Ordering::SeqCst) {
                tracing::warn!(
                    bytes = len,
                    "region leaked: a transfer may still be writing into it"
                );
                return;
            }
            // SAFETY: the mapping was made by `mmap` with exactly this base and length in
            // `Region::new` and is unmapped only here, once; no transfer touches it any more
            // (a transport that could not stop one marked the region leaked, handled above).
            let rc = unsafe { libc::munmap(self.span.base().as_ptr().cast(), len) };
            if rc != 0 {
                tracing::error!(
                    bytes = len,
                    error = %std::io::Error::last_os_error(),
                    "region: unmapping failed; the memory stays mapped"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether every page of `[base, base + len)` is mapped in this process (`mincore` fails
    /// with ENOMEM on a range with an unmapped page).
    fn mapped(base: u64, len: usize) -> bool {
        let pages = len.div_ceil(4096);
        let mut residency = vec![0u8; pages + 16];
        // SAFETY: `mincore` only reads the page tables of the range and writes one byte per
        // page into `residency`, which holds more than that many.
        let rc = unsafe { libc::mincore(base as *mut libc::c_void, len, residency.as_mut_ptr()) };
        rc == 0
    }

    #[test]
    fn a_new_region_reads_zero_everywhere_and_keeps_what_is_written() {
        let r = Region::new(96, 64 << 10).expect("region"); // 6 MiB: huge-page hinted
        assert_eq!(r.base_addr() % REGION_ALIGN as u64, 0);
        for i in 0..r.num_blocks() {
            assert!(
                r.block(i).expect("block").iter().all(|&b| b == 0),
                "block {i}"
            );
        }
        r.fill_block(95, 0xAB).expect("fill");
        r.write_block(0, &vec![7u8; 64 << 10]).expect("write");
        assert!(r.block(95).expect("block").iter().all(|&b| b == 0xAB));
        assert!(r.block(0).expect("block").iter().all(|&b| b == 7));
        assert!(r.block(1).expect("block").iter().all(|&b| b == 0));
    }

    #[test]
    fn dropping_a_region_unmaps_it_unless_it_was_leaked() {
        let len = 64 << 20;
        let r = Region::new(64, 1 << 20).expect("region");
        let base = r.base_addr();
        r.fill_block(3, 1).expect("fill");
        assert!(mapped(base, len));
        drop(r);
        // Nothing else in this process maps a 64 MiB range exactly there in between.
        assert!(!mapped(base, len), "the region's mapping survived its drop");

        let r = Region::new(16, 4096).expect("region");
        let base = r.base_addr();
        r.leak();
        assert!(r.is_leaked());
        drop(r);
        assert!(mapped(base, 16 * 4096), "a leaked region was unmapped");
        // SAFETY: the leaked mapping above, which nothing uses any more.
        unsafe { libc::munmap(base as *mut libc::c_void, 16 * 4096) };
    }

    #[test]
    fn a_shared_region_is_a_sealed_memfd_zeroed_and_unmapped_on_drop() {
        let len = 8 << 20;
        let r = Region::new_shared(8, 1 << 20).expect("shared region");
        let shared = r.span().shared_memory().expect("names its memfd");
        assert_eq!(shared.offset, 0);
        // SAFETY: fcntl/fstat on the region's own fd, open while `r` lives.
        let (seals, size) = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(shared.fd, &mut st), 0);
            (libc::fcntl(shared.fd, libc::F_GET_SEALS), st.st_size)
        };
        assert_eq!(size as usize, len);
        assert_ne!(seals & libc::F_SEAL_SHRINK, 0, "seals {seals:#x}");
        assert_ne!(seals & libc::F_SEAL_SEAL, 0, "seals {seals:#x}");
        assert!(r.block(5).expect("block").iter().all(|&b| b == 0));
        r.fill_block(5, 9).expect("fill");
        assert!(r.block(5).expect("block").iter().all(|&b| b == 9));
        let base = r.base_addr();
        drop(r);
        assert!(
            !mapped(base, len),
            "the shared region's mapping survived its drop"
        );
    }
}
