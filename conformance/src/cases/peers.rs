//! Which peers are accepted.

use blockwire::{BackendErrorKind, Error, PeerDescriptor, Transport};
use serde_json::json;

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{connect, open, wait_done};

fn expect_rejected<T: Transport>(a: &T, desc: &PeerDescriptor, ok: impl Fn(&Error) -> bool) {
    let sync = a.add_remote_peer(&"p".into(), desc);
    assert!(
        matches!(&sync, Err(e) if ok(e)),
        "add_remote_peer: {sync:?}"
    );
    let handle = a.add_remote_peer_async(&"p".into(), desc);
    let r = handle.wait();
    assert!(
        matches!(&r, Err(e) if ok(e)),
        "add_remote_peer_async: {r:?}"
    );
    assert!(a.peers().is_empty(), "a rejected peer was published");
    assert_eq!(
        a.backend_stats().connected_peers,
        0,
        "a rejected peer stays connected"
    );
    assert_eq!(
        a.write_blocks(&"p".into(), &[0], &[0]),
        Err(Error::UnknownPeer("p".into()))
    );
}

/// Blocks of another length.
///
/// Rules: R-ADD-CHECK.
pub(crate) fn block_len_mismatch<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(4, 4096)).transport;
    let b = open(fx, &Spec::new(4, 8192)).transport;
    let desc = b.descriptor().expect("descriptor");
    expect_rejected(&a, &desc, |e| {
        matches!(
            e,
            Error::BlockLenMismatch {
                local: 4096,
                remote: 8192,
                ..
            }
        )
    });
}

/// Two different non-empty fingerprints, in both directions.
///
/// Rules: R-ADD-CHECK.
pub(crate) fn different_fingerprints<F: Fixture>(fx: &F) {
    let a = open(
        fx,
        &Spec::new(4, 4096).with_fields(json!({"model": "a", "tp": 2})),
    )
    .transport;
    let b = open(
        fx,
        &Spec::new(4, 4096).with_fields(json!({"model": "b", "tp": 2})),
    )
    .transport;
    assert_ne!(a.fingerprint(), b.fingerprint());
    let is_mismatch = |e: &Error| matches!(e, Error::FingerprintMismatch { .. });
    expect_rejected(&a, &b.descriptor().expect("descriptor"), is_mismatch);
    expect_rejected(&b, &a.descriptor().expect("descriptor"), is_mismatch);
}

/// An empty fingerprint on either side is compatible; equal fingerprints are too.
///
/// Rules: R-ADD-CHECK.
pub(crate) fn empty_fingerprint_either_side<F: Fixture>(fx: &F) {
    let fields = json!({"model": "m", "dtype": "bf16"});
    let a = open(fx, &Spec::new(4, 4096).with_fields(fields.clone())).transport;
    let b = open(fx, &Spec::new(4, 4096)).transport;
    let c = open(fx, &Spec::new(4, 4096).with_fields(fields)).transport;
    assert_eq!(a.fingerprint().len(), 16);
    assert_eq!(b.fingerprint(), "");
    assert_eq!(a.fingerprint(), c.fingerprint());
    let pb = connect(&a, "b", &b);
    connect(&b, "a", &a);
    let pc = connect(&a, "c", &c);
    let ids = [
        a.write_blocks(&pb, &[0], &[0]).expect("write"),
        a.write_blocks(&pc, &[0], &[0]).expect("write"),
    ];
    wait_done(&a, &pb, &ids[..1]);
    wait_done(&a, &pc, &ids[1..]);
}

/// A descriptor of another backend.
///
/// Rules: R-ADD-CHECK.
pub(crate) fn other_backend_descriptor<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(4, 4096)).transport;
    let mut desc = a.descriptor().expect("descriptor");
    let other = if desc.backend == "ucx" { "nixl" } else { "ucx" };
    desc.backend = other.into();
    expect_rejected(&a, &desc, |e| matches!(e, Error::BackendMismatch { .. }));
}

