//! [`AddressWriter`] and [`AddressReader`]: a backend's address bytes, written and read back
//! with every length checked, and sealed with a digest of all of them.

use sha2::{Digest, Sha256};

use crate::{BackendError, BackendErrorKind, RegisteredRegion};

/// Bytes of the seal [`AddressWriter::sealed`] appends.
pub const SEAL_LEN: usize = 8;

/// The seal of `bytes`: the first [`SEAL_LEN`] bytes of SHA-256 over a domain tag and them.
fn seal(bytes: &[u8]) -> [u8; SEAL_LEN] {
    let digest = Sha256::new()
        .chain_update(b"blockwire address seal\0")
        .chain_update(bytes)
        .finalize();
    let mut out = [0u8; SEAL_LEN];
    out.copy_from_slice(&digest[..SEAL_LEN]);
    out
}

/// Writes a backend address: a magic (the format's name and version), then fields in order:
/// length-prefixed byte strings, integers, and the [`RegisteredRegion`] the address covers.
/// [`AddressReader`] reads them back in the same order.
///
/// ```
/// use blockwire_core::RegisteredRegion;
/// use blockwire_core::kit::{AddressReader, AddressWriter};
/// let region = RegisteredRegion { base_addr: 4096, num_blocks: 2, block_len: 64 };
/// let bytes = AddressWriter::new(b"DEMO").bytes(b"worker").u64(7).region(&region).finish();
/// let mut r = AddressReader::new("demo address", b"DEMO", &bytes)?;
/// assert_eq!(r.bytes("worker", 64)?, b"worker");
/// assert_eq!(r.u64("key")?, 7);
/// assert_eq!(r.region()?, region);
/// r.finish()?;
/// # Ok::<(), blockwire_core::BackendError>(())
/// ```
#[derive(Debug)]
pub struct AddressWriter(Vec<u8>);

impl AddressWriter {
    /// An address that starts with `magic`.
    ///
    /// ```
    /// assert_eq!(blockwire_core::kit::AddressWriter::new(b"AB").finish(), b"AB");
    /// ```
    pub fn new(magic: &[u8]) -> Self {
        AddressWriter(magic.to_vec())
    }

    /// Appends a byte string, after its length (`u32`, little-endian).
    ///
    /// ```
    /// let a = blockwire_core::kit::AddressWriter::new(b"").bytes(b"xy").finish();
    /// assert_eq!(a, [2, 0, 0, 0, b'x', b'y']);
    /// ```
    pub fn bytes(mut self, part: &[u8]) -> Self {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(part);
        self
    }

    /// Appends a `u64`, little-endian.
    ///
    /// ```
    /// let a = blockwire_core::kit::AddressWriter::new(b"").u64(1).finish();
    /// assert_eq!(a, [1, 0, 0, 0, 0, 0, 0, 0]);
    /// ```
    pub fn u64(mut self, value: u64) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends one byte.
    ///
    /// ```
    /// assert_eq!(blockwire_core::kit::AddressWriter::new(b"").u8(9).finish(), [9]);
    /// ```
    pub fn u8(mut self, value: u8) -> Self {
        self.0.push(value);
        self
    }

    /// Appends the registration the address covers ([`RegisteredRegion::encode`]).
    ///
    /// ```
    /// let r = blockwire_core::RegisteredRegion { base_addr: 1, num_blocks: 2, block_len: 3 };
    /// let a = blockwire_core::kit::AddressWriter::new(b"").region(&r).finish();
    /// assert_eq!(a.len(), blockwire_core::RegisteredRegion::ENCODED_LEN);
    /// ```
    pub fn region(mut self, region: &RegisteredRegion) -> Self {
        region.encode(&mut self.0);
        self
    }

    /// The address bytes.
    ///
    /// ```
    /// assert!(blockwire_core::kit::AddressWriter::new(b"").finish().is_empty());
    /// ```
    pub fn finish(self) -> Vec<u8> {
        self.0
    }

