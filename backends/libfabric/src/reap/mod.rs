//! Files that libfabric's `shm` provider left in `/dev/shm` for processes that are gone, and
//! their removal: [`reap_stale_shm_files`] says what is removed and why that is safe.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use blockwire_core::BackendErrorKind;
use blockwire_core::kit::ProcessWatch;
use blockwire_core::kit::process::start_time;

/// Where `shm_open` creates its files (glibc on Linux).
pub(crate) const SHM_DIR: &str = "/dev/shm";

/// How much earlier than a live process's start a file's ctime must be for the file to count
/// as a previous process's: the file's timestamp is coarse (a tick behind at most), the start
/// time is in clock ticks (rounded down, which only makes files look newer).
pub(crate) const MARGIN: std::time::Duration = std::time::Duration::from_millis(100);

/// What [`reap_stale_shm_files`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ReapReport {
    /// The files removed (each also logged at info level).
    pub removed: Vec<PathBuf>,
    /// Stale files that could not be removed, with the error (each also logged as a warning).
    pub failed: Vec<(PathBuf, io::Error)>,
}

/// Removes the files that libfabric's `shm` provider left in `/dev/shm` for processes that are
/// gone, owned by this user, and nothing else. Each removal is logged at info level (target
/// `blockwire_libfabric::reap`), each failure as a warning; `Err` only when `/dev/shm` cannot
/// be listed. Every [`OfiBackend`](crate::OfiBackend) opened with `provider=shm` calls it
/// first; an operator can call it at any time, also while other processes use the provider.
///
/// **What the provider creates** (libfabric 1.17, Debian 12's; the same naming through 2.0):
/// each endpoint is named `fi_shm://<pid>:<uid>:<n>` (`getpid()`, `getuid()`, the process's
/// count of endpoints opened so far, all `%d`) and, when it is enabled, `shm_open`s its region
/// `/dev/shm/<pid>:<uid>:<n>` (16 MiB here), whose header holds the creator's pid, written last
/// (offset 4, an `int`). The file is unlinked when the endpoint closes, and by the provider's
/// handler of `SIGINT`, `SIGTERM`, `SIGSEGV` and `SIGBUS`; a process that dies any other way
/// (`SIGKILL`, the OOM killer, `abort`) leaves it. With `FI_SHM_SAR_THRESHOLD` set below its
/// default (unlimited) a sender also creates `<pid>:<uid>:<n>_<msg>` per large message, which
/// its receiver unlinks. Nothing else the provider makes lives in `/dev/shm` with these names
/// (its `ze_` sockets exist only for Level Zero device memory, which this backend never asks
/// for, and endpoints named by the application (`fi_ns://`) carry no pid: neither is touched).
///
/// **What is removed**: an entry of `/dev/shm` whose name is exactly one of those two forms
/// (decimal fields as `%d` writes them, pid > 0, the uid field equal to this process's real
/// uid), that is a regular file (not followed if a link) owned by this process's effective uid,
/// and whose process is gone:
///
/// - the pid names no process, or one that has exited (a zombie counts: it no longer maps
///   anything, and its pid cannot be reused before it is reaped). Decided by a pidfd, so a
///   thread-group leader that exited while other threads run is alive. For a region file, the
///   header must also name that pid (so a file some application named like this, with other
///   contents, is kept);
/// - or, for a region file only, the pid is alive but is another process than the creator:
///   the process started after the file's last status change (its ctime, which no call can set
///   into the past) by more than 100 ms, and it does not map the file (`/proc/<pid>/maps`,
///   device and inode). A restarted worker in a container gets the same pid again, and then
///   libfabric refuses its first endpoint (`smr_create` finds the file, sees its pid alive and
///   returns `EBUSY`).
///
/// **Why a live process's file is never removed**: only the process whose pid is in the name
/// creates it, and that process maps its region from `smr_create` until `smr_free` (which
/// unlinks before unmapping). A dead pid therefore means a dead owner; other processes that
/// still map the file (its peers) keep their mappings: unlinking removes the name, not the
/// memory. For a live pid both tests must agree: the start time alone relies on the wall clock
/// (a file's ctime is wall time, a process's start is time since boot, and a forward step of the
/// clock makes old files look older), the mapping alone has a gap of microseconds inside
/// `smr_create` (between `shm_open` and `mmap`), which the start time closes (the file is then
/// newer than its process). The `/proc/<pid>` directory's own timestamps are no substitute:
/// procfs sets them when the inode is first looked up, which may be long after the process
/// started and after it created its files. Anything that cannot be read (the process's `stat`
/// or `maps`, the header) keeps the file. Just before the unlink the name is looked up again
/// and must still be the same inode with the same ctime.
///
/// **Assumed**: every process that uses `/dev/shm` is in this process's pid namespace, as
/// libfabric's own names and checks assume (its `smr_create` reuses a file whose pid has no
/// `/proc` entry). Two containers sharing `/dev/shm` but not their pid namespace would see each
/// other's files as a dead process's: do not share `/dev/shm` that way (libfabric's `shm`
/// provider does not work across pid namespaces either: its names collide, and its CMA copies
/// address peers by pid).
///
/// ```
/// let report = blockwire_libfabric::reap_stale_shm_files()?;
/// for path in &report.removed {
///     println!("removed {}", path.display());
/// }
/// for (path, error) in &report.failed {
///     eprintln!("could not remove {}: {error}", path.display());
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn reap_stale_shm_files() -> io::Result<ReapReport> {
    reap_dir(Path::new(SHM_DIR))
}

