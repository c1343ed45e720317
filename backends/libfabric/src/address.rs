//! The libfabric backend's address bytes: provider, endpoint name, memory key, addressing
//! mode, and the region the key covers.

use blockwire_core::{BackendError, BackendErrorKind, RegisteredRegion};

const MAGIC: &[u8; 4] = b"OFI2";
/// Bound on the provider and endpoint names (a sockaddr, or the shm provider's
/// `<pid>:<n>:<m>`, is far shorter).
const MAX_PART: usize = 256;

/// Decoded address bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OfiAddress {
    /// Provider name (`shm`, `tcp;ofi_rxm`, ...): peers must use the same one.
    pub(crate) provider: String,
    /// The endpoint's name (`fi_getname`), for `fi_av_insert`.
    pub(crate) name: Vec<u8>,
    /// The region's memory key.
    pub(crate) key: u64,
    /// Remote addresses are virtual addresses (`FI_MR_VIRT_ADDR`), else offsets in the region.
    pub(crate) virt: bool,
    /// What `key` registers.
    pub(crate) region: RegisteredRegion,
}

impl OfiAddress {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.provider.len() + self.name.len());
        out.extend_from_slice(MAGIC);
        for part in [self.provider.as_bytes(), &self.name] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&self.key.to_le_bytes());
        out.push(u8::from(self.virt));
        self.region.encode(&mut out);
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, BackendError> {
        let bad = |why: &str| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("libfabric address: {why}"),
            )
        };
        let rest = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("bad magic"))?;
        let (provider, rest) = part(rest).ok_or_else(|| bad("provider truncated"))?;
        let (name, rest) = part(rest).ok_or_else(|| bad("endpoint name truncated"))?;
        let key = rest
            .get(..8)
            .and_then(|k| k.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| bad("key truncated"))?;
        let virt = match rest.get(8) {
            Some(0) => false,
            Some(1) => true,
            _ => return Err(bad("addressing mode")),
        };
        let (region, rest) = RegisteredRegion::decode(&rest[9..])?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        if name.is_empty() {
            return Err(bad("empty endpoint name"));
        }
        Ok(OfiAddress {
            provider: String::from_utf8(provider.to_vec()).map_err(|_| bad("provider name"))?,
            name: name.to_vec(),
            key,
            virt,
            region,
        })
    }
}

fn part(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    if len > MAX_PART {
        return None;
    }
    Some((bytes.get(4..4 + len)?, bytes.get(4 + len..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let a = OfiAddress {
            provider: "tcp;ofi_rxm".into(),
            name: vec![1, 2, 3, 4],
            key: 77,
            virt: true,
            region: RegisteredRegion {
                base_addr: 8192,
                num_blocks: 3,
                block_len: 4096,
            },
        };
        let bytes = a.to_bytes();
        assert_eq!(OfiAddress::from_bytes(&bytes), Ok(a));
        for n in 0..bytes.len() {
            assert!(OfiAddress::from_bytes(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(OfiAddress::from_bytes(&long).is_err());
    }
}