    /// The address bytes followed by their seal: a digest of every byte before it, which
    /// [`AddressReader::sealed`] checks before reading a field. The address's parts then
    /// cannot be altered or recombined without the reader noticing: a peer's opaque parts (a
    /// worker address, a packed remote key) carry no check of their own, and the
    /// [`RegisteredRegion`] beside them is what [`RegisteredRegion::check`] compares a
    /// descriptor's fields with, so a descriptor whose region was changed in both places
    /// consistently would otherwise aim transfers at memory the peer never registered. The
    /// seal is an integrity check, not an authentication: whoever builds an address can seal
    /// it.
    ///
    /// ```
    /// use blockwire_core::kit::{AddressReader, AddressWriter, SEAL_LEN};
    /// let bytes = AddressWriter::new(b"DEMO").u64(7).sealed();
    /// assert_eq!(bytes.len(), 4 + 8 + SEAL_LEN);
    /// assert_eq!(AddressReader::sealed("demo address", b"DEMO", &bytes)?.u64("key")?, 7);
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn sealed(self) -> Vec<u8> {
        let mut bytes = self.0;
        let seal = seal(&bytes);
        bytes.extend_from_slice(&seal);
        bytes
    }
}

/// Reads a backend address that [`AddressWriter`] wrote, treating it as untrusted: a wrong
/// magic, a field cut short, a length over its bound or bytes left over is a
/// [`BackendErrorKind::MalformedAddress`] error naming the field.
///
/// ```
/// use blockwire_core::{BackendErrorKind, kit::{AddressReader, AddressWriter}};
/// let bytes = AddressWriter::new(b"DEMO").bytes(b"worker").finish();
/// let cut = AddressReader::new("demo address", b"DEMO", &bytes[..6])?.bytes("worker", 64);
/// let e = cut.expect_err("truncated");
/// assert_eq!(e.kind(), BackendErrorKind::MalformedAddress);
/// assert_eq!(e.message(), "demo address: worker truncated");
/// assert!(AddressReader::new("demo address", b"ELSE", &bytes).is_err());
/// # Ok::<(), blockwire_core::BackendError>(())
/// ```
#[derive(Debug)]
pub struct AddressReader<'a> {
    what: &'static str,
    rest: &'a [u8],
}

impl<'a> AddressReader<'a> {
    /// A reader of `bytes`, which must start with `magic`; `what` names the address in errors
    /// (`"ucx address"`).
    ///
    /// ```
    /// let r = blockwire_core::kit::AddressReader::new("x", b"M", b"M");
    /// assert!(r.is_ok());
    /// ```
    pub fn new(what: &'static str, magic: &[u8], bytes: &'a [u8]) -> Result<Self, BackendError> {
        let reader = AddressReader { what, rest: bytes };
        match bytes.strip_prefix(magic) {
            Some(rest) => Ok(AddressReader { rest, ..reader }),
            None => Err(reader.bad("bad magic")),
        }
    }

    /// A reader of an address [`AddressWriter::sealed`] wrote: `bytes` must start with
    /// `magic` and end with the seal of every byte before it, else a
    /// [`BackendErrorKind::MalformedAddress`] error (checked before any field is read).
    ///
    /// ```
    /// use blockwire_core::{BackendErrorKind, RegisteredRegion, kit::{AddressReader, AddressWriter}};
    /// let region = RegisteredRegion { base_addr: 4096, num_blocks: 2, block_len: 64 };
    /// let mut bytes = AddressWriter::new(b"DEMO").bytes(b"key").region(&region).sealed();
    /// let mut r = AddressReader::sealed("demo address", b"DEMO", &bytes)?;
    /// assert_eq!((r.bytes("key", 8)?, r.region()?), (&b"key"[..], region));
    /// r.finish()?;
    ///
    /// bytes[19] ^= 1; // 3 blocks, not 2, as the descriptor beside it might also claim
    /// let e = AddressReader::sealed("demo address", b"DEMO", &bytes).expect_err("altered");
    /// assert_eq!(e.kind(), BackendErrorKind::MalformedAddress);
    /// assert!(e.message().contains("seal"), "{e}");
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn sealed(what: &'static str, magic: &[u8], bytes: &'a [u8]) -> Result<Self, BackendError> {
        let reader = Self::new(what, magic, bytes)?;
        if bytes.len() < magic.len() + SEAL_LEN {
            return Err(reader.bad("seal truncated"));
        }
        let (body, tail) = bytes.split_at(bytes.len() - SEAL_LEN);
        if tail != seal(body) {
            return Err(reader.bad(
                "the seal does not match the address bytes (altered, cut, or assembled from \
                 parts of different addresses)",
            ));
        }
        Ok(AddressReader {
            what,
            rest: &body[magic.len()..],
        })
    }

