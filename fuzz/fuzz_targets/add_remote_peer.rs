//! Fuzz target `add_remote_peer`: registering a peer from an untrusted descriptor.
//!
//! For every backend compiled in (shm always; ucx over TCP and libfabric's tcp and shm
//! providers with the fuzz crate's features `ucx` and `libfabric`, which `scripts/fuzz.sh`
//! builds with `FUZZ_FEATURES`; nixl cannot share a process with the system UCX), one
//! transport under test (`local`) and a second, real one (`template`) are opened once per
//! process. The first byte picks the backend (`byte / 4`, modulo their number: inputs below 4
//! are shm's) and one of four ways to make a descriptor (`byte % 4`):
//!
//! - `0`: the rest is descriptor bytes, decoded with `PeerDescriptor::from_bytes`;
//! - `1`: `template`'s valid descriptor with the rest as its shm address bytes verbatim, so the
//!   input reaches the backend's address parser past the descriptor checks;
//! - `2`: `template`'s valid descriptor with its real address, base address, number of blocks
//!   and block length each XORed with the following input bytes (all zero: the unchanged,
//!   valid descriptor), so the input reaches the backend's connect checks (local region
//!   lookup, shape match). Past shm, only the registered region the address carries (the 20
//!   bytes before its 8-byte seal) is altered, so the input reaches the seal's check: a
//!   region changed in the address and in the descriptor alike once got through;
//! - `3`: shm: `template`'s descriptor with an shm address naming a live process of another
//!   program (this process's parent, with its real start time) and the input's region token
//!   and identity record address, base address and number of blocks XORed with the input, so
//!   the input reaches the cross-process gate: reading the identity record there (read-only,
//!   40 bytes; refused by the kernel or by the record check, never a registered region).
//!   Other backends: `template`'s valid descriptor with the region it registered, which its
//!   address carries (sealed), and the descriptor's base address, number of blocks
//!   and block length XORed with the input, so the input reaches the check that refuses a
//!   descriptor disagreeing with its registration. (Their address bytes before that are the
//!   libraries' own opaque formats, UCX's worker address and libfabric's endpoint name, which
//!   this target does not feed to them altered.)
//!
//! Property checked: `add_remote_peer` returns `Ok` or a typed `Err`, never panics or crashes;
//! after an `Ok`, `remove_remote_peer` succeeds; afterwards no peer is published or connected,
//! and neither transport's region changed by a single byte (both are filled with a pattern at
//! start and compared after every input). Nothing is ever posted by this target. A descriptor
//! made by altering `template`'s (modes 2 and 3) is accepted only with the region fields of a
//! region registered here. (Modes 0 and 1 build the address from the input; a self-consistent
//! descriptor naming memory nobody registered can be built that way, sealed and all, as any
//! peer can describe its own memory wrongly: the seal is an integrity check, and ucx and
//! libfabric cannot ask the peer at connect what it registered.)

#![no_main]

use std::sync::LazyLock;

use blockwire::{AnyTransport, Error, PeerDescriptor, PeerId, Region, Transport, TransportOptions};
use blockwire_core::RegisteredRegion;
use blockwire_core::kit::SEAL_LEN;
use libfuzzer_sys::fuzz_target;

const BLOCKS: u32 = 4;
/// Bytes of the registered region a ucx or libfabric address carries before its seal.
const REGION_LEN: usize = RegisteredRegion::ENCODED_LEN;
const BLOCK_LEN: usize = 64;

/// One backend's transports.
struct Backend {
    local: AnyTransport,
    template: AnyTransport,
    template_desc: PeerDescriptor,
    local_bytes: Vec<u8>,
    template_bytes: Vec<u8>,
}

struct Fixture {
    /// shm first.
    backends: Vec<Backend>,
    /// Pid and start time of a live process with no shm region (the parent), for mode 3.
    other_process: Option<(u32, u64)>,
}

/// A recognizable, position-dependent pattern (different per region via `salt`).
fn fill(t: &AnyTransport, salt: u8) -> Vec<u8> {
    let mut all = Vec::new();
    for i in 0..t.num_blocks() {
        let block: Vec<u8> = (0..t.block_len())
            .map(|j| (j as u8).wrapping_mul(31) ^ (i as u8).wrapping_mul(7) ^ salt)
            .collect();
        t.region().write_block(i, &block).expect("write pattern");
        all.extend_from_slice(&block);
    }
    all
}

fn snapshot(t: &AnyTransport) -> Vec<u8> {
    (0..t.num_blocks())
        .flat_map(|i| t.region().block(i).expect("read block"))
        .collect()
}

/// Start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`), as the shm
/// backend reads it.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn open(backend: &str, options: &[(&str, &str)]) -> AnyTransport {
    let mut opts = TransportOptions::default();
    for (k, v) in options {
        opts = opts.with_backend_option(*k, *v);
    }
    blockwire::open(
        backend,
        Region::new(BLOCKS, BLOCK_LEN).expect("region"),
        opts,
    )
    .unwrap_or_else(|e| panic!("open {backend}: {e}"))
}

