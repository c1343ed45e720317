//! NIXL's own handshake: a peer's descriptor from what a plain NIXL agent hands out (vLLM's
//! `NixlTransport` exchanges `(agent_metadata, base_addr, num_blocks, block_len)`), and the
//! raw NIXL metadata inside a blockwire descriptor, for such an agent's `add_remote_agent`.
//!
//! NIXL's metadata (`getLocalMD`, Python `get_agent_metadata`) is a `nixlSerDes` buffer: the
//! intro `nixlSerDes|`, then tagged fields, each the tag, its length as the writer's `size_t`
//! (8 bytes, little-endian on the x86-64 and aarch64 hosts NIXL ships for), the value and a
//! `|`. The first field is `Agent`, the agent's name (what `loadRemoteMD` returns). Only that
//! field is read here; connecting then loads the whole metadata and checks that NIXL read the
//! same name from it.

use blockwire_core::{
    DescriptorError, MAX_NAME_LEN, PeerDescriptor, RegisteredRegion, name_problem,
};

use crate::{KIND, address};

const INTRO: &[u8] = b"nixlSerDes|";
const AGENT_TAG: &[u8] = b"Agent";

/// Why NIXL metadata, or a descriptor meant to carry it, was refused.
///
/// ```
/// use blockwire_nixl::{MetadataError, agent_name_of};
/// assert!(matches!(agent_name_of(b"not nixl"), Err(MetadataError::Malformed(_))));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The bytes are not NIXL agent metadata (or not a version whose first field is the
    /// agent's name).
    #[error("not NIXL agent metadata: {0}")]
    Malformed(String),
    /// The agent name in the metadata cannot be a blockwire transport's name (see
    /// [`blockwire_core::name_problem`]), so its notifications could not be told apart.
    #[error("the NIXL agent's name: {0}")]
    BadName(String),
    /// The geometry or fingerprint given does not make a valid descriptor.
    #[error("the peer's descriptor")]
    Descriptor(#[from] DescriptorError),
    /// The descriptor is another backend's, so it carries no NIXL metadata.
    #[error("a descriptor of backend {0:?} carries no NIXL metadata (only nixl's do)")]
    NotNixl(String),
}

/// The agent name inside NIXL agent metadata, as NIXL's `loadRemoteMD` reads it.
///
/// ```
/// // The start of what a NIXL agent named "decode-0" hands out.
/// let mut md = b"nixlSerDes|Agent".to_vec();
/// md.extend_from_slice(&8u64.to_le_bytes());
/// md.extend_from_slice(b"decode-0|Conns");
/// assert_eq!(blockwire_nixl::agent_name_of(&md)?, "decode-0");
/// # Ok::<(), blockwire_nixl::MetadataError>(())
/// ```
pub fn agent_name_of(agent_metadata: &[u8]) -> Result<&str, MetadataError> {
    let bad = |why: &str| MetadataError::Malformed(why.to_owned());
    let rest = agent_metadata
        .strip_prefix(INTRO)
        .ok_or_else(|| bad("it does not start with \"nixlSerDes|\""))?;
    let rest = rest
        .strip_prefix(AGENT_TAG)
        .ok_or_else(|| bad("its first field is not \"Agent\""))?;
    let (len, rest) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| bad("it ends inside the agent name's length"))?;
    let len = u64::from_le_bytes(*len);
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= MAX_NAME_LEN)
        .ok_or_else(|| {
            MetadataError::BadName(format!(
                "{len} bytes long, a transport name is at most {MAX_NAME_LEN}"
            ))
        })?;
    if rest.len() <= len || rest[len] != b'|' {
        return Err(bad(
            "it ends inside the agent name, or the name lacks its '|'",
        ));
    }
    let name = std::str::from_utf8(&rest[..len])
        .map_err(|_| MetadataError::BadName("not UTF-8".into()))?;
    if let Some(problem) = name_problem(name) {
        return Err(MetadataError::BadName(problem));
    }
    if name.contains('\0') {
        return Err(MetadataError::BadName(format!("{name:?} holds a NUL byte")));
    }
    Ok(name)
}

