//! [`PeerDescriptor`]: what a peer needs to connect, and its byte encoding.
//!
//! Encoding, version 2, all integers little-endian:
//!
//! | field | bytes |
//! |---|---|
//! | magic `BWPD` | 4 |
//! | format version | u16 |
//! | backend kind length, then kind (ASCII `[a-z0-9_-]`, 1..=32) | u8 + n |
//! | fingerprint length, then fingerprint (lowercase hex, 0..=64) | u8 + n |
//! | transport name length, then name (UTF-8, 0..=128; see [`crate::name_problem`]) | u8 + n |
//! | base address | u64 |
//! | number of blocks | u32 |
//! | block length | u64 |
//! | backend address length, then address | u32 + n (n <= 16 MiB) |
//!
//! Nothing may follow. Decoding treats the bytes as untrusted: every length is checked before
//! it is used, sizes use checked arithmetic, and no input makes it panic.

use crate::BlockIndex;

/// The encoding version this build writes and reads.
pub const FORMAT_VERSION: u16 = 2;

const MAGIC: &[u8; 4] = b"BWPD";
/// Longest backend address accepted (NIXL agent metadata is a few KiB).
const MAX_ADDRESS_LEN: usize = 16 << 20;
const MAX_KIND_LEN: usize = 32;
const MAX_FINGERPRINT_LEN: usize = 64;

/// Why descriptor bytes (or a descriptor built in code) were rejected.
///
/// ```
/// use blockwire_core::{DescriptorError, PeerDescriptor};
/// assert!(matches!(PeerDescriptor::from_bytes(b"BW"), Err(DescriptorError::Truncated { .. })));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// The bytes end before the field named.
    #[error("truncated: {field} needs {needed} bytes at offset {offset}, {available} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Byte offset of the field.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// The bytes do not start with the descriptor magic.
    #[error("not a blockwire peer descriptor (bad magic)")]
    BadMagic,
    /// Written by an incompatible version of the format.
    #[error("unsupported descriptor format version {found} (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The backend kind is empty, too long or not `[a-z0-9_-]`.
    #[error("invalid backend kind {0:?}")]
    BadBackendKind(String),
    /// The fingerprint is too long or not lowercase hex.
    #[error("invalid config fingerprint {0:?}")]
    BadFingerprint(String),
    /// The region has no blocks.
    #[error("the peer's region has zero blocks")]
    ZeroBlocks,
    /// The blocks have length zero.
    #[error("the peer's blocks have length zero")]
    ZeroBlockLen,
    /// `num_blocks * block_len`, or the region's end address, does not fit in 64 bits or in
    /// this machine's address space.
    #[error("region size overflows: {num_blocks} blocks of {block_len} bytes at {base_addr:#x}")]
    SizeOverflow {
        /// Base address.
        base_addr: u64,
        /// Number of blocks.
        num_blocks: u32,
        /// Block length.
        block_len: u64,
    },
    /// The transport name is not acceptable (see [`crate::name_problem`]).
    #[error("invalid transport name: {0}")]
    BadName(String),
    /// The backend address is longer than the format allows.
    #[error("backend address of {0} bytes exceeds the limit")]
    AddressTooLong(usize),
    /// Bytes follow the last field.
    #[error("{0} unexpected bytes after the descriptor")]
    TrailingBytes(usize),
}

/// What a peer needs to connect to a transport: backend kind and address, and the shape and
/// fingerprint of its region.
///
/// Made by `Transport::descriptor()`, sent by the caller's control plane, and given to the
/// other side's `add_remote_peer`.
///
/// ```
/// use blockwire_core::PeerDescriptor;
/// let d = PeerDescriptor::new("shm", vec![1, 2, 3], 0x1000, 16, 4096, "");
/// let bytes = d.to_bytes();
/// assert_eq!(PeerDescriptor::from_bytes(&bytes).unwrap(), d);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerDescriptor {
    /// Backend kind, for example `"shm"`.
    pub backend: String,
    /// Backend-specific address bytes (endpoint address, remote key, agent metadata).
    pub address: Vec<u8>,
    /// Address of block 0 in the peer's address space.
    pub base_addr: u64,
    /// Number of blocks in the peer's region.
    pub num_blocks: u32,
    /// Length of each block in bytes.
    pub block_len: u64,
    /// The peer's config fingerprint; empty means compatible with anyone.
    pub fingerprint: String,
    /// The peer transport's name: the sender its notifications carry. Empty in a descriptor
    /// built without one ([`PeerDescriptor::with_name`]); a transport's always has one.
    pub name: String,
}

