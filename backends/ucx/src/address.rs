//! The ucx backend's address bytes: the UCP worker address, the packed remote key of the
//! whole region, and the region that key covers.

use blockwire_core::{BackendError, BackendErrorKind, RegisteredRegion};

const MAGIC: &[u8; 4] = b"UCX2";
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
        let mut out = Vec::with_capacity(
            12 + RegisteredRegion::ENCODED_LEN + self.worker.len() + self.rkey.len(),
        );
        out.extend_from_slice(MAGIC);
        for part in [&self.worker, &self.rkey] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
        self.region.encode(&mut out);
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, BackendError> {
        let bad = |why: &str| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("ucx address: {why}"),
            )
        };
        let rest = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("bad magic"))?;
        let (worker, rest) = part(rest).ok_or_else(|| bad("worker address truncated"))?;
        let (rkey, rest) = part(rest).ok_or_else(|| bad("remote key truncated"))?;
        let (region, rest) = RegisteredRegion::decode(rest)?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        if worker.is_empty() || rkey.is_empty() {
            return Err(bad("empty worker address or remote key"));
        }
        Ok(UcxAddress {
            worker: worker.to_vec(),
            rkey: rkey.to_vec(),
            region,
        })
    }
}

fn part(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    if len > MAX_PART {
        return None;
    }
    let body = bytes.get(4..4 + len)?;
    Some((body, &bytes[4 + len..]))
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