/// A peer's descriptor from NIXL's own handshake: the metadata a plain NIXL agent hands out
/// (`get_agent_metadata()` in NIXL's Python API, `getLocalMD`), with the geometry of the
/// region it registered as one DRAM registration of `num_blocks` blocks of `block_len` bytes
/// at `base_addr`, and a config fingerprint (`""`: compatible with every peer; vLLM compares
/// fingerprints in its control plane, so it passes none). This is vLLM's `NixlTransport`
/// tuple `(agent_metadata, base_addr, num_blocks, block_len)`, plus the fingerprint.
///
/// The descriptor's name is the agent's, read from the metadata: the sender its
/// notifications carry. Connecting to it (`add_remote_peer`) loads the metadata and fails
/// with [`blockwire_core::BackendErrorKind::NameInUse`] if that name is this transport's or a
/// connected peer's.
///
/// ```
/// let mut md = b"nixlSerDes|Agent".to_vec();
/// md.extend_from_slice(&8u64.to_le_bytes());
/// md.extend_from_slice(b"decode-0|...the rest of NIXL's metadata");
/// let desc = blockwire_nixl::descriptor_from_nixl(&md, 0x7f00_0000_0000, 64, 4096, "")?;
/// assert_eq!((desc.backend.as_str(), desc.name.as_str()), ("nixl", "decode-0"));
/// assert_eq!((desc.num_blocks, desc.block_len), (64, 4096));
/// // The metadata comes back out as it went in.
/// assert_eq!(blockwire_nixl::agent_metadata(&desc)?, &md[..]);
/// # Ok::<(), blockwire_nixl::MetadataError>(())
/// ```
pub fn descriptor_from_nixl(
    agent_metadata: &[u8],
    base_addr: u64,
    num_blocks: u32,
    block_len: u64,
    fingerprint: &str,
) -> Result<PeerDescriptor, MetadataError> {
    let name = agent_name_of(agent_metadata)?;
    let region = RegisteredRegion {
        base_addr,
        num_blocks,
        block_len,
    };
    // A plain agent has no close fence: its peers' posts are not held off its close.
    let address = address::encode(name, &region, None, agent_metadata);
    let desc = PeerDescriptor::new(KIND, address, base_addr, num_blocks, block_len, fingerprint)
        .with_name(name);
    desc.validate()?;
    tracing::debug!(
        agent = name,
        num_blocks,
        block_len,
        "descriptor from NIXL metadata"
    );
    Ok(desc)
}

/// The raw NIXL agent metadata inside a nixl descriptor (this transport's
/// `descriptor()`, or a peer's): what a plain NIXL agent's `add_remote_agent` (vLLM's
/// `NixlTransport.add_remote_peer`, as `agent_metadata`) accepts. The geometry it needs
/// beside it is the descriptor's `base_addr`, `num_blocks` and `block_len`.
///
/// ```
/// use blockwire_core::PeerDescriptor;
/// let shm = PeerDescriptor::new("shm", vec![], 0x1000, 4, 4096, "");
/// assert!(matches!(blockwire_nixl::agent_metadata(&shm), Err(blockwire_nixl::MetadataError::NotNixl(_))));
/// ```
pub fn agent_metadata(desc: &PeerDescriptor) -> Result<&[u8], MetadataError> {
    if desc.backend != KIND {
        return Err(MetadataError::NotNixl(desc.backend.clone()));
    }
    let addr = address::decode(&desc.address)
        .map_err(|e| MetadataError::Malformed(format!("the descriptor's nixl address: {e}")))?;
    Ok(addr.metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(name: &[u8], len: u64) -> Vec<u8> {
        let mut v = INTRO.to_vec();
        v.extend_from_slice(AGENT_TAG);
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(name);
        v.extend_from_slice(b"|Conns");
        v
    }

    #[test]
    fn reads_the_name() {
        assert_eq!(agent_name_of(&md(b"a", 1)), Ok("a"));
    }

    #[test]
    fn every_truncation_is_refused_and_nothing_panics() {
        let full = md(b"decode-0", 8);
        for n in 0..INTRO.len() + AGENT_TAG.len() + 8 + 9 {
            assert!(agent_name_of(&full[..n]).is_err(), "prefix {n}");
        }
        for len in [0, 7, 9, 129, u64::MAX] {
            assert!(agent_name_of(&md(b"decode-0", len)).is_err(), "len {len}");
        }
        assert!(agent_name_of(&md(b"\xff", 1)).is_err());
        assert!(agent_name_of(&md(b"a\nb", 3)).is_err());
        assert!(agent_name_of(&md(b"a\0b", 3)).is_err());
    }

    #[test]
    fn descriptor_round_trip_and_validation() {
        let m = md(b"p", 1);
        let d = descriptor_from_nixl(&m, 0x1000, 4, 64, "").expect("valid");
        assert_eq!(agent_metadata(&d), Ok(&m[..]));
        let a = address::decode(&d.address).expect("decodes");
        assert_eq!(a.agent, "p");
        assert!(matches!(
            descriptor_from_nixl(&m, 0x1000, 0, 64, ""),
            Err(MetadataError::Descriptor(DescriptorError::ZeroBlocks))
        ));
        assert!(matches!(
            descriptor_from_nixl(&m, u64::MAX, 4, 64, ""),
            Err(MetadataError::Descriptor(_))
        ));
        assert!(descriptor_from_nixl(&m, 0x1000, 4, 64, "NOT-HEX").is_err());
    }
}
