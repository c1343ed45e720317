//! The reaper's decisions, on files in a private directory and on this process's own.

use super::*;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

/// A private directory (not /dev/shm, which other processes use), removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "blockwire-reap-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        Dir(path)
    }

    /// A file named `name` whose header names `header_pid` (like a region's).
    fn region(&self, name: &str, header_pid: i32) -> PathBuf {
        let path = self.0.join(name);
        let mut head = [0u8; 64];
        head[0] = 4;
        head[4..8].copy_from_slice(&header_pid.to_ne_bytes());
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&head))
            .expect("write");
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

#[test]
fn only_the_providers_names_parse() {
    let region = |pid, uid| {
        Some(ShmName {
            pid,
            uid,
            message: false,
        })
    };
    assert_eq!(parse_name("31901:1000:0"), region(31901, 1000));
    assert_eq!(parse_name("1:0:17"), region(1, 0));
    assert_eq!(
        parse_name("42:0:1_7"),
        Some(ShmName {
            pid: 42,
            uid: 0,
            message: true
        })
    );
    for other in [
        "",
        "0:0:0",
        "042:0:0",
        "42:00:0",
        "42:0:01",
        "42:0",
        "42:0:0:0",
        "42:0:0_",
        "42:0:0_x",
        "42:0:0_1_2",
        "+42:0:0",
        "-42:0:0",
        "42:-1:0",
        "42:0:0 ",
        "fi_shm://42:0:0",
        "42:0:0x",
        "99999999999:0:0",
        "ucx_shm_posix_1a2b",
        "ze_42:0",
        "sem.42:0:0",
        "my-endpoint",
    ] {
        assert_eq!(parse_name(other), None, "{other:?}");
    }
}

#[test]
fn a_live_pid_keeps_its_file_unless_it_started_after_it_and_does_not_map_it() {
    let name = parse_name("7:0:0").expect("name");
    let message = parse_name("7:0:0_3").expect("name");
    let second = 1_000_000_000i128;
    let file = 100 * second;
    let started = |at| Owner::Alive { started_ns: at };
    let never = || -> Option<bool> { panic!("mappings read for nothing") };
    assert!(matches!(
        decide(name, file, Owner::Gone, never),
        Decision::Stale(_)
    ));
    assert!(matches!(
        decide(message, file, Owner::Gone, never),
        Decision::Stale(_)
    ));
    assert!(matches!(
        decide(name, file, Owner::Unknown, never),
        Decision::Keep(_)
    ));
    // Started before the file, or within the margin after it: its own, maybe.
    for at in [file - second, file, file + MARGIN.as_nanos() as i128] {
        assert!(matches!(
            decide(name, file, started(at), never),
            Decision::Keep(_)
        ));
    }
    // Started well after: another process, unless it maps the file or cannot be read.
    let later = started(file + 10 * second);
    assert!(matches!(
        decide(name, file, later, || Some(false)),
        Decision::Stale(_)
    ));
    assert!(matches!(
        decide(name, file, later, || Some(true)),
        Decision::Keep(_)
    ));
    assert!(matches!(
        decide(name, file, later, || None),
        Decision::Keep(_)
    ));
    // A live sender's message file waits for its receiver.
    assert!(matches!(
        decide(message, file, later, never),
        Decision::Keep(_)
    ));
}

/// Tries `case` up to 5 times while it reports that another process of the host raced it
/// (`None`: a pid reused or taken meanwhile), so a race is retried, never passed unchecked.
fn without_races(what: &str, mut case: impl FnMut() -> Option<()>) {
    for attempt in 1..=5 {
        if case().is_some() {
            return;
        }
        eprintln!("{what}: raced by another process (attempt {attempt}); again");
    }
    panic!("{what}: raced by other processes 5 times in a row; not checked");
}

#[test]
fn a_dead_processs_files_are_removed_and_nothing_else() {
    without_races("a dead pid", dead_processs_files_are_removed);
}

fn dead_processs_files_are_removed() -> Option<()> {
    let dir = Dir::new();
    let (uid, _) = uids();
    let dead = dead_pid();
    let me = std::process::id();
    let region = dir.region(&format!("{dead}:{uid}:0"), dead as i32);
    let message = dir.region(&format!("{dead}:{uid}:3_12"), 0);
    let kept = [
        // This process's own: alive, and the file is newer than it.
        dir.region(&format!("{me}:{uid}:900"), me as i32),
        // Another uid in the name.
        dir.region(&format!("{dead}:{}:0", uid + 1), dead as i32),
        // Not the provider's naming.
        dir.region(&format!("{dead}:{uid}:0x"), dead as i32),
        dir.region(&format!("0{dead}:{uid}:0"), dead as i32),
        dir.region(&format!("{dead}:{uid}"), dead as i32),
        dir.region(&format!("ucx_shm_posix_{dead}"), dead as i32),
        // A header naming another pid (an application's file named like this).
        dir.region(&format!("{dead}:{uid}:1"), dead as i32 + 1),
    ];
    // A link named like a stale region, to a file that must survive it.
    let target = dir.region("target", dead as i32);
    let link = dir.0.join(format!("{dead}:{uid}:2"));
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    // A directory named like one.
    let subdir = dir.0.join(format!("{dead}:{uid}:4"));
    std::fs::create_dir(&subdir).expect("mkdir");

    let report = reap_dir(&dir.0).expect("reap");
    if owner(dead) != Owner::Gone {
        // The pid was reused meanwhile.
        return None;
    }
    let mut removed = report.removed.clone();
    removed.sort();
    let mut expected = vec![region.clone(), message.clone()];
    expected.sort();
    assert_eq!(removed, expected, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(!region.exists() && !message.exists());
    for path in kept.iter().chain([&target, &subdir]) {
        assert!(path.exists(), "{} was removed", path.display());
    }
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "the link was removed"
    );
    // Nothing is left to remove.
    assert!(reap_dir(&dir.0).expect("reap").removed.is_empty());
    Some(())
}