impl PeerDescriptor {
    /// A descriptor from its parts (not yet validated; see [`PeerDescriptor::validate`]).
    ///
    /// ```
    /// # use blockwire_core::PeerDescriptor;
    /// let d = PeerDescriptor::new("shm", vec![], 4096, 8, 65536, "0123456789abcdef");
    /// assert_eq!(d.region_len(), Some(8 * 65536));
    /// ```
    pub fn new(
        backend: impl Into<String>,
        address: Vec<u8>,
        base_addr: u64,
        num_blocks: u32,
        block_len: u64,
        fingerprint: impl Into<String>,
    ) -> Self {
        PeerDescriptor {
            backend: backend.into(),
            address,
            base_addr,
            num_blocks,
            block_len,
            fingerprint: fingerprint.into(),
            name: String::new(),
        }
    }

    /// The same descriptor, naming its transport.
    ///
    /// ```
    /// # use blockwire_core::PeerDescriptor;
    /// let d = PeerDescriptor::new("shm", vec![], 4096, 8, 65536, "").with_name("prefill-0");
    /// assert_eq!(PeerDescriptor::from_bytes(&d.to_bytes()).unwrap().name, "prefill-0");
    /// ```
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Bytes of the whole region, if it fits in 64 bits.
    ///
    /// ```
    /// # use blockwire_core::PeerDescriptor;
    /// let d = PeerDescriptor::new("shm", vec![], 0, u32::MAX, u64::MAX, "");
    /// assert_eq!(d.region_len(), None);
    /// ```
    pub fn region_len(&self) -> Option<u64> {
        u64::from(self.num_blocks).checked_mul(self.block_len)
    }

    /// Address of block `index` in the peer's address space, if the index is in range.
    ///
    /// ```
    /// # use blockwire_core::PeerDescriptor;
    /// let d = PeerDescriptor::new("shm", vec![], 0x1000, 4, 0x100, "");
    /// assert_eq!(d.block_addr(2), Some(0x1200));
    /// assert_eq!(d.block_addr(4), None);
    /// ```
    pub fn block_addr(&self, index: BlockIndex) -> Option<u64> {
        if index >= self.num_blocks {
            return None;
        }
        u64::from(index)
            .checked_mul(self.block_len)
            .and_then(|off| self.base_addr.checked_add(off))
    }

    /// Checks everything the decoder checks: kind and fingerprint spelling, at least one block
    /// of at least one byte, and a region whose size and end address fit in 64 bits and in
    /// this machine's `usize`.
    ///
    /// ```
    /// use blockwire_core::{DescriptorError, PeerDescriptor};
    /// let d = PeerDescriptor::new("shm", vec![], 0, 0, 4096, "");
    /// assert_eq!(d.validate(), Err(DescriptorError::ZeroBlocks));
    /// ```
    pub fn validate(&self) -> Result<(), DescriptorError> {
        let kind_ok = !self.backend.is_empty()
            && self.backend.len() <= MAX_KIND_LEN
            && self
                .backend
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !kind_ok {
            return Err(DescriptorError::BadBackendKind(self.backend.clone()));
        }
        let fp_ok = self.fingerprint.len() <= MAX_FINGERPRINT_LEN
            && self
                .fingerprint
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !fp_ok {
            return Err(DescriptorError::BadFingerprint(self.fingerprint.clone()));
        }
        if !self.name.is_empty() {
            if let Some(problem) = crate::name_problem(&self.name) {
                return Err(DescriptorError::BadName(problem));
            }
        }
        if self.num_blocks == 0 {
            return Err(DescriptorError::ZeroBlocks);
        }
        if self.block_len == 0 {
            return Err(DescriptorError::ZeroBlockLen);
        }
        let overflow = DescriptorError::SizeOverflow {
            base_addr: self.base_addr,
            num_blocks: self.num_blocks,
            block_len: self.block_len,
        };
        let len = self.region_len().ok_or_else(|| overflow.clone())?;
        let end = self
            .base_addr
            .checked_add(len)
            .ok_or_else(|| overflow.clone())?;
        if usize::try_from(end).is_err() || usize::try_from(self.block_len).is_err() {
            return Err(overflow);
        }
        if self.address.len() > MAX_ADDRESS_LEN {
            return Err(DescriptorError::AddressTooLong(self.address.len()));
        }
        Ok(())
    }