/// [`reap_stale_shm_files`] at the open of a `shm` endpoint: a failure to list is logged.
pub(crate) fn at_open() {
    if let Err(e) = reap_stale_shm_files() {
        tracing::warn!(dir = SHM_DIR, error = %e, "could not list stale libfabric shm files");
    }
}

/// One of the provider's names, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShmName {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    /// `<pid>:<uid>:<n>_<msg>`: a large message's file, not an endpoint's region.
    pub(crate) message: bool,
}

/// A decimal number as `%d` prints a non-negative one: digits, no sign, no leading zero.
fn decimal(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// Parses `<pid>:<uid>:<n>` or `<pid>:<uid>:<n>_<msg>` exactly (see the module docs).
pub(crate) fn parse_name(name: &str) -> Option<ShmName> {
    let mut fields = name.split(':');
    let (pid, uid, last) = (fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() {
        return None;
    }
    let (n, message) = match last.split_once('_') {
        Some((n, msg)) => {
            decimal(msg)?;
            (n, true)
        }
        None => (last, false),
    };
    decimal(n).filter(|&n| n <= i32::MAX as u64)?;
    let pid = decimal(pid)
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 0 && p <= i32::MAX as u32)?;
    let uid = decimal(uid).and_then(|u| u32::try_from(u).ok())?;
    Some(ShmName { pid, uid, message })
}

/// The process a name's pid gives, as far as this process can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// No such process, or it has exited.
    Gone,
    /// A live process, started at this wall-clock time (nanoseconds since the epoch).
    Alive { started_ns: i128 },
    /// Cannot tell (the pid names a thread, `/proc` unreadable...): the file is kept.
    Unknown,
}

/// Why a file is removed, or kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Stale(&'static str),
    Keep(&'static str),
}

/// The verdict on a file of the provider's naming, owned by this user, whose ctime is
/// `ctime_ns` (wall clock): `maps` says whether the live owner maps it (`None`: unknown), and
/// is asked only when its answer matters.
fn decide(
    name: ShmName,
    ctime_ns: i128,
    owner: Owner,
    maps: impl FnOnce() -> Option<bool>,
) -> Decision {
    match owner {
        Owner::Gone => Decision::Stale("its process is gone"),
        Owner::Unknown => Decision::Keep("its process cannot be examined"),
        // A live sender's message file waits for its receiver, unmapped: never taken.
        Owner::Alive { .. } if name.message => Decision::Keep("its process is alive"),
        Owner::Alive { started_ns } => {
            if ctime_ns + MARGIN.as_nanos() as i128 >= started_ns {
                return Decision::Keep("its process is alive and may have made it");
            }
            match maps() {
                Some(false) => Decision::Stale("its pid now names a process started after it"),
                Some(true) => Decision::Keep("its process maps it"),
                None => Decision::Keep("its process's mappings cannot be read"),
            }
        }
    }
}

/// Whether the pid in a name is alive, and since when.
fn owner(pid: u32) -> Owner {
    match ProcessWatch::open(pid, None) {
        Err(e) if e.kind() == BackendErrorKind::RemoteDisconnect => Owner::Gone,
        Err(_) => Owner::Unknown,
        Ok(watch) if watch.has_exited() => Owner::Gone,
        Ok(_) => match (start_time(pid), boot_wall_ns(), clock_ticks()) {
            (Ok(ticks), Some(boot), Some(hz)) => Owner::Alive {
                started_ns: boot + i128::from(ticks) * 1_000_000_000 / hz,
            },
            _ => Owner::Unknown,
        },
    }
}

/// The wall-clock time of boot in nanoseconds (now on `CLOCK_REALTIME` minus now on
/// `CLOCK_BOOTTIME`, the clock of `/proc/<pid>/stat`'s start time).
fn boot_wall_ns() -> Option<i128> {
    let now = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
        let ret = unsafe { libc::clock_gettime(clock, &mut ts) };
        (ret == 0).then(|| i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
    };
    Some(now(libc::CLOCK_REALTIME)? - now(libc::CLOCK_BOOTTIME)?)
}

/// Clock ticks per second (the unit of a process's start time).
fn clock_ticks() -> Option<i128> {
    // SAFETY: sysconf takes a constant and returns a number.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(i128::from(hz))
}