    /// A malformed-address error about this address.
    ///
    /// ```
    /// let r = blockwire_core::kit::AddressReader::new("x address", b"", b"")?;
    /// assert_eq!(r.bad("empty name").message(), "x address: empty name");
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn bad(&self, why: &str) -> BackendError {
        BackendError::new(
            BackendErrorKind::MalformedAddress,
            format!("{}: {why}", self.what),
        )
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], BackendError> {
        if self.rest.len() < n {
            return Err(self.bad(&format!("{field} truncated")));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// Reads a byte string of at most `max` bytes.
    ///
    /// ```
    /// use blockwire_core::kit::{AddressReader, AddressWriter};
    /// let bytes = AddressWriter::new(b"").bytes(&[0; 10]).finish();
    /// assert!(AddressReader::new("x", b"", &bytes)?.bytes("name", 4).is_err());
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn bytes(&mut self, field: &str, max: usize) -> Result<&'a [u8], BackendError> {
        let len = self.take(4, field)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len > max {
            return Err(self.bad(&format!("{field} longer than {max} bytes")));
        }
        self.take(len, field)
    }

    /// Reads a `u64`.
    ///
    /// ```
    /// use blockwire_core::kit::{AddressReader, AddressWriter};
    /// let bytes = AddressWriter::new(b"").u64(5).finish();
    /// assert_eq!(AddressReader::new("x", b"", &bytes)?.u64("key")?, 5);
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn u64(&mut self, field: &str) -> Result<u64, BackendError> {
        let b = self.take(8, field)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    /// Reads one byte.
    ///
    /// ```
    /// use blockwire_core::kit::{AddressReader, AddressWriter};
    /// let bytes = AddressWriter::new(b"").u8(1).finish();
    /// assert_eq!(AddressReader::new("x", b"", &bytes)?.u8("mode")?, 1);
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn u8(&mut self, field: &str) -> Result<u8, BackendError> {
        Ok(self.take(1, field)?[0])
    }

    /// Reads the registration the address covers.
    ///
    /// ```
    /// use blockwire_core::{RegisteredRegion, kit::{AddressReader, AddressWriter}};
    /// let r = RegisteredRegion { base_addr: 1, num_blocks: 2, block_len: 3 };
    /// let bytes = AddressWriter::new(b"").region(&r).finish();
    /// assert_eq!(AddressReader::new("x", b"", &bytes)?.region()?, r);
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn region(&mut self) -> Result<RegisteredRegion, BackendError> {
        let (region, rest) = RegisteredRegion::decode(self.rest)?;
        self.rest = rest;
        Ok(region)
    }

    /// Ends the read: bytes left over are an error.
    ///
    /// ```
    /// let r = blockwire_core::kit::AddressReader::new("x", b"", b"extra")?;
    /// assert!(r.finish().is_err());
    /// # Ok::<(), blockwire_core::BackendError>(())
    /// ```
    pub fn finish(self) -> Result<(), BackendError> {
        match self.rest.is_empty() {
            true => Ok(()),
            false => Err(self.bad("trailing bytes")),
        }
    }
}
