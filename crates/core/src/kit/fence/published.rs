//! A [`CloseFence`](super::CloseFence) found by a key instead of by its place in an address:
//! for handshakes whose bytes blockwire does not own.
//!
//! NIXL's own handshake (vLLM's `NixlTransport`, blockwire's Python P2P layer on nixl)
//! exchanges NIXL's agent metadata, with no room for a [`FenceRef`]. A target publishes its
//! fence under that metadata instead: a file in `/dev/shm` named by the key's SHA-256, holding
//! the reference. A same-host peer given the same bytes finds it ([`FenceRef::published`]) and
//! reopens the fence the usual way, which checks the token; a peer on another host, or of a
//! plain NIXL agent, finds no file and goes without, as it would with no fence in the
//! address. The file goes with the fence (dropped). The publisher holds a shared `flock` of
//! it while it lives, so a file no process holds is one a process that ended left (killed, or
//! crashed): each [`publish`] removes those it may ([`sweep`]), and takes over its own key's
//! file when that is one.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::flock::{open_regular, try_flock};
use super::{FenceRef, TOKEN_LEN, wait_until};

/// Where published fences are.
const DIR: &str = "/dev/shm";
const PREFIX: &str = "blockwire-fence-";
const MAGIC: &[u8; 8] = b"BWFPUB01";
/// How long a publisher waits for its new file's lock, which a sweep may hold for a moment.
const LOCK_WAIT: Duration = Duration::from_millis(100);
/// How old a malformed file no process holds must be before a sweep removes it: younger, it
/// may be one a publisher made and has not locked and written yet.
const MALFORMED_AGE: Duration = Duration::from_secs(60);
/// The magic, the pid, the descriptor number, the token.
const LEN: usize = MAGIC.len() + 4 + 4 + TOKEN_LEN;

/// The file a fence published under `key` is in.
pub(super) fn path_of(key: &[u8]) -> PathBuf {
    let digest = Sha256::digest(key);
    let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    PathBuf::from(DIR).join(format!("{PREFIX}{name}"))
}

/// A published reference: its file, which this process holds (a shared `flock`) until it
/// drops this, having removed the file.
pub(super) struct Published {
    path: PathBuf,
    /// Held open for the lock; closed after the removal.
    _file: File,
}

impl Published {
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "removing a published close fence");
        }
    }
}

/// Writes `r` under `key`, after sweeping the files of ended processes. The file must be new,
/// or one a process that ended left: one of a live fence (the same key) is not taken over.
pub(super) fn publish(key: &[u8], r: &FenceRef) -> io::Result<Published> {
    let swept = sweep(Path::new(DIR));
    if swept > 0 {
        tracing::debug!(
            swept,
            "removed close fences published by processes that ended"
        );
    }
    let path = path_of(key);
    let mut content = MAGIC.to_vec();
    content.extend_from_slice(&r.pid.to_le_bytes());
    content.extend_from_slice(&r.fd.to_le_bytes());
    content.extend_from_slice(&r.token);
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
    };
    let mut file = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && remove_if_left(&path, true) => {
            create()?
        }
        other => other?,
    };
    // Another publisher's sweep may hold the new file for the moment it takes to look at it.
    let written = wait_until(LOCK_WAIT, || try_flock(&file, libc::LOCK_SH))
        .and_then(|locked| match locked {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("another process held the new file's lock for {LOCK_WAIT:?}"),
            )),
        })
        .and_then(|()| file.write_all(&content));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(Published { path, _file: file })
}

/// Removes the published files under `dir` that no process holds (their publishers ended)
/// and this user may remove; how many it removed. Errors only skip a file.
pub(super) fn sweep(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(PREFIX))
        })
        .filter(|e| remove_if_left(&e.path(), false))
        .count()
}

/// Removes the file at `path` if no process holds its lock and it is a whole reference (or a
/// malformed one older than [`MALFORMED_AGE`], or any, with `any_content`); whether it did.
/// The removal is of the file locked, not of one put at `path` since.
fn remove_if_left(path: &Path, any_content: bool) -> bool {
    let Ok(mut file) = open_regular(path) else {
        return false;
    };
    if !matches!(try_flock(&file, libc::LOCK_EX), Ok(true)) {
        return false;
    }
    let mut content = Vec::with_capacity(LEN + 1);
    let whole = (&mut file)
        .take(LEN as u64 + 1)
        .read_to_end(&mut content)
        .is_ok()
        && parse(&content).is_some();
    let (Ok(locked), Ok(now)) = (file.metadata(), std::fs::symlink_metadata(path)) else {
        return false;
    };
    let old = locked
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age >= MALFORMED_AGE);
    if (locked.dev(), locked.ino()) != (now.dev(), now.ino()) || !(whole || old || any_content) {
        return false;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::trace!(path = %path.display(), "removed a close fence a process that ended published");
            true
        }
        Err(e) => {
            tracing::trace!(path = %path.display(), error = %e, "a close fence a process that ended published: not removed");
            false
        }
    }
}

/// The reference published under `key`, if any; `None` for a missing or malformed file.
pub(super) fn read(key: &[u8]) -> Option<FenceRef> {
    let path = path_of(key);
    let mut content = Vec::with_capacity(LEN + 1);
    let read = open_regular(&path).and_then(|f| f.take(LEN as u64 + 1).read_to_end(&mut content));
    if let Err(e) = read {
        tracing::trace!(path = %path.display(), error = %e, "no close fence published");
        return None;
    }
    let parsed = parse(&content);
    if parsed.is_none() {
        tracing::debug!(path = %path.display(), "a malformed published close fence: ignored");
    }
    parsed
}

/// A file's content as a reference, if it is one.
fn parse(content: &[u8]) -> Option<FenceRef> {
    content
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
        })
}
