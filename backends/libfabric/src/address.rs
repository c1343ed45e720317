//! The libfabric backend's address bytes: provider, endpoint name, memory key, addressing
//! mode, and the region the key covers, sealed ([`AddressWriter::sealed`]).

use blockwire_core::kit::{AddressReader, AddressWriter};
use blockwire_core::{BackendError, RegisteredRegion};

const MAGIC: &[u8; 4] = b"OFI3";
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
        AddressWriter::new(MAGIC)
            .bytes(self.provider.as_bytes())
            .bytes(&self.name)
            .u64(self.key)
            .u8(u8::from(self.virt))
            .region(&self.region)
            .sealed()
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, BackendError> {
        let mut r = AddressReader::sealed("libfabric address", MAGIC, bytes)?;
        let provider = r.bytes("provider", MAX_PART)?;
        let name = r.bytes("endpoint name", MAX_PART)?;
        let key = r.u64("key")?;
        let virt = match r.u8("addressing mode")? {
            0 => false,
            1 => true,
            _ => return Err(r.bad("addressing mode")),
        };
        let region = r.region()?;
        if name.is_empty() {
            return Err(r.bad("empty endpoint name"));
        }
        let provider = String::from_utf8(provider.to_vec()).map_err(|_| r.bad("provider name"))?;
        r.finish()?;
        Ok(OfiAddress {
            provider,
            name: name.to_vec(),
            key,
            virt,
            region,
        })
    }
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

    /// A peer's descriptor of a closed transport whose endpoint address a new one took: the
    /// address is the new one's, the key the closed one's. Its WRITE must move nothing and
    /// not be reported done (with the one key 0 every registration had, it landed in the new
    /// region, reported done: `fresh_key` in `fabric/open.rs`).
    #[test]
    fn a_stale_key_at_a_reused_address_moves_nothing() {
        use crate::OfiBackend;
        use blockwire_conformance::stale::stale_write;
        use blockwire_core::{
            Backend, BackendOptions, OpenBackend, PeerDescriptor, RegionSpan, XferState,
        };
        use std::time::Duration;

        for provider in ["tcp", "shm"] {
            let open = |_, span: RegionSpan| {
                let mut options = BackendOptions::new().with("provider", provider);
                if provider == "tcp" {
                    options = options.with("domain", "lo");
                }
                // SAFETY: `stale_write` keeps the span's memory allocated until the backend is
                // dropped.
                unsafe { OfiBackend::open(span, options) }.expect("open")
            };
            let rewrite = |mut desc: PeerDescriptor, new: &OfiBackend| {
                let closed = OfiAddress::from_bytes(&desc.address).expect("closed's address");
                let mut stale = OfiAddress::from_bytes(&new.address()).expect("new's address");
                assert_ne!(
                    stale.key, closed.key,
                    "{provider}: two registrations, one key"
                );
                stale.key = closed.key;
                stale.region = closed.region;
                desc.address = stale.to_bytes();
                desc
            };
            let outcome = stale_write(open, rewrite, Duration::from_secs(3));
            assert!(outcome.moved_nothing(), "{provider}: {outcome:?}");
            // libfabric 1.17's shm target drops a command whose key it does not know without
            // an answer: the WRITE runs until the transport's stall timeout cuts the peer.
            // Over tcp it fails.
            let expected = match (provider, &outcome.state) {
                ("shm", Some(XferState::Running)) => true,
                (_, Some(XferState::Failed(_))) => provider != "shm",
                _ => false,
            };
            assert!(expected, "{provider}: {outcome:?}");
        }
    }
}
