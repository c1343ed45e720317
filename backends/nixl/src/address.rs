//! The address bytes a NIXL backend puts in its descriptor ([`AddressWriter`]): magic `NXL4`,
//! the agent's name, the region it registered, its close fence ([`FenceRef`], absent for a
//! plain NIXL agent's), then the agent's metadata (`get_local_md`), sealed.
//!
//! The name is there so that connecting can tell, before NIXL loads anything, that the peer's
//! agent has this agent's name or the name of another connected peer (NIXL refuses both, with
//! a message that does not say why); after loading, the name NIXL read from the metadata must
//! be the same. The bytes come from a peer: [`AddressReader`] checks every length.

use blockwire_core::kit::fence::FenceRef;
use blockwire_core::kit::{AddressReader, AddressWriter};
use blockwire_core::{BackendError, MAX_NAME_LEN, RegisteredRegion};

const MAGIC: &[u8; 4] = b"NXL4";

/// The longest agent metadata accepted from a peer (NIXL's is a few KiB per backend and
/// registration).
const MAX_METADATA: usize = 16 << 20;

/// A decoded address.
pub(crate) struct Address<'a> {
    /// The peer's agent name: the sender its notifications carry.
    pub(crate) agent: &'a str,
    /// The region the peer registered.
    pub(crate) region: RegisteredRegion,
    /// Where the peer's close fence is (`blockwire_core::kit::fence`).
    pub(crate) fence: Option<FenceRef>,
    /// The peer agent's metadata, for `load_remote_md`.
    pub(crate) metadata: &'a [u8],
}

/// The address of the agent `agent` over `region`, with its close fence and metadata.
pub(crate) fn encode(
    agent: &str,
    region: &RegisteredRegion,
    fence: Option<&FenceRef>,
    metadata: &[u8],
) -> Vec<u8> {
    let w = AddressWriter::new(MAGIC)
        .bytes(agent.as_bytes())
        .region(region);
    FenceRef::write(fence, w).bytes(metadata).sealed()
}

/// Decodes a peer's address.
pub(crate) fn decode(bytes: &[u8]) -> Result<Address<'_>, BackendError> {
    let mut r = AddressReader::sealed("nixl address", MAGIC, bytes)?;
    let name = r.bytes("agent name", MAX_NAME_LEN)?;
    let agent = std::str::from_utf8(name).map_err(|_| r.bad("agent name is not UTF-8"))?;
    if agent.is_empty() || agent.contains('\0') {
        return Err(r.bad("agent name is empty or holds a NUL byte"));
    }
    let region = r.region()?;
    let fence = FenceRef::read(&mut r)?;
    let metadata = r.bytes("agent metadata", MAX_METADATA)?;
    if metadata.is_empty() {
        return Err(r.bad("empty NIXL agent metadata"));
    }
    r.finish()?;
    Ok(Address {
        agent,
        region,
        fence,
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGION: RegisteredRegion = RegisteredRegion {
        base_addr: 0x1000,
        num_blocks: 4,
        block_len: 64,
    };

    const FENCE: FenceRef = FenceRef {
        pid: 42,
        fd: 7,
        token: [3; 16],
    };

    #[test]
    fn round_trip() {
        let bytes = encode("decode-0", &REGION, Some(&FENCE), b"md");
        let a = decode(&bytes).expect("decodes");
        assert_eq!(a.agent, "decode-0");
        assert_eq!(a.region, REGION);
        assert_eq!(a.fence, Some(FENCE));
        assert_eq!(a.metadata, b"md");
        let plain = encode("decode-0", &REGION, None, b"md");
        assert_eq!(decode(&plain).expect("decodes").fence, None);
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = encode("decode-0", &REGION, Some(&FENCE), b"m");
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut longer = bytes;
        longer.push(0);
        assert!(decode(&longer).is_err());
    }

    #[test]
    fn bad_names_and_metadata_are_refused() {
        let mut bytes = encode("ab", &REGION, None, b"m");
        bytes[8] = 0xff; // not UTF-8
        assert!(decode(&bytes).is_err());
        assert!(decode(&encode("", &REGION, None, b"m")).is_err());
        assert!(decode(&encode("a\0", &REGION, None, b"m")).is_err());
        assert!(decode(&encode(&"x".repeat(MAX_NAME_LEN + 1), &REGION, None, b"m")).is_err());
        assert!(decode(&encode("ab", &REGION, None, b"")).is_err());
        assert!(decode(b"NXL1").is_err());
        assert!(decode(b"NXL3").is_err());
    }
}
