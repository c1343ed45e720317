//! [`Region`]: the local block memory a transport registers.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use blockwire_core::{BlockIndex, Error, RegionSpan, Result};

/// Alignment of owned regions: one page, which every registration API accepts.
pub const REGION_ALIGN: usize = 4096;

/// The local block memory: `num_blocks` blocks of `block_len` bytes, contiguous.
///
/// Either owned (page-aligned, zeroed, freed on drop) or borrowed from memory the caller
/// manages, such as a KV cache ([`Region::from_raw_parts`]).
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
    /// `Some` when this region allocated its memory (and frees it on drop).
    owned: Option<Layout>,
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
    /// ```
    /// # use blockwire::Region;
    /// let r = Region::new(4, 1024)?;
    /// assert_eq!(r.len(), 4096);
    /// assert_eq!(r.base_addr() % 4096, 0);
    /// assert!(Region::new(0, 1024).is_err());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn new(num_blocks: u32, block_len: usize) -> Result<Region> {
        let len = (num_blocks as usize)
            .checked_mul(block_len)
            .filter(|&l| l > 0)
            .ok_or_else(|| {
                Error::Region(format!(
                    "{num_blocks} blocks of {block_len} bytes is empty or overflows"
                ))
            })?;
        let layout = Layout::from_size_align(len, REGION_ALIGN)
            .map_err(|e| Error::Region(format!("{len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        let base = NonNull::new(ptr)
            .ok_or_else(|| Error::Region(format!("allocating {len} bytes failed")))?;
        let span = RegionSpan::new(base, num_blocks, block_len)
            .ok_or_else(|| Error::Region(format!("{len} bytes at {ptr:p} overflow")))?;
        Ok(Region {
            span,
            owned: Some(layout),
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
        if let Some(layout) = self.owned {
            if self.leaked.load(Ordering::SeqCst) {
                tracing::warn!(
                    bytes = layout.size(),
                    "region leaked: a transfer may still be writing into it"
                );
                return;
            }
            // SAFETY: the memory was allocated by `alloc_zeroed` with this exact layout in
            // `Region::new` and is freed only here, once.
            unsafe { dealloc(self.span.base().as_ptr(), layout) };
        }
    }
}