fn backend(name: &str, options: &[(&str, &str)]) -> Backend {
    let local = open(name, options);
    let template = open(name, options);
    let template_desc = template.descriptor().expect("descriptor");
    let local_bytes = fill(&local, 0xA5);
    let template_bytes = fill(&template, 0x3C);
    Backend {
        local,
        template,
        template_desc,
        local_bytes,
        template_bytes,
    }
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    #[allow(unused_mut)]
    let mut backends = vec![backend("shm", &[("copy_threads", "1")])];
    #[cfg(feature = "ucx")]
    backends.push(backend("ucx", &[("tls", "tcp")]));
    #[cfg(feature = "libfabric")]
    {
        backends.push(backend(
            "libfabric",
            &[("provider", "tcp"), ("domain", "lo")],
        ));
        backends.push(backend("libfabric", &[("provider", "shm")]));
    }
    let parent = std::os::unix::process::parent_id();
    let other_process = start_time(parent).map(|t| (parent, t));
    Fixture {
        backends,
        other_process,
    }
});

fn xor_into(dst: &mut [u8], mask: &[u8]) {
    for (d, m) in dst.iter_mut().zip(mask) {
        *d ^= m;
    }
}

/// Takes up to `N` bytes (missing bytes are zero, i.e. "leave the field as it is").
fn take<const N: usize>(rest: &mut &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = rest.len().min(N);
    out[..n].copy_from_slice(&rest[..n]);
    *rest = &rest[n..];
    out
}

/// The backend, the descriptor, and whether it was made by altering `template`'s.
fn descriptor(fx: &Fixture, data: &[u8]) -> Option<(&'static Backend, PeerDescriptor, bool)> {
    let (&first, rest) = data.split_first()?;
    let backends = &FIXTURE.backends;
    let b = &backends[(first / 4) as usize % backends.len()];
    let shm = b.local.backend_kind() == "shm";
    let mut rest = rest;
    let desc = match first % 4 {
        0 => PeerDescriptor::from_bytes(rest).ok()?,
        1 => {
            let mut d = b.template_desc.clone();
            d.address = rest.to_vec();
            d
        }
        2 => {
            let mut d = b.template_desc.clone();
            let n = d.address.len().min(rest.len());
            // Past shm, only the registered region before the address's seal is altered.
            let (from, to) = if shm {
                (0, d.address.len())
            } else {
                let to = d.address.len().saturating_sub(SEAL_LEN);
                (to.saturating_sub(REGION_LEN), to)
            };
            let n = n.min(to - from);
            xor_into(&mut d.address[from..to], &rest[..n]);
            rest = &rest[n..];
            d.base_addr ^= u64::from_le_bytes(take(&mut rest));
            d.num_blocks ^= u32::from_le_bytes(take(&mut rest));
            d.block_len ^= u64::from_le_bytes(take(&mut rest));
            d
        }
        _ if shm => {
            let (pid, start) = fx.other_process?;
            let mut d = b.template_desc.clone();
            let token: [u8; 8] = take(&mut rest);
            let identity: [u8; 8] = take(&mut rest);
            d.address = [
                &b"SHM1"[..],
                &pid.to_le_bytes(),
                &start.to_le_bytes(),
                &token,
                &identity,
            ]
            .concat();
            d.base_addr ^= u64::from_le_bytes(take(&mut rest));
            d.num_blocks ^= u32::from_le_bytes(take(&mut rest));
            d
        }
        _ => {
            let mut d = b.template_desc.clone();
            d.base_addr ^= u64::from_le_bytes(take(&mut rest));
            d.num_blocks ^= u32::from_le_bytes(take(&mut rest));
            d.block_len ^= u64::from_le_bytes(take(&mut rest));
            d
        }
    };
    Some((b, desc, first % 4 >= 2))
}

fuzz_target!(|data: &[u8]| {
    let fx = &*FIXTURE;
    let peer = PeerId::from("fuzz-peer");
    if let Some((b, desc, altered)) = descriptor(fx, data) {
        let registered = desc == b.template_desc;
        let added = b.local.add_remote_peer(&peer, &desc);
        match &added {
            Ok(()) => {
                assert_eq!(b.local.peers(), vec![peer.clone()]);
                if let Err(e) = b.local.remove_remote_peer(&peer) {
                    panic!("remove after a successful add failed: {e:?}");
                }
            }
            // Every refusal is a typed error; none may claim the transport closed.
            Err(Error::Closed) => panic!("add_remote_peer says Closed on an open transport"),
            Err(e) if registered => panic!("the template's own descriptor was refused: {e}"),
            Err(_) => {}
        }
        // An altered descriptor is accepted only with the region fields of a region registered
        // here (the template's, or the local transport's own).
        let shape = |d: &PeerDescriptor| (d.base_addr, d.num_blocks, d.block_len);
        let local_desc = b.local.descriptor().expect("descriptor");
        assert!(
            !altered
                || added.is_err()
                || shape(&desc) == shape(&b.template_desc)
                || shape(&desc) == shape(&local_desc),
            "a descriptor disagreeing with every registration was accepted: {desc:?}"
        );
    }
    for b in &fx.backends {
        assert!(b.local.peers().is_empty(), "a peer stayed published");
        let stats = b.local.backend_stats();
        assert_eq!(stats.connected_peers, 0, "a backend peer stayed connected");
        assert_eq!(stats.live_transfers, 0, "a transfer appeared");
        assert!(
            snapshot(&b.local) == b.local_bytes,
            "the local region changed"
        );
        assert!(
            snapshot(&b.template) == b.template_bytes,
            "the template peer's region changed"
        );
    }
});
