//! A [`CloseFence`](super::CloseFence) found by a key instead of by its place in an address:
//! for handshakes whose bytes blockwire does not own.
//!
//! NIXL's own handshake (vLLM's `NixlTransport`, blockwire's Python P2P layer on nixl)
//! exchanges NIXL's agent metadata, with no room for a [`FenceRef`]. A target publishes its
//! fence under that metadata instead: a file in `/dev/shm` named by the key's SHA-256, holding
//! the reference. A same-host peer given the same bytes finds it ([`FenceRef::published`]) and
//! reopens the fence the usual way, which checks the token; a peer on another host, or of a
//! plain NIXL agent, finds no file and goes without, as it would with no fence in the
//! address. The file goes with the fence (dropped; a crashed process leaves one file of 32
//! bytes, naming a fence no one can reopen).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::{FenceRef, TOKEN_LEN};

/// Where published fences are.
const DIR: &str = "/dev/shm";
const MAGIC: &[u8; 8] = b"BWFPUB01";
/// The magic, the pid, the descriptor number, the token.
const LEN: usize = MAGIC.len() + 4 + 4 + TOKEN_LEN;

/// The file a fence published under `key` is in.
pub(super) fn path_of(key: &[u8]) -> PathBuf {
    let digest = Sha256::digest(key);
    let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    PathBuf::from(DIR).join(format!("blockwire-fence-{name}"))
}

/// Writes `r` under `key`; the file's path, for its removal. The file must be new: one left
/// by another fence (the same key) is not taken over.
pub(super) fn publish(key: &[u8], r: &FenceRef) -> io::Result<PathBuf> {
    let path = path_of(key);
    let mut content = MAGIC.to_vec();
    content.extend_from_slice(&r.pid.to_le_bytes());
    content.extend_from_slice(&r.fd.to_le_bytes());
    content.extend_from_slice(&r.token);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)?;
    if let Err(e) = file.write_all(&content) {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// The reference published under `key`, if any; `None` for a missing or malformed file.
pub(super) fn read(key: &[u8]) -> Option<FenceRef> {
    let path = path_of(key);
    let mut content = Vec::with_capacity(LEN + 1);
    let read = File::open(&path).and_then(|f| f.take(LEN as u64 + 1).read_to_end(&mut content));
    if let Err(e) = read {
        tracing::trace!(path = %path.display(), error = %e, "no close fence published");
        return None;
    }
    let parsed = content
        .strip_prefix(MAGIC)
        .filter(|rest| rest.len() == LEN - MAGIC.len())
        .and_then(|rest| {
            let (pid, rest) = rest.split_first_chunk::<4>()?;
            let (fd, token) = rest.split_first_chunk::<4>()?;
            Some(FenceRef {
                pid: u32::from_le_bytes(*pid),
                fd: u32::from_le_bytes(*fd),
                token: token.try_into().ok()?,
            })
        });
    if parsed.is_none() {
        tracing::debug!(path = %path.display(), "a malformed published close fence: ignored");
    }
    parsed
}