/// Truncated, garbage, overflowing and empty-region descriptors, as bytes and as structs.
///
/// Rules: R-DESC, R-ADD-CHECK.
pub(crate) fn malformed_descriptor_bytes<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(4, 4096)).transport;
    let good = a.descriptor().expect("descriptor");
    let bytes = good.to_bytes();
    for n in 0..bytes.len() {
        assert!(
            PeerDescriptor::from_bytes(&bytes[..n]).is_err(),
            "a descriptor cut to {n} bytes decoded"
        );
    }
    for garbage in [
        &b""[..],
        b"\xff",
        b"hello world, not a descriptor",
        &[0u8; 64],
    ] {
        assert!(PeerDescriptor::from_bytes(garbage).is_err());
    }
    let mut overflow = good.clone();
    overflow.num_blocks = u32::MAX;
    overflow.block_len = u64::MAX / 3;
    assert!(PeerDescriptor::from_bytes(&overflow.to_bytes()).is_err());
    let mut zero = good.clone();
    zero.num_blocks = 0;
    assert!(PeerDescriptor::from_bytes(&zero.to_bytes()).is_err());
    // Structs built in code are checked as strictly as decoded bytes.
    for bad in [overflow, zero] {
        expect_rejected(&a, &bad, |e| matches!(e, Error::Descriptor(_)));
    }
    let mut end_overflow = good;
    end_overflow.base_addr = u64::MAX - 100;
    expect_rejected(&a, &end_overflow, |e| matches!(e, Error::Descriptor(_)));
}

/// Backend address bytes that do not parse: a connect error, nothing published.
///
/// Rules: R-ADD-CHECK.
pub(crate) fn malformed_backend_address<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(4, 4096)).transport;
    let mut desc = a.descriptor().expect("descriptor");
    for address in [vec![], vec![0xde, 0xad], vec![0x5a; 300]] {
        desc.address = address;
        expect_rejected(
            &a,
            &desc,
            |e| matches!(e, Error::Connect { source, .. } if source.kind() == BackendErrorKind::MalformedAddress),
        );
    }
}

/// A descriptor whose region fields disagree with what its peer registered (block 0 shifted,
/// a block more or fewer, or the same bytes split into other blocks) is refused at connect
/// with a malformed-address error, on every backend: it would aim transfers at memory the
/// peer never registered. So is one whose fields and the registration its address carries
/// (where the address carries one, as [`blockwire_core::RegisteredRegion`]'s encoding) were
/// both changed the same way: the fields agree with each other but not with the peer.
///
/// Rules: R-ADD-REGISTERED.
pub(crate) fn descriptor_disagreeing_with_registration<F: Fixture>(fx: &F) {
    let a = open(fx, &Spec::new(8, 2048)).transport;
    let b = open(fx, &Spec::new(4, 4096)).transport;
    let c = open(fx, &Spec::new(8, 2048)).transport;
    let truth = c.descriptor().expect("descriptor");
    let mut altered = Vec::new();
    let mut d = truth.clone();
    d.base_addr += 2048;
    d.num_blocks -= 1;
    altered.push(("block 0 shifted by a block", d));
    let mut d = truth.clone();
    d.num_blocks += 1;
    altered.push(("a block more", d));
    let mut d = truth.clone();
    d.num_blocks -= 1;
    altered.push(("a block fewer", d));
    // b's 4 blocks of 4096 described as 8 of 2048: the length matches a's, the bytes b's.
    let mut d = b.descriptor().expect("descriptor");
    d.num_blocks = 8;
    d.block_len = 2048;
    altered.push(("the region split into other blocks", d));
    let encoded = |d: &PeerDescriptor| {
        let mut out = Vec::new();
        blockwire_core::RegisteredRegion {
            base_addr: d.base_addr,
            num_blocks: d.num_blocks,
            block_len: d.block_len,
        }
        .encode(&mut out);
        out
    };
    let mut d = truth.clone();
    d.num_blocks += 1;
    let (was, now) = (encoded(&truth), encoded(&d));
    match d.address.windows(was.len()).position(|w| w == was) {
        Some(at) => d.address[at..at + now.len()].copy_from_slice(&now),
        // shm checks a descriptor against the peer's identity record, not its address
        // bytes: for it this is "a block more" again.
        None if a.backend_kind() == "shm" => {}
        None => panic!(
            "{}: the address does not carry the registration it was made for",
            a.backend_kind()
        ),
    }
    altered.push(("a block more, in the address's registration too", d));
    for (what, desc) in altered {
        let got = a.add_remote_peer(&"p".into(), &desc);
        assert!(
            matches!(&got, Err(Error::Connect { source, .. }) if source.kind() == BackendErrorKind::MalformedAddress),
            "{what}: {got:?}"
        );
        assert!(a.peers().is_empty(), "{what}: published");
        assert_eq!(a.backend_stats().connected_peers, 0, "{what}: connected");
    }
    let peer = connect(&a, "c", &c);
    let id = a.write_blocks(&peer, &[7], &[7]).expect("write");
    wait_done(&a, &peer, &[id]);
}
