//! [`RegionSpan`]: where the local block memory is, as a backend sees it.

use std::ptr::NonNull;

use crate::{BackendError, BackendErrorKind, BlockIndex};

/// One block of a transfer, as byte offsets: in this region and in the peer's (blocks have the
/// same length on both sides).
///
/// ```
/// let p = blockwire_core::BlockPair { local: 0, remote: 4096 };
/// assert_eq!(p.remote, 4096);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPair {
    /// Offset of the local block in this region.
    pub local: usize,
    /// Offset of the remote block in the peer's region.
    pub remote: u64,
}

/// The address and shape of a transport's local region, handed to a backend when it is
/// opened so it can register the memory (one registration of the whole region).
///
/// A span is only an address: holding one grants nothing. The transport that owns the region
/// guarantees it stays valid until the backend has been dropped.
///
/// ```
/// use blockwire_core::RegionSpan;
/// let mut buf = vec![0u8; 4 * 512];
/// let span = RegionSpan::new(std::ptr::NonNull::new(buf.as_mut_ptr()).unwrap(), 4, 512).unwrap();
/// assert_eq!(span.len(), 2048);
/// assert_eq!(span.block_offset(3), Some(1536));
/// assert_eq!(span.block_offset(4), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSpan {
    base: NonNull<u8>,
    num_blocks: u32,
    block_len: usize,
    shared: Option<SharedMemory>,
}

/// Where a span's bytes live when another process may map them: a sealed memfd (size and seals
/// fixed, so a mapping of it can never fault) and the offset of the span's first byte in it.
/// The memory at the span's base is a shared mapping of exactly those bytes.
///
/// A backend that copies between processes of one host (shm) hands this to a connecting peer,
/// which maps the region and copies straight into it instead of asking the kernel to copy for
/// it; backends that do not need it ignore it. Regions from [`RegionSpan::new`] have none.
///
/// ```
/// use blockwire_core::{RegionSpan, SharedMemory};
/// # use std::ptr::NonNull;
/// let s = RegionSpan::new(NonNull::dangling(), 1, 1).unwrap();
/// assert_eq!(s.shared_memory(), None);
/// let shared = SharedMemory { fd: 7, offset: 0 };
/// assert_eq!(shared.offset, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedMemory {
    /// The memfd, open in this process for as long as the span is in use.
    pub fd: std::os::fd::RawFd,
    /// Offset of the span's first byte in it (a multiple of the page size).
    pub offset: u64,
}

// SAFETY: a span is an address and two sizes; it never dereferences the pointer itself. Every
// access through it is an `unsafe` operation in a backend, argued there against the owning
// transport's guarantee that the memory outlives the backend.
unsafe impl Send for RegionSpan {}
// SAFETY: as for `Send`: shared references to a span only read the address and sizes.
unsafe impl Sync for RegionSpan {}

impl RegionSpan {
    /// A span of `num_blocks` blocks of `block_len` bytes at `base`. `None` when there are no
    /// blocks, blocks are empty, or the size or end address overflows.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// assert!(RegionSpan::new(NonNull::dangling(), 0, 512).is_none());
    /// ```
    pub fn new(base: NonNull<u8>, num_blocks: u32, block_len: usize) -> Option<Self> {
        if num_blocks == 0 || block_len == 0 {
            return None;
        }
        let len = (num_blocks as usize).checked_mul(block_len)?;
        (base.as_ptr() as usize).checked_add(len)?;
        isize::try_from(len).ok()?;
        Some(RegionSpan {
            base,
            num_blocks,
            block_len,
            shared: None,
        })
    }

    /// This span, noting that its bytes are `shared`'s (see [`SharedMemory`]).
    ///
    /// # Safety
    ///
    /// `shared.fd` must be a memfd sealed against shrinking, open for as long as any backend
    /// holds this span, whose bytes from `shared.offset` on are the span's memory: the span's
    /// base is a shared mapping of them, so a process that maps the fd there sees and changes
    /// exactly the span's bytes.
    ///
    /// ```
    /// use blockwire_core::{RegionSpan, SharedMemory};
    /// # use std::ptr::NonNull;
    /// let s = RegionSpan::new(NonNull::dangling(), 1, 1).unwrap();
    /// // SAFETY: only compared here; no backend is opened over this span.
    /// let shared = unsafe { s.with_shared_memory(SharedMemory { fd: 3, offset: 0 }) };
    /// assert_eq!(shared.shared_memory(), Some(SharedMemory { fd: 3, offset: 0 }));
    /// ```
    pub unsafe fn with_shared_memory(mut self, shared: SharedMemory) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The shared memory the span's bytes live in, if the region was allocated there.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// assert!(RegionSpan::new(NonNull::dangling(), 1, 1).unwrap().shared_memory().is_none());
    /// ```
    pub fn shared_memory(&self) -> Option<SharedMemory> {
        self.shared
    }

