//! Fuzz target `descriptor_decode`: the peer descriptor decoder on untrusted bytes.
//!
//! Property checked, for arbitrary bytes:
//!
//! - `PeerDescriptor::from_bytes` never panics (it returns `Ok` or a `DescriptorError`);
//! - when it decodes, `validate()` never panics and accepts the descriptor (the decoder
//!   promises to return only validated descriptors);
//! - the round trip holds: `to_bytes` of the decoded descriptor decodes to an equal
//!   descriptor, and re-encodes to exactly the input bytes (the encoding is canonical: there
//!   is one byte string per descriptor, so nothing the decoder ignores can smuggle data).

#![no_main]

use blockwire_core::PeerDescriptor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(desc) = PeerDescriptor::from_bytes(data) else {
        return;
    };
    if let Err(e) = desc.validate() {
        panic!("from_bytes returned a descriptor that validate() rejects: {e:?} ({desc:?})");
    }
    let encoded = desc.to_bytes();
    match PeerDescriptor::from_bytes(&encoded) {
        Ok(again) => assert_eq!(again, desc, "round trip changed the descriptor"),
        Err(e) => panic!("re-encoded descriptor does not decode: {e:?} ({desc:?})"),
    }
    assert_eq!(
        encoded, data,
        "decoded bytes do not re-encode to themselves (non-canonical encoding accepted)"
    );
});
