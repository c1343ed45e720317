//! Resources of this process (threads, fds, `/dev/shm` files) before and after a run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The process's threads, open file descriptors, and `/dev/shm` files naming its pid.
pub(super) struct Resources {
    pub(super) threads: BTreeMap<u32, String>,
    pub(super) fds: BTreeMap<u32, String>,
    pub(super) shm: BTreeSet<String>,
}

pub(super) fn names_pid(name: &str, pid: &str) -> bool {
    name.match_indices(pid).any(|(at, _)| {
        let before = name[..at].chars().next_back();
        let after = name[at + pid.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

impl Resources {
    pub(super) fn now() -> Resources {
        let numbered = |dir: &str| -> Vec<(u32, std::path::PathBuf)> {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .filter_map(|e| {
                            let n = e.file_name().to_str()?.parse().ok()?;
                            Some((n, e.path()))
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let threads = numbered("/proc/self/task")
            .into_iter()
            .map(|(tid, path)| {
                let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
                (tid, comm.trim_end().to_owned())
            })
            .collect();
        let fds = numbered("/proc/self/fd")
            .into_iter()
            .map(|(fd, path)| {
                let target = std::fs::read_link(&path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".into());
                (fd, target)
            })
            .collect();
        let pid = std::process::id().to_string();
        let shm = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| names_pid(n, &pid))
                    .collect()
            })
            .unwrap_or_default();
        Resources { threads, fds, shm }
    }

    /// What differs in `later` from `self`, or `None`.
    pub(super) fn difference(&self, later: &Resources) -> Option<String> {
        let mut out = Vec::new();
        if later.threads.len() != self.threads.len() {
            let new: Vec<String> = later
                .threads
                .iter()
                .filter(|(t, _)| !self.threads.contains_key(t))
                .map(|(t, c)| format!("{t} {c:?}"))
                .collect();
            out.push(format!(
                "{} threads, {} before the run (new: {new:?})",
                later.threads.len(),
                self.threads.len()
            ));
        }
        if later.fds.len() != self.fds.len() {
            let new: Vec<String> = later
                .fds
                .iter()
                .filter(|(fd, target)| self.fds.get(fd) != Some(target))
                .map(|(fd, target)| format!("{fd} -> {target}"))
                .collect();
            out.push(format!(
                "{} open fds, {} before the run (new or changed: {new:?})",
                later.fds.len(),
                self.fds.len()
            ));
        }
        let left: Vec<&String> = later.shm.difference(&self.shm).collect();
        if !left.is_empty() {
            out.push(format!("/dev/shm files left: {left:?}"));
        }
        (!out.is_empty()).then(|| out.join("; "))
    }

    /// Waits (up to `timeout`) until the process is back to this snapshot.
    pub(super) fn settled(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(diff) = self.difference(&Resources::now()) else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "{timeout:?} after every transport was closed and dropped: {diff}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