    /// Address of block 0.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// let s = RegionSpan::new(NonNull::dangling(), 1, 1).unwrap();
    /// assert_eq!(s.base(), NonNull::dangling());
    /// ```
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Address of block 0 as a number (what goes into a descriptor).
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// let s = RegionSpan::new(NonNull::dangling(), 1, 1).unwrap();
    /// assert_eq!(s.base_addr(), 1);
    /// ```
    pub fn base_addr(&self) -> u64 {
        self.base.as_ptr() as usize as u64
    }

    /// Number of blocks.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// assert_eq!(RegionSpan::new(NonNull::dangling(), 3, 1).unwrap().num_blocks(), 3);
    /// ```
    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    /// Bytes per block.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// assert_eq!(RegionSpan::new(NonNull::dangling(), 3, 8).unwrap().block_len(), 8);
    /// ```
    pub fn block_len(&self) -> usize {
        self.block_len
    }

    /// Bytes in the whole region.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// assert_eq!(RegionSpan::new(NonNull::dangling(), 3, 8).unwrap().len(), 24);
    /// ```
    #[allow(clippy::len_without_is_empty)] // a span is never empty
    pub fn len(&self) -> usize {
        self.num_blocks as usize * self.block_len
    }

    /// Byte offset of block `index`, or `None` when it is out of range.
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// let s = RegionSpan::new(NonNull::dangling(), 3, 8).unwrap();
    /// assert_eq!(s.block_offset(2), Some(16));
    /// ```
    pub fn block_offset(&self, index: u32) -> Option<usize> {
        (index < self.num_blocks).then(|| index as usize * self.block_len)
    }

    /// The byte offsets of a transfer's blocks, checked: equal list lengths, every local index
    /// inside this region and every remote index below `remote_blocks`. The generic layer has
    /// validated the lists already; a backend calls this before touching memory anyway, so a
    /// bad list is an error, never an access outside the two regions.
    ///
    /// ```
    /// # use blockwire_core::{BlockPair, RegionSpan};
    /// # use std::ptr::NonNull;
    /// let s = RegionSpan::new(NonNull::dangling(), 4, 100).unwrap();
    /// let pairs = s.block_pairs(&[1, 3], &[0, 7], 8).unwrap();
    /// assert_eq!(pairs, vec![BlockPair { local: 100, remote: 0 }, BlockPair { local: 300, remote: 700 }]);
    /// assert!(s.block_pairs(&[4], &[0], 8).is_err());
    /// assert!(s.block_pairs(&[0], &[8], 8).is_err());
    /// assert!(s.block_pairs(&[0, 1], &[0], 8).is_err());
    /// ```
    pub fn block_pairs(
        &self,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        remote_blocks: u32,
    ) -> Result<Vec<BlockPair>, BackendError> {
        self.check_lists(local, remote, remote_blocks)?;
        Ok(local
            .iter()
            .zip(remote)
            .map(|(&l, &r)| BlockPair {
                local: l as usize * self.block_len,
                remote: u64::from(r) * self.block_len as u64,
            })
            .collect())
    }

    /// Checks a transfer's index lists against this region and a peer's of `remote_blocks`
    /// blocks: equal lengths, every local index below [`num_blocks`](Self::num_blocks), every
    /// remote one below `remote_blocks`. Offsets of checked indices fit (`num_blocks *
    /// block_len` was checked by [`RegionSpan::new`]).
    ///
    /// ```
    /// # use blockwire_core::RegionSpan;
    /// # use std::ptr::NonNull;
    /// let s = RegionSpan::new(NonNull::dangling(), 4, 100).unwrap();
    /// assert!(s.check_lists(&[0, 3], &[7, 1], 8).is_ok());
    /// assert!(s.check_lists(&[4], &[0], 8).is_err());
    /// assert!(s.check_lists(&[0], &[8], 8).is_err());
    /// assert!(s.check_lists(&[0, 1], &[0], 8).is_err());
    /// ```
    pub fn check_lists(
        &self,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        remote_blocks: u32,
    ) -> Result<(), BackendError> {
        let bad = |what: String| BackendError::new(BackendErrorKind::Other, what);
        if local.len() != remote.len() {
            return Err(bad(format!(
                "index lists differ in length: {} local, {} remote",
                local.len(),
                remote.len()
            )));
        }
        if let Some(l) = local.iter().find(|&&l| l >= self.num_blocks) {
            return Err(bad(format!("local block {l} out of range")));
        }
        if let Some(r) = remote.iter().find(|&&r| r >= remote_blocks) {
            return Err(bad(format!("remote block {r} out of range")));
        }
        Ok(())
    }
}