#[test]
fn a_live_childs_file_is_kept() {
    let dir = Dir::new();
    let (uid, _) = uids();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn");
    let pid = child.id();
    // Created after the child started: the child's own, as far as anyone can tell.
    let file = dir.region(&format!("{pid}:{uid}:0"), pid as i32);
    let message = dir.region(&format!("{pid}:{uid}:0_1"), 0);
    let report = reap_dir(&dir.0).expect("reap");
    child.kill().expect("kill");
    child.wait().expect("wait");
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(file.exists() && message.exists());
    // Once it is gone, both go.
    let report = reap_dir(&dir.0).expect("reap");
    assert_eq!(report.removed.len(), 2, "{report:?}");
}

#[test]
#[ignore = "needs root (to give a file to another user); .ci/run runs it"]
fn another_users_file_is_kept() {
    assert_eq!(uids().1, 0, "needs root, to give a file to another user");
    let dir = Dir::new();
    let dead = dead_pid();
    let file = dir.region(&format!("{dead}:0:0"), dead as i32);
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).expect("chown");
    let report = reap_dir(&dir.0).expect("reap");
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(file.exists());
}

/// A file left by a process whose pid a later process has: removed, though that pid is
/// alive. As root, the next pid is chosen through `/proc/sys/kernel/ns_last_pid`; if
/// another process of the host takes it first, the case is tried again.
#[test]
#[ignore = "needs root (to choose the next pid); .ci/run runs it"]
fn a_file_older_than_the_live_process_with_its_pid_is_removed() {
    assert_eq!(uids().1, 0, "needs root, to choose the next pid");
    without_races("the next pid", older_file_of_a_live_pid_is_removed);
}

fn older_file_of_a_live_pid_is_removed() -> Option<()> {
    const LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";
    let dir = Dir::new();
    let last: u32 = std::fs::read_to_string(LAST_PID)
        .expect("ns_last_pid")
        .trim()
        .parse()
        .expect("a pid");
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number");
    // Well above the last pid, or, when that is past `pid_max`, after the kernel's wrap (it
    // hands out no pid under 300 then).
    let pid = (last + 1000..max)
        .chain(300..last)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap_or_else(|| panic!("no free pid under {max}"));
    let file = dir.region(&format!("{pid}:0:0"), pid as i32);
    let message = dir.region(&format!("{pid}:0:0_1"), 0);
    std::thread::sleep(MARGIN * 2);
    std::fs::write(LAST_PID, format!("{}", pid - 1)).expect("write ns_last_pid");
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn");
    let got = child.id();
    let report = reap_dir(&dir.0).expect("reap");
    child.kill().expect("kill");
    child.wait().expect("wait");
    if got != pid {
        // Another process took the pid first.
        return None;
    }
    assert_eq!(report.removed, vec![file.clone()], "{report:?}");
    assert!(!file.exists());
    // A message file of a live sender stays (its receiver may not have taken it yet).
    assert!(message.exists());
    Some(())
}

#[test]
fn a_file_this_process_maps_is_seen_as_mapped() {
    let dir = Dir::new();
    let path = dir.region("mapped", 1);
    let file = std::fs::File::open(&path).expect("open");
    let meta = file.metadata().expect("stat");
    let me = std::process::id();
    assert_eq!(maps_file(me, meta.dev(), meta.ino()), Some(false));
    // SAFETY: a fresh read-only shared mapping of 64 bytes of a file this test owns,
    // unmapped below; nothing reads through it.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            64,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    assert_eq!(maps_file(me, meta.dev(), meta.ino()), Some(true));
    // SAFETY: the mapping made above, unmapped once.
    unsafe { libc::munmap(at, 64) };
}

#[test]
fn reap_one_takes_only_dev_shm_paths() {
    let dir = Dir::new();
    let (uid, _) = uids();
    let dead = dead_pid();
    let file = dir.region(&format!("{dead}:{uid}:0"), dead as i32);
    assert!(!reap_one(&file), "reap_one removed a file outside /dev/shm");
    assert!(file.exists());
}
