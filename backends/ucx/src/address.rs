//! The ucx backend's address bytes: the UCP worker address, the packed remote key of the
//! whole region, and the region that key covers, sealed ([`AddressWriter::sealed`]).

use blockwire_core::kit::{AddressReader, AddressWriter};
use blockwire_core::{BackendError, RegisteredRegion};

const MAGIC: &[u8; 4] = b"UCX3";
/// Bound on each part, far above what UCX produces (a few hundred bytes).
const MAX_PART: usize = 1 << 20;

/// Decoded address bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UcxAddress {
    pub(crate) worker: Vec<u8>,
    pub(crate) rkey: Vec<u8>,
    /// What `rkey` was packed for.
    pub(crate) region: RegisteredRegion,
}

impl UcxAddress {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        AddressWriter::new(MAGIC)
            .bytes(&self.worker)
            .bytes(&self.rkey)
            .region(&self.region)
            .sealed()
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, BackendError> {
        let mut r = AddressReader::sealed("ucx address", MAGIC, bytes)?;
        let worker = r.bytes("worker address", MAX_PART)?;
        let rkey = r.bytes("remote key", MAX_PART)?;
        let region = r.region()?;
        if worker.is_empty() || rkey.is_empty() {
            return Err(r.bad("empty worker address or remote key"));
        }
        r.finish()?;
        Ok(UcxAddress {
            worker: worker.to_vec(),
            rkey: rkey.to_vec(),
            region,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let a = UcxAddress {
            worker: vec![1, 2, 3],
            rkey: vec![4, 5],
            region: RegisteredRegion {
                base_addr: 4096,
                num_blocks: 2,
                block_len: 64,
            },
        };
        let bytes = a.to_bytes();
        assert_eq!(UcxAddress::from_bytes(&bytes), Ok(a));
        for n in 0..bytes.len() {
            assert!(UcxAddress::from_bytes(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(UcxAddress::from_bytes(&long).is_err());
    }
}
