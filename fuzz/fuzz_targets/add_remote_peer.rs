//! Fuzz target `add_remote_peer`: registering a peer from an untrusted descriptor.
//!
//! One shm transport under test (`local`) and a second, real one (`template`) are opened once
//! per process. Each input is turned into a descriptor in one of four ways (first byte):
//!
//! - `0`: the rest is descriptor bytes, decoded with `PeerDescriptor::from_bytes`;
//! - `1`: `template`'s valid descriptor with the rest as its shm address bytes verbatim, so the
//!   input reaches the backend's address parser past the descriptor checks;
//! - `2`: `template`'s valid descriptor with its real address, base address, number of blocks
//!   and block length each XORed with the following input bytes (all zero: the unchanged,
//!   valid descriptor), so the input reaches the backend's connect checks (local region
//!   lookup, shape match);
//! - `3`: `template`'s descriptor with an shm address naming a live process of another
//!   program (this process's parent, with its real start time) and the input's region token
//!   and identity record address, base address and number of blocks XORed with the input, so
//!   the input reaches the cross-process gate: reading the identity record there (read-only,
//!   32 bytes; refused by the kernel or by the record check, never a registered region).
//!
//! Property checked: `add_remote_peer` returns `Ok` or a typed `Err`, never panics or crashes;
//! after an `Ok`, `remove_remote_peer` succeeds; afterwards no peer is published or connected,
//! and neither transport's region changed by a single byte (both are filled with a pattern at
//! start and compared after every input). Nothing is ever posted by this target.

#![no_main]

use std::sync::LazyLock;

use blockwire::{AnyTransport, Error, PeerDescriptor, PeerId, Region, Transport, TransportOptions};
use libfuzzer_sys::fuzz_target;

const BLOCKS: u32 = 4;
const BLOCK_LEN: usize = 64;

struct Fixture {
    local: AnyTransport,
    template: AnyTransport,
    template_desc: PeerDescriptor,
    local_bytes: Vec<u8>,
    template_bytes: Vec<u8>,
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

fn open() -> AnyTransport {
    let opts = TransportOptions::default().with_backend_option("copy_threads", "1");
    blockwire::open("shm", Region::new(BLOCKS, BLOCK_LEN).expect("region"), opts).expect("open shm")
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let local = open();
    let template = open();
    let template_desc = template.descriptor().expect("descriptor");
    let local_bytes = fill(&local, 0xA5);
    let template_bytes = fill(&template, 0x3C);
    let parent = std::os::unix::process::parent_id();
    let other_process = start_time(parent).map(|t| (parent, t));
    Fixture {
        local,
        template,
        template_desc,
        local_bytes,
        template_bytes,
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

fn descriptor(fx: &Fixture, data: &[u8]) -> Option<PeerDescriptor> {
    let (&mode, rest) = data.split_first()?;
    match mode % 4 {
        0 => PeerDescriptor::from_bytes(rest).ok(),
        1 => {
            let mut d = fx.template_desc.clone();
            d.address = rest.to_vec();
            Some(d)
        }
        2 => {
            let mut d = fx.template_desc.clone();
            let mut rest = rest;
            let n = d.address.len().min(rest.len());
            xor_into(&mut d.address, &rest[..n]);
            rest = &rest[n..];
            d.base_addr ^= u64::from_le_bytes(take(&mut rest));
            d.num_blocks ^= u32::from_le_bytes(take(&mut rest));
            d.block_len ^= u64::from_le_bytes(take(&mut rest));
            Some(d)
        }
        _ => {
            let (pid, start) = fx.other_process?;
            let mut d = fx.template_desc.clone();
            let mut rest = rest;
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
            Some(d)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let fx = &*FIXTURE;
    let peer = PeerId::from("fuzz-peer");
    if let Some(desc) = descriptor(fx, data) {
        match fx.local.add_remote_peer(&peer, &desc) {
            Ok(()) => {
                assert_eq!(fx.local.peers(), vec![peer.clone()]);
                if let Err(e) = fx.local.remove_remote_peer(&peer) {
                    panic!("remove after a successful add failed: {e:?}");
                }
            }
            // Every refusal is a typed error; none may claim the transport closed.
            Err(Error::Closed) => panic!("add_remote_peer says Closed on an open transport"),
            Err(_) => {}
        }
    }
    assert!(fx.local.peers().is_empty(), "a peer stayed published");
    let stats = fx.local.backend_stats();
    assert_eq!(stats.connected_peers, 0, "a backend peer stayed connected");
    assert_eq!(stats.live_transfers, 0, "a transfer appeared");
    assert!(
        snapshot(&fx.local) == fx.local_bytes,
        "the local region changed"
    );
    assert!(
        snapshot(&fx.template) == fx.template_bytes,
        "the template peer's region changed"
    );
});