    /// The versioned byte encoding (see the module docs).
    ///
    /// ```
    /// # use blockwire_core::PeerDescriptor;
    /// let bytes = PeerDescriptor::new("shm", vec![9], 0, 1, 1, "").to_bytes();
    /// assert_eq!(&bytes[..4], b"BWPD");
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40 + self.backend.len() + self.address.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        push_short(&mut out, self.backend.as_bytes());
        push_short(&mut out, self.fingerprint.as_bytes());
        push_short(&mut out, self.name.as_bytes());
        out.extend_from_slice(&self.base_addr.to_le_bytes());
        out.extend_from_slice(&self.num_blocks.to_le_bytes());
        out.extend_from_slice(&self.block_len.to_le_bytes());
        let addr_len = u32::try_from(self.address.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&addr_len.to_le_bytes());
        out.extend_from_slice(&self.address);
        out
    }

    /// Decodes and validates bytes from a peer. Never panics; every malformed input is a
    /// [`DescriptorError`].
    ///
    /// ```
    /// use blockwire_core::{DescriptorError, PeerDescriptor};
    /// let mut bytes = PeerDescriptor::new("shm", vec![], 0, 2, 8, "").to_bytes();
    /// bytes.push(0);
    /// assert_eq!(PeerDescriptor::from_bytes(&bytes), Err(DescriptorError::TrailingBytes(1)));
    /// assert_eq!(PeerDescriptor::from_bytes(b"garbage!"), Err(DescriptorError::BadMagic));
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DescriptorError> {
        let mut r = Reader { bytes, offset: 0 };
        if r.take("magic", 4)? != MAGIC {
            return Err(DescriptorError::BadMagic);
        }
        let version = u16::from_le_bytes(r.array("format version")?);
        if version != FORMAT_VERSION {
            return Err(DescriptorError::UnsupportedVersion { found: version });
        }
        let kind_len = usize::from(r.array::<1>("backend kind length")?[0]);
        let kind = r.take("backend kind", kind_len)?;
        let backend = String::from_utf8_lossy(kind).into_owned();
        let fp_len = usize::from(r.array::<1>("fingerprint length")?[0]);
        let fp = r.take("fingerprint", fp_len)?;
        let fingerprint = String::from_utf8_lossy(fp).into_owned();
        let name_len = usize::from(r.array::<1>("transport name length")?[0]);
        let name = std::str::from_utf8(r.take("transport name", name_len)?)
            .map_err(|e| DescriptorError::BadName(format!("not UTF-8: {e}")))?
            .to_owned();
        let base_addr = u64::from_le_bytes(r.array("base address")?);
        let num_blocks = u32::from_le_bytes(r.array("number of blocks")?);
        let block_len = u64::from_le_bytes(r.array("block length")?);
        let addr_len = u32::from_le_bytes(r.array("address length")?);
        let addr_len = usize::try_from(addr_len).unwrap_or(usize::MAX);
        if addr_len > MAX_ADDRESS_LEN {
            return Err(DescriptorError::AddressTooLong(addr_len));
        }
        let address = r.take("backend address", addr_len)?.to_vec();
        let rest = bytes.len() - r.offset;
        if rest != 0 {
            return Err(DescriptorError::TrailingBytes(rest));
        }
        let desc = PeerDescriptor {
            backend,
            address,
            base_addr,
            num_blocks,
            block_len,
            fingerprint,
            name,
        };
        desc.validate()?;
        Ok(desc)
    }
}