/// Whether process `pid` maps the file with device `dev` and inode `ino` (`None`: its
/// mappings cannot be read, or a line is not understood).
fn maps_file(pid: u32, dev: u64, ino: u64) -> Option<bool> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut found = false;
    for line in maps.lines() {
        // address perms offset major:minor inode [path]
        let mut fields = line.split_ascii_whitespace().skip(3);
        let (device, inode) = (fields.next()?, fields.next()?);
        let (a, b) = device.split_once(':')?;
        let (a, b) = (
            u32::from_str_radix(a, 16).ok()?,
            u32::from_str_radix(b, 16).ok()?,
        );
        let inode: u64 = inode.parse().ok()?;
        found |= a == major && b == minor && inode == ino;
    }
    Some(found)
}

/// The file's last status change, in nanoseconds since the epoch.
fn ctime_ns(meta: &Metadata) -> i128 {
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
}

/// The same inode, unchanged since `first` was read.
fn unchanged(first: &Metadata, now: &Metadata) -> bool {
    first.dev() == now.dev() && first.ino() == now.ino() && ctime_ns(first) == ctime_ns(now)
}

/// The pid a region file's header names (offset 4, native `int`), read through a descriptor
/// of the same inode as `meta`; `None` if it is not that inode or too short.
fn header_pid(path: &Path, meta: &Metadata) -> Option<i32> {
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let now = file.metadata().ok()?;
    if !unchanged(meta, &now) || !now.file_type().is_file() {
        return None;
    }
    let mut head = [0u8; 8];
    file.read_exact_at(&mut head, 0).ok()?;
    Some(i32::from_ne_bytes([head[4], head[5], head[6], head[7]]))
}

/// This process's real and effective uid.
fn uids() -> (u32, u32) {
    // SAFETY: getuid and geteuid take nothing and cannot fail.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// Examines one entry of `/dev/shm` (or of a test's directory): the metadata it had and the
/// reason, when it is a stale file of the provider to be removed.
fn examine(path: &Path, name: &str, (uid, euid): (u32, u32)) -> Option<(Metadata, &'static str)> {
    let parsed = parse_name(name)?;
    if parsed.uid != uid {
        return None;
    }
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.uid() != euid {
        return None;
    }
    // The process is examined after the file was seen, for each file (never from an earlier
    // look): gone then means that every process that had this pid when the file was made is
    // gone. A later process given the pid does not take such a file over: libfabric's
    // smr_create refuses a region whose header names a live pid (its own included) and adopts
    // only one whose header pid is 0, which is kept here (below); to reuse a message file's
    // name it would have to start, open an endpoint and send within the microseconds until
    // the unlink.
    let decision = decide(parsed, ctime_ns(&meta), owner(parsed.pid), || {
        maps_file(parsed.pid, meta.dev(), meta.ino())
    });
    let why = match decision {
        Decision::Stale(why) => why,
        Decision::Keep(why) => {
            tracing::trace!(path = %path.display(), why, "libfabric shm file kept");
            return None;
        }
    };
    if !parsed.message && header_pid(path, &meta) != i32::try_from(parsed.pid).ok() {
        tracing::debug!(path = %path.display(), "kept: its header does not name the pid of its name");
        return None;
    }
    Some((meta, why))
}

/// What became of one entry.
enum Outcome {
    Removed,
    /// Not a stale file of the provider, or removed by someone else first.
    Left,
    Failed(io::Error),
}

/// Removes the entry `path` (named `name`) if it is a stale file of the provider.
fn reap_path(path: &Path, name: &str, ids: (u32, u32)) -> Outcome {
    let Some((meta, why)) = examine(path, name, ids) else {
        return Outcome::Left;
    };
    // The name may have been replaced since it was examined.
    match std::fs::symlink_metadata(path) {
        Ok(now) if unchanged(&meta, &now) => {}
        _ => return Outcome::Left,
    }
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), why, "removed a stale libfabric shm file");
            Outcome::Removed
        }
        // Another reaper (a transport opening in another thread or process) was first.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Outcome::Left,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a stale libfabric shm file");
            Outcome::Failed(e)
        }
    }
}

/// [`reap_stale_shm_files`] over `dir`.
fn reap_dir(dir: &Path) -> io::Result<ReapReport> {
    let ids = uids();
    let mut report = ReapReport::default();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        match reap_path(&path, name, ids) {
            Outcome::Removed => report.removed.push(path),
            Outcome::Left => {}
            Outcome::Failed(e) => report.failed.push((path, e)),
        }
    }
    Ok(report)
}

/// Removes `path`, a file in `/dev/shm`, if it is a stale file of the provider (the rules of
/// [`reap_stale_shm_files`]): for a peer's file once its process exited. Returns whether it
/// did.
pub(crate) fn reap_one(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    path.parent() == Some(Path::new(SHM_DIR))
        && matches!(reap_path(path, name, uids()), Outcome::Removed)
}

#[cfg(test)]
mod tests;
