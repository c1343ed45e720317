//! The ucx backend's address bytes: the UCP worker address, the packed remote key of the
//! whole region, the worker's identity (the random number its handler answers a connect's
//! check with, `crate::notify::hello`) and whether it answers, its process (pid and start
//! time: a cut tells from it whether the peer can still answer, `UcxPeer::origin`), and the
//! region the key covers (last, as in every backend's address), sealed
//! ([`AddressWriter::sealed`]).

use blockwire_core::kit::{AddressReader, AddressWriter};
use blockwire_core::{BackendError, RegisteredRegion};

const MAGIC: &[u8; 4] = b"UCX5";
/// Bound on each part, far above what UCX produces (a few hundred bytes).
const MAX_PART: usize = 1 << 20;

/// Decoded address bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UcxAddress {
    pub(crate) worker: Vec<u8>,
    pub(crate) rkey: Vec<u8>,
    /// What `rkey` was packed for.
    pub(crate) region: RegisteredRegion,
    /// The worker's identity: connect checks that the worker at `worker` has it before the
    /// first put, so a descriptor of a closed transport whose address another worker took
    /// moves nothing.
    pub(crate) identity: u64,
    /// The worker answers that check unprompted (its backend has a progress thread); one
    /// that progresses only when its caller polls (`progress=caller`) is not checked.
    pub(crate) answers: bool,
    /// The worker's process: its pid (0: unknown) and start time
    /// (`blockwire_core::kit::process::start_time`), which with the pid names it even after
    /// the pid is reused.
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl UcxAddress {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        AddressWriter::new(MAGIC)
            .bytes(&self.worker)
            .bytes(&self.rkey)
            .u64(self.identity)
            .u8(u8::from(self.answers))
            .u64(u64::from(self.pid))
            .u64(self.start)
            .region(&self.region)
            .sealed()
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, BackendError> {
        let mut r = AddressReader::sealed("ucx address", MAGIC, bytes)?;
        let worker = r.bytes("worker address", MAX_PART)?;
        let rkey = r.bytes("remote key", MAX_PART)?;
        let identity = r.u64("identity")?;
        let answers = match r.u8("answers")? {
            0 => false,
            1 => true,
            _ => return Err(r.bad("the answers flag is neither 0 nor 1")),
        };
        let pid = r.u64("pid")?;
        let pid = u32::try_from(pid).map_err(|_| r.bad("the pid is out of range"))?;
        let start = r.u64("process start time")?;
        let region = r.region()?;
        if worker.is_empty() || rkey.is_empty() {
            return Err(r.bad("empty worker address or remote key"));
        }
        r.finish()?;
        Ok(UcxAddress {
            worker: worker.to_vec(),
            rkey: rkey.to_vec(),
            region,
            identity,
            answers,
            pid,
            start,
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
            identity: 0x0123_4567_89ab_cdef,
            answers: true,
            pid: 4242,
            start: 99,
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
