//! Both sides of the READ lock, on a file of their own: an initiator's guard as a target's
//! close sees it, and a target's close as a guard sees it.

use super::*;
use crate::op::Part;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;

/// A target's endpoint file (in the temp directory, not /dev/shm), removed when dropped.
struct Target(PathBuf);

impl Target {
    fn new() -> Target {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "blockwire-guard-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, b"endpoint").expect("write the file");
        Target(path)
    }

    /// The initiator's open of it.
    fn lock(&self) -> ReadLock {
        ReadLock::open(&self.0)
            .expect("open")
            .expect("the file is there")
    }

    /// Whether a closing target could take the lock now (it then gives it back).
    fn closable(&self) -> bool {
        let file = File::open(&self.0).expect("open");
        wait_exclusive(&file, Duration::ZERO).is_ok()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl ReadTarget for Target {
    fn gone(&self) -> Option<String> {
        (!self.0.exists()).then(|| "its file is gone".to_owned())
    }

    fn describe(&self) -> String {
        "the test target".to_owned()
    }
}

/// Takes `file`'s lock exclusively, as a closing target does, and keeps it (until `file`
/// closes).
fn hold_exclusive(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` on a descriptor `file` owns and keeps open through the call.
    let ret = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(ret, 0, "{}", std::io::Error::last_os_error());
}

fn op(op: Verb, len: usize) -> RmaOp {
    let part = Part {
        local: std::ptr::null_mut(),
        remote: 0,
        len,
    };
    RmaOp::single(op, part, 0)
}

#[test]
fn reads_hold_the_lock_for_at_most_guard_bytes_and_writes_not_at_all() {
    let target = Target::new();
    let lock = target.lock();
    let mut guard = ReadGuard::new(&target, Some(&lock));
    guard.admit(&op(Verb::Write, 4096)).expect("a WRITE");
    guard.posted(&op(Verb::Write, 4096));
    assert!(target.closable(), "a WRITE held the lock");
    let read = op(Verb::Read, GUARD_BYTES / 2);
    guard.admit(&read).expect("a READ");
    assert!(
        !target.closable(),
        "a READ being posted did not hold the lock"
    );
    guard.posted(&read);
    guard.admit(&read).expect("a second READ");
    assert!(!target.closable(), "the lock went back before GUARD_BYTES");
    guard.posted(&read);
    assert!(target.closable(), "the lock was kept past GUARD_BYTES");
    guard.admit(&read).expect("a third READ");
    drop(guard);
    assert!(target.closable(), "a dropped guard kept the lock");
}

#[test]
fn one_posts_guard_ending_leaves_anothers_lock_held() {
    let target = Target::new();
    let lock = target.lock();
    let read = op(Verb::Read, 4096);
    let mut first = ReadGuard::new(&target, Some(&lock));
    let mut second = ReadGuard::new(&target, Some(&lock));
    first.admit(&read).expect("first");
    second.admit(&read).expect("second");
    drop(first);
    assert!(
        !target.closable(),
        "one post's end gave back the lock another post still needs"
    );
    drop(second);
    assert!(target.closable());
}

#[test]
fn a_read_is_refused_once_the_target_closed_or_while_it_closes() {
    let target = Target::new();
    let lock = target.lock();
    let read = op(Verb::Read, 4096);
    // Closing: the target holds the lock.
    let closer = File::open(&target.0).expect("open");
    hold_exclusive(&closer);
    let mut guard = ReadGuard::new(&target, Some(&lock));
    let why = guard
        .admit(&read)
        .expect_err("admitted while the target held the lock");
    assert!(why.contains("is closing"), "{why}");
    drop(closer);
    // Closed: the path is gone. The refusal gives the lock back.
    let closer = File::open(&target.0).expect("open");
    std::fs::remove_file(&target.0).expect("remove");
    let why = guard
        .admit(&read)
        .expect_err("admitted after the path was removed");
    assert!(why.contains("gone"), "{why}");
    assert!(
        wait_exclusive(&closer, Duration::ZERO).is_ok(),
        "a refused READ kept the lock"
    );
}

#[test]
fn a_closing_target_removes_its_file_then_waits_for_a_read_in_flight() {
    let target = Target::new();
    let lock = target.lock();
    let read = op(Verb::Read, 4096);
    let mut guard = ReadGuard::new(&target, Some(&lock));
    guard.admit(&read).expect("a READ in flight");
    let (done, finished) = mpsc::channel();
    let path = target.0.clone();
    let closing = std::thread::spawn(move || {
        let waited = close_to_reads(&path);
        done.send(waited).expect("send");
    });
    let started = Instant::now();
    while target.gone().is_none() {
        assert!(
            started.elapsed() < CLOSE_WAIT,
            "the file was not removed first"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        finished.recv_timeout(Duration::from_millis(100)).is_err(),
        "the close returned while a READ posted before it was in the provider"
    );
    guard.posted(&read);
    drop(guard);
    let waited = finished
        .recv_timeout(CLOSE_WAIT)
        .expect("the close returned");
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    closing.join().expect("join");
}

#[test]
fn a_closing_target_gives_up_on_a_lock_never_given_back() {
    let target = Target::new();
    let lock = target.lock();
    let mut guard = ReadGuard::new(&target, Some(&lock));
    guard.admit(&op(Verb::Read, 4096)).expect("a READ");
    let waited = close_to_reads(&target.0);
    assert!(waited >= CLOSE_WAIT, "{waited:?}");
    assert!(waited < CLOSE_WAIT * 3, "{waited:?}");
}

#[test]
fn an_endpoint_file_that_is_a_fifo_or_a_link_is_refused_at_once() {
    let target = Target::new();
    let fifo = target.0.with_extension("fifo");
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo reads the NUL-terminated path, which lives through the call.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    let link = target.0.with_extension("link");
    std::os::unix::fs::symlink(&target.0, &link).expect("symlink");
    // A FIFO's plain open would wait here for a writer.
    let refused = [
        ReadLock::open(&fifo).is_err(),
        ReadLock::open(&link).is_err(),
    ];
    let _ = std::fs::remove_file(&fifo);
    let _ = std::fs::remove_file(&link);
    assert_eq!(refused, [true, true]);
    assert!(ReadLock::open(&target.0).expect("open").is_some());
}
