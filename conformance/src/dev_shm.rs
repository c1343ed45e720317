//! Files in `/dev/shm` that a process maps, and whether they outlive it: the cross-process
//! tests read a peer's mappings before killing it, and fail if any of those files is still
//! there once the peer is dead and every transport that knew it has closed (the libfabric
//! `shm` provider's region files are the ones that did; the shm backend's memfds and UCX's
//! posix segments, unlinked as soon as they are made, never appear).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where `shm_open` creates its files.
pub const DIR: &str = "/dev/shm";

/// A file of `/dev/shm`: its path and inode (a file made again under the same name is another
/// file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShmFile {
    /// Its path in `/dev/shm`.
    pub path: PathBuf,
    /// Its inode.
    pub ino: u64,
}

/// The files of `/dev/shm` (still linked) that process `pid` maps; empty if its mappings
/// cannot be read.
///
/// ```
/// let mine = blockwire_conformance::dev_shm::mapped_by(std::process::id());
/// assert!(mine.iter().all(|f| f.path.starts_with("/dev/shm")));
/// ```
pub fn mapped_by(pid: u32) -> BTreeSet<ShmFile> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines().filter_map(mapped_file).collect()
}

/// The files of `/dev/shm` (still linked) that process `pid` maps or holds open (a nixl
/// target holds the close fence it published there: [`blockwire_core::kit::fence`]); empty
/// if neither can be read.
///
/// ```
/// let path = format!("/dev/shm/bw-doc-held-{}", std::process::id());
/// let held = std::fs::File::create(&path)?;
/// let mine = blockwire_conformance::dev_shm::mapped_or_held_by(std::process::id());
/// assert!(mine.iter().any(|f| f.path.to_str() == Some(path.as_str())));
/// # drop(held);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn mapped_or_held_by(pid: u32) -> BTreeSet<ShmFile> {
    let mut files = mapped_by(pid);
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return files;
    };
    for fd in fds.filter_map(Result::ok) {
        let Ok(path) = std::fs::read_link(fd.path()) else {
            continue;
        };
        if !path.starts_with(DIR) {
            continue;
        }
        // The inode through the descriptor: the file held, even if its name was reused.
        if let Ok(m) = std::fs::metadata(fd.path()) {
            files.insert(ShmFile { path, ino: m.ino() });
        }
    }
    files
}

/// The `/dev/shm` file a line of `/proc/<pid>/maps` maps (`address perms offset dev inode
/// path`), unless it was unlinked (`(deleted)`).
fn mapped_file(line: &str) -> Option<ShmFile> {
    let mut rest = line;
    let mut fields = Vec::with_capacity(5);
    for _ in 0..5 {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace)?;
        fields.push(&rest[..end]);
        rest = &rest[end..];
    }
    let path = rest.trim();
    if !path.starts_with("/dev/shm/") || path.ends_with(" (deleted)") {
        return None;
    }
    Some(ShmFile {
        path: PathBuf::from(path),
        ino: fields[4].parse().ok()?,
    })
}

/// Of `files`, those still in `/dev/shm` (the same inode under the same name) that this
/// process does not map: left behind by their owners.
///
/// ```
/// use blockwire_conformance::dev_shm::{left_behind, ShmFile};
/// let gone = ShmFile { path: "/dev/shm/no-such-file".into(), ino: 1 };
/// assert!(left_behind(&[gone].into()).is_empty());
/// ```
pub fn left_behind(files: &BTreeSet<ShmFile>) -> Vec<ShmFile> {
    let mine = mapped_by(std::process::id());
    files
        .iter()
        .filter(|f| std::fs::metadata(&f.path).is_ok_and(|m| m.ino() == f.ino))
        .filter(|f| !mine.contains(f))
        .cloned()
        .collect()
}

/// [`left_behind`], once it is empty or `timeout` has passed (closing transports may release
/// their endpoints from their own threads).
///
/// ```
/// use std::time::Duration;
/// assert!(blockwire_conformance::dev_shm::left_behind_after(&Default::default(), Duration::ZERO).is_empty());
/// ```
pub fn left_behind_after(files: &BTreeSet<ShmFile>, timeout: Duration) -> Vec<ShmFile> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = left_behind(files);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The names in `/dev/shm` that libfabric's `shm` provider gives process `pid`'s files
/// (`<pid>:<uid>:<n>`, and `<pid>:<uid>:<n>_<msg>`).
///
/// ```
/// assert!(blockwire_conformance::dev_shm::named_for(u32::MAX).is_empty());
/// ```
pub fn named_for(pid: u32) -> BTreeSet<String> {
    let prefix = format!("{pid}:");
    std::fs::read_dir(Path::new(DIR))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_give_linked_dev_shm_files() {
        let line = "7f1c2a000000-7f1c2b000000 rw-s 00000000 00:1a 1234                       /dev/shm/42:0:0";
        assert_eq!(
            mapped_file(line),
            Some(ShmFile {
                path: "/dev/shm/42:0:0".into(),
                ino: 1234
            })
        );
        for other in [
            "7f1c2a000000-7f1c2b000000 rw-s 00000000 00:1a 1234  /dev/shm/ucx_shm_posix_1 (deleted)",
            "7f1c2a000000-7f1c2b000000 rw-s 00000000 00:01 77  /memfd:lease (deleted)",
            "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]",
            "7f1c2a000000-7f1c2b000000 r-xp 00000000 fe:01 5555  /usr/lib/libc.so.6",
            "garbage",
        ] {
            assert_eq!(mapped_file(other), None, "{other}");
        }
    }
}
