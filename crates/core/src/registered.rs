//! [`RegisteredRegion`]: what a backend registered, carried in its address, so that connect
//! refuses a descriptor whose region fields disagree with the registration.

use crate::{BackendError, BackendErrorKind, PeerDescriptor, RegionSpan};

/// The region a backend registered: base address, block count and block length, as the
/// backend writes them into its own address bytes. A descriptor carries the same three fields
/// beside the address; a peer's `connect` checks that both agree ([`RegisteredRegion::check`]),
/// so a descriptor whose base, block count or block length was altered (or assembled from
/// mismatched parts) is refused before any block moves, instead of aiming transfers at memory
/// the peer never registered.
///
/// ```
/// use blockwire_core::{PeerDescriptor, RegisteredRegion};
/// let reg = RegisteredRegion { base_addr: 0x10000, num_blocks: 8, block_len: 4096 };
/// let mut bytes = b"ADDR".to_vec();
/// reg.encode(&mut bytes);
/// let (decoded, rest) = RegisteredRegion::decode(&bytes[4..]).expect("20 bytes");
/// assert_eq!((decoded, rest.len()), (reg, 0));
///
/// let desc = PeerDescriptor::new("x", bytes, 0x10000, 8, 4096, "");
/// assert!(reg.check(&desc).is_ok());
/// let shifted = PeerDescriptor::new("x", vec![], 0x11000, 7, 4096, "");
/// assert!(reg.check(&shifted).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisteredRegion {
    /// Address of block 0.
    pub base_addr: u64,
    /// Blocks registered.
    pub num_blocks: u32,
    /// Bytes per block.
    pub block_len: u64,
}

impl RegisteredRegion {
    /// Bytes [`RegisteredRegion::encode`] appends.
    pub const ENCODED_LEN: usize = 20;

    /// The registration of `span`.
    ///
    /// ```
    /// use blockwire_core::{RegionSpan, RegisteredRegion};
    /// let mut mem = vec![0u8; 2 * 64];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 2, 64).unwrap();
    /// assert_eq!(RegisteredRegion::of(&span).block_len, 64);
    /// ```
    pub fn of(span: &RegionSpan) -> Self {
        RegisteredRegion {
            base_addr: span.base_addr(),
            num_blocks: span.num_blocks(),
            block_len: span.block_len() as u64,
        }
    }

    /// Appends the encoding (little-endian base, count, length).
    ///
    /// ```
    /// let mut out = Vec::new();
    /// blockwire_core::RegisteredRegion { base_addr: 1, num_blocks: 2, block_len: 3 }.encode(&mut out);
    /// assert_eq!(out.len(), blockwire_core::RegisteredRegion::ENCODED_LEN);
    /// ```
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.base_addr.to_le_bytes());
        out.extend_from_slice(&self.num_blocks.to_le_bytes());
        out.extend_from_slice(&self.block_len.to_le_bytes());
    }

    /// Decodes the encoding at the start of `bytes`; returns it and the bytes after it.
    /// Untrusted input: a short buffer is a [`BackendErrorKind::MalformedAddress`] error.
    ///
    /// ```
    /// assert!(blockwire_core::RegisteredRegion::decode(&[0; 19]).is_err());
    /// ```
    pub fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), BackendError> {
        let (head, rest) = bytes
            .split_first_chunk::<{ Self::ENCODED_LEN }>()
            .ok_or_else(|| {
                BackendError::new(
                    BackendErrorKind::MalformedAddress,
                    "the address ends inside its registered region",
                )
            })?;
        let (base, tail) = head.split_at(8);
        let (count, len) = tail.split_at(4);
        let mut b8 = [0u8; 8];
        let mut b4 = [0u8; 4];
        b8.copy_from_slice(base);
        let base_addr = u64::from_le_bytes(b8);
        b4.copy_from_slice(count);
        let num_blocks = u32::from_le_bytes(b4);
        b8.copy_from_slice(len);
        let block_len = u64::from_le_bytes(b8);
        Ok((
            RegisteredRegion {
                base_addr,
                num_blocks,
                block_len,
            },
            rest,
        ))
    }

    /// Refuses `desc` unless its base address, block count and block length are exactly the
    /// ones registered ([`BackendErrorKind::MalformedAddress`], naming both).
    ///
    /// ```
    /// use blockwire_core::{BackendErrorKind, PeerDescriptor, RegisteredRegion};
    /// let reg = RegisteredRegion { base_addr: 4096, num_blocks: 4, block_len: 512 };
    /// let grown = PeerDescriptor::new("x", vec![], 4096, 5, 512, "");
    /// let err = reg.check(&grown).unwrap_err();
    /// assert_eq!(err.kind(), BackendErrorKind::MalformedAddress);
    /// assert!(err.message().contains("5 blocks"), "{err}");
    /// ```
    pub fn check(&self, desc: &PeerDescriptor) -> Result<(), BackendError> {
        if desc.base_addr == self.base_addr
            && desc.num_blocks == self.num_blocks
            && desc.block_len == self.block_len
        {
            return Ok(());
        }
        Err(BackendError::new(
            BackendErrorKind::MalformedAddress,
            format!(
                "the descriptor says {} blocks of {} bytes at {:#x}, but the peer registered {} \
                 blocks of {} bytes at {:#x}",
                desc.num_blocks,
                desc.block_len,
                desc.base_addr,
                self.num_blocks,
                self.block_len,
                self.base_addr
            ),
        ))
    }
}
