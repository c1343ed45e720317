//! The shm backend's address bytes: which process, and which region in it.

use blockwire_core::{BackendError, BackendErrorKind};

const MAGIC: &[u8; 4] = b"SHM1";
/// Encoded length: magic, pid, process start time, region token, identity record address.
pub(crate) const LEN: usize = 4 + 4 + 8 + 8 + 8;

/// Identifies a registered region: the process (pid plus its start time, so a reused pid is
/// never mistaken for the peer), a token unique within that process, and where in that process
/// the backend keeps the record a connecting peer checks the descriptor against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShmAddress {
    pub(crate) pid: u32,
    pub(crate) start_time: u64,
    pub(crate) token: u64,
    pub(crate) identity: u64,
}

impl ShmAddress {
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.start_time.to_le_bytes());
        out.extend_from_slice(&self.token.to_le_bytes());
        out.extend_from_slice(&self.identity.to_le_bytes());
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, BackendError> {
        let malformed = |why: &str| {
            BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!("shm address: {why}"),
            )
        };
        if bytes.len() != LEN {
            return Err(malformed(&format!("{} bytes, expected {LEN}", bytes.len())));
        }
        let (magic, rest) = bytes.split_at(4);
        if magic != MAGIC {
            return Err(malformed("bad magic"));
        }
        let (pid, rest) = rest.split_at(4);
        let (start, rest) = rest.split_at(8);
        let (token, identity) = rest.split_at(8);
        let pid = u32::from_le_bytes(pid.try_into().map_err(|_| malformed("pid"))?);
        if pid == 0 || i32::try_from(pid).is_err() {
            return Err(malformed(&format!("invalid pid {pid}")));
        }
        Ok(ShmAddress {
            pid,
            start_time: u64::from_le_bytes(start.try_into().map_err(|_| malformed("start"))?),
            token: u64::from_le_bytes(token.try_into().map_err(|_| malformed("token"))?),
            identity: u64::from_le_bytes(identity.try_into().map_err(|_| malformed("identity"))?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let a = ShmAddress {
            pid: 42,
            start_time: 7,
            token: 9,
            identity: 0x1000,
        };
        assert_eq!(ShmAddress::from_bytes(&a.to_bytes()), Ok(a));
        assert!(ShmAddress::from_bytes(&a.to_bytes()[..10]).is_err());
        let mut bad = a.to_bytes();
        bad[0] = b'X';
        assert!(ShmAddress::from_bytes(&bad).is_err());
        let zero = ShmAddress { pid: 0, ..a };
        assert!(ShmAddress::from_bytes(&zero.to_bytes()).is_err());
    }
}