fn push_short(out: &mut Vec<u8>, field: &[u8]) {
    // Kinds, fingerprints and names are at most 128 bytes once validated; a longer one is cut to 255
    // and then fails validation on the other side.
    let len = field.len().min(255);
    out.push(len as u8);
    out.extend_from_slice(&field[..len]);
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DescriptorError> {
        let available = self.bytes.len() - self.offset;
        if n > available {
            return Err(DescriptorError::Truncated {
                field,
                offset: self.offset,
                needed: n,
                available,
            });
        }
        let out = &self.bytes[self.offset..self.offset + n];
        self.offset += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DescriptorError> {
        let slice = self.take(field, N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PeerDescriptor {
        PeerDescriptor::new(
            "shm",
            vec![7; 24],
            0x7f00_0000_0000,
            1024,
            65536,
            "abcdef0123456789",
        )
        .with_name("prefill-0")
    }

    #[test]
    fn round_trip() {
        let d = sample();
        assert_eq!(PeerDescriptor::from_bytes(&d.to_bytes()), Ok(d));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample().to_bytes();
        for n in 0..bytes.len() {
            let r = PeerDescriptor::from_bytes(&bytes[..n]);
            assert!(
                matches!(r, Err(DescriptorError::Truncated { .. })),
                "prefix {n}: {r:?}"
            );
        }
    }

    #[test]
    fn overflowing_sizes_are_rejected() {
        let mut d = sample();
        d.num_blocks = u32::MAX;
        d.block_len = u64::MAX / 2;
        assert!(matches!(
            PeerDescriptor::from_bytes(&d.to_bytes()),
            Err(DescriptorError::SizeOverflow { .. })
        ));
        let mut d = sample();
        d.base_addr = u64::MAX - 10;
        assert!(matches!(
            d.validate(),
            Err(DescriptorError::SizeOverflow { .. })
        ));
    }

    #[test]
    fn bad_fields_are_rejected() {
        let mut d = sample();
        d.fingerprint = "XYZ".into();
        assert!(matches!(
            PeerDescriptor::from_bytes(&d.to_bytes()),
            Err(DescriptorError::BadFingerprint(_))
        ));
        let mut d = sample();
        d.backend = "Sh M".into();
        assert!(matches!(
            d.validate(),
            Err(DescriptorError::BadBackendKind(_))
        ));
        let mut d = sample();
        d.block_len = 0;
        assert_eq!(d.validate(), Err(DescriptorError::ZeroBlockLen));
        let mut bytes = sample().to_bytes();
        bytes[4] = 9;
        assert_eq!(
            PeerDescriptor::from_bytes(&bytes),
            Err(DescriptorError::UnsupportedVersion { found: 9 })
        );
    }

    #[test]
    fn huge_declared_address_is_rejected_without_allocating() {
        let mut bytes = sample().to_bytes();
        let at = bytes.len() - 24 - 4;
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            PeerDescriptor::from_bytes(&bytes),
            Err(DescriptorError::AddressTooLong(_))
        ));
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic sweep of pseudo-random inputs, some starting with the magic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..200usize {
            for _ in 0..20 {
                let mut buf = Vec::with_capacity(len);
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    buf.push(x as u8);
                }
                if len >= 6 && x % 2 == 0 {
                    buf[..4].copy_from_slice(MAGIC);
                    buf[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
                }
                let _ = PeerDescriptor::from_bytes(&buf);
            }
        }
    }
}
