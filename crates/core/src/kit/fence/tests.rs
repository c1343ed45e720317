//! Both sides of a close fence in one process: the peer reopens the target's memfd and maps
//! its page as a peer process does (`/proc/self/fd/<n>`), so the two sides share memory only
//! through the page.

use super::*;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::mpsc;

/// The two ways a peer gets the fence: by its reference, or by a duplicate of its memfd.
const OPENS: [&str; 2] = ["reference", "duplicate"];

fn open(how: &str, target: &CloseFence) -> Option<Arc<PeerFence>> {
    match how {
        "reference" => PeerFence::open(&target.reference()),
        _ => {
            // SAFETY: F_DUPFD_CLOEXEC on the fence's descriptor, open while `target` lives; the
            // result is a new descriptor of this process or -1.
            let dup = unsafe { libc::fcntl(target.raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
            // SAFETY: a descriptor just made, owned by nobody else (or -1, refused first).
            let dup = (dup >= 0).then(|| unsafe { OwnedFd::from_raw_fd(dup) })?;
            PeerFence::from_duplicate(&dup, std::process::id()).ok()
        }
    }
}

fn pair(how: &str) -> (Arc<CloseFence>, Arc<PeerFence>) {
    let target = CloseFence::create().expect("create");
    let peer = open(how, &target).expect("reopen");
    (Arc::new(target), peer)
}

/// A process id no process has: a child's, once reaped.
fn a_dead_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

/// Closes `target` on a thread of its own: the result comes on the receiver.
fn close_on_a_thread(
    target: &Arc<CloseFence>,
) -> (
    mpsc::Receiver<Result<Duration, Duration>>,
    std::thread::JoinHandle<()>,
) {
    let (done, finished) = mpsc::channel();
    let target = target.clone();
    let thread = std::thread::spawn(move || done.send(target.close()).expect("send"));
    (finished, thread)
}

#[test]
fn a_post_is_held_before_the_close_and_refused_after_it() {
    for how in OPENS {
        let (target, peer) = pair(how);
        drop(peer.hold().expect("before the close"));
        assert!(target.close().is_ok(), "{how}");
        let why = peer
            .hold()
            .err()
            .expect("a post after the close was admitted");
        assert!(why.contains("closed"), "{how}: {why}");
        assert!(target.close().is_ok(), "{how}: a second close");
    }
}

#[test]
fn the_close_marks_first_then_waits_for_a_post_in_flight() {
    for how in OPENS {
        let (target, peer) = pair(how);
        let other = open(how, &target).expect("a second peer");
        let post = peer.hold().expect("a post in flight");
        let (finished, closing) = close_on_a_thread(&target);
        // Marked before the wait: a post that checks now is refused.
        let started = Instant::now();
        while other.hold().is_ok() {
            assert!(started.elapsed() < CLOSE_WAIT, "{how}: no mark first");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            finished.recv_timeout(Duration::from_millis(100)).is_err(),
            "{how}: the close returned while a post that checked before it was running"
        );
        drop(post);
        let waited = finished
            .recv_timeout(CLOSE_WAIT)
            .expect("the close returned")
            .expect("within the bound");
        assert!(waited >= Duration::from_millis(100), "{how}: {waited:?}");
        closing.join().expect("join");
    }
}

#[test]
fn one_posts_end_leaves_anothers_hold_in_place() {
    for how in OPENS {
        let (target, peer) = pair(how);
        let first = peer.hold().expect("first");
        let second = peer.hold().expect("second");
        drop(first);
        let (finished, closing) = close_on_a_thread(&target);
        assert!(
            finished.recv_timeout(Duration::from_millis(100)).is_err(),
            "{how}: one post's end let the close past another post still holding"
        );
        drop(second);
        assert!(finished.recv_timeout(CLOSE_WAIT).expect("returned").is_ok());
        closing.join().expect("join");
    }
}

#[test]
fn a_peer_whose_process_is_gone_holds_no_close() {
    for how in OPENS {
        let (target, peer) = pair(how);
        let _killed_inside_a_post = peer.hold().expect("a post");
        peer.slot.set_pid(a_dead_pid());
        let waited = target.close().expect("the close waited for a dead process");
        assert!(waited < CLOSE_WAIT, "{how}: {waited:?}");
        assert!(peer.hold().is_err(), "{how}: a post after the close");
    }
}

#[test]
fn a_full_page_takes_over_a_dead_peers_slot_only() {
    let target = CloseFence::create().expect("create");
    let peers: Vec<_> = (0..page::SLOTS)
        .map(|i| PeerFence::open(&target.reference()).unwrap_or_else(|| panic!("peer {i}")))
        .collect();
    assert!(
        PeerFence::open(&target.reference()).is_none(),
        "a slot past the page's"
    );
    // A peer that died inside a post: its slot is taken over, its count with it.
    let dead = peers[7].hold().expect("a post");
    peers[7].slot.set_pid(a_dead_pid());
    std::mem::forget(dead);
    let late = PeerFence::open(&target.reference()).expect("the dead peer's slot");
    assert_eq!(late.slot.index(), peers[7].slot.index());
    let post = late.hold().expect("a post");
    drop(post);
    assert!(target.close().is_ok(), "the dead peer's count was kept");
    drop(peers);
}

#[test]
fn a_duplicate_of_anything_but_a_fence_is_refused() {
    let not_sealed = File::open("/proc/self/exe").expect("open");
    assert!(PeerFence::from_duplicate(&not_sealed, 1).is_err());
    let sealed = crate::kit::sealed_memfd(c"not a fence", 4096).expect("memfd");
    let why = PeerFence::from_duplicate(&sealed, 1)
        .err()
        .expect("refused");
    assert!(why.contains("magic"), "{why}");
    let short = crate::kit::sealed_memfd(c"short", 64).expect("memfd");
    assert!(PeerFence::from_duplicate(&short, 1).is_err());
}

#[test]
fn the_close_gives_up_on_a_post_that_never_returns() {
    for how in OPENS {
        let (target, peer) = pair(how);
        let _stuck = peer.hold().expect("a post");
        let waited = target.close().expect_err("the close waited it out");
        assert!(waited >= CLOSE_WAIT, "{how}: {waited:?}");
        assert!(waited < CLOSE_WAIT * 3, "{how}: {waited:?}");
    }
}

#[test]
fn only_the_fence_named_is_reopened() {
    let target = CloseFence::create().expect("create");
    let mut wrong = target.reference();
    wrong.token[0] ^= 1;
    assert!(PeerFence::open(&wrong).is_none(), "a wrong token");
    let stdin = FenceRef {
        fd: 0,
        ..target.reference()
    };
    assert!(PeerFence::open(&stdin).is_none(), "another descriptor");
    let gone = FenceRef {
        pid: u32::MAX,
        ..target.reference()
    };
    assert!(PeerFence::open(&gone).is_none(), "no such process");
}

#[test]
fn a_malformed_reference_is_refused() {
    let bytes = AddressWriter::new(b"").u8(2).finish();
    assert!(FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).is_err());
    let bytes = AddressWriter::new(b"")
        .u8(1)
        .u64(u64::MAX)
        .u64(3)
        .bytes(&[0; TOKEN_LEN])
        .finish();
    assert!(FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).is_err());
    let bytes = AddressWriter::new(b"")
        .u8(1)
        .u64(1)
        .u64(3)
        .bytes(&[0; 4])
        .finish();
    assert!(FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).is_err());
    let bytes = FenceRef::write(None, AddressWriter::new(b"")).finish();
    assert_eq!(
        FenceRef::read(&mut AddressReader::new("x", b"", &bytes).expect("reader")).expect("read"),
        None
    );
}

/// A key no other test (or process) publishes under.
fn key(what: &str) -> Vec<u8> {
    format!("fence test {what} in process {}", std::process::id()).into_bytes()
}

#[test]
fn a_published_fence_is_found_by_its_key_and_holds_like_the_addressed_one() {
    let key = key("published");
    let mut target = CloseFence::create().expect("create");
    target.publish(&key).expect("publish");
    let found = FenceRef::published(&key).expect("published");
    assert_eq!(found, target.reference());
    assert_eq!(FenceRef::published(b"another key"), None);
    let peer = PeerFence::open(&found).expect("reopen");
    drop(peer.hold().expect("before the close"));
    assert!(target.close().is_ok());
    assert!(peer.hold().is_err(), "a post after the close");
    // Still there after the close (a peer connecting late is refused by the mark), gone with
    // the fence.
    assert_eq!(FenceRef::published(&key), Some(found));
    drop(target);
    assert_eq!(FenceRef::published(&key), None);
    assert!(!published::path_of(&key).exists());
}

#[test]
fn a_key_published_already_is_not_taken_over_and_a_malformed_file_is_ignored() {
    let key = key("taken");
    let mut first = CloseFence::create().expect("create");
    first.publish(&key).expect("publish");
    let mut second = CloseFence::create().expect("create");
    assert!(
        second.publish(&key).is_err(),
        "took over another fence's key"
    );
    assert_eq!(FenceRef::published(&key), Some(first.reference()));
    drop(second);
    assert_eq!(
        FenceRef::published(&key),
        Some(first.reference()),
        "the loser removed it"
    );
    drop(first);
    let key = self::key("malformed");
    let path = published::path_of(&key);
    for bad in [&b""[..], b"BWFPUB01", &[0u8; 32], &[b'B'; 33]] {
        std::fs::write(&path, bad).expect("write");
        assert_eq!(FenceRef::published(&key), None, "{bad:?}");
    }
    std::fs::remove_file(&path).expect("remove");
    // A FIFO under the key's name (anyone may make one) is not opened: the read does not wait.
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo reads the NUL-terminated path, which lives through the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    assert_eq!(FenceRef::published(&key), None);
    std::fs::remove_file(&path).expect("remove");
}

/// A reference's file as a process that ended without dropping its fence leaves it: whole,
/// and held by no one (another test's publish may sweep it at once). Its path and content.
fn leave_published(key: &[u8]) -> (std::path::PathBuf, Vec<u8>) {
    let path = published::path_of(key);
    let content = {
        let mut target = CloseFence::create().expect("create");
        target.publish(key).expect("publish");
        std::fs::read(&path).expect("read")
    };
    std::fs::write(&path, &content).expect("write it back, unheld");
    (path, content)
}

#[test]
fn publishing_removes_the_files_of_ended_processes_and_takes_over_its_own_key() {
    let (left, _) = leave_published(&key("left"));
    let mut live = CloseFence::create().expect("create");
    live.publish(&key("live")).expect("publish");
    let mut fence = CloseFence::create().expect("create");
    fence.publish(&key("sweeper")).expect("publish");
    assert!(
        !left.exists(),
        "the file of an ended process is still there"
    );
    assert_eq!(
        FenceRef::published(&key("live")),
        Some(live.reference()),
        "a live fence's file was removed"
    );
    // A file of its own key that an ended process left is taken over.
    let own = key("own");
    leave_published(&own);
    let mut next = CloseFence::create().expect("create");
    next.publish(&own)
        .expect("take over a file no process holds");
    assert_eq!(FenceRef::published(&own), Some(next.reference()));
    drop(next);
    assert_eq!(FenceRef::published(&own), None);
}

#[test]
fn a_sweep_spares_held_files_young_malformed_ones_and_other_names() {
    let dir = std::env::temp_dir().join(format!("bw-fence-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (path, whole) = leave_published(&key("sweep content"));
    let _ = std::fs::remove_file(path);
    let file = |name: &str, content: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, content).expect("write");
        path
    };
    let left = file("blockwire-fence-left", &whole);
    let young = file("blockwire-fence-young", b"BWFPUB01");
    let old = file("blockwire-fence-old", b"BWFPUB01");
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .and_then(|f| f.set_modified(hour_ago))
        .expect("age it");
    let other = file("another-file", &whole);
    // Neither a FIFO (whose open would wait for a writer) nor a link is opened.
    let fifo = dir.join("blockwire-fence-fifo");
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo reads the NUL-terminated path, which lives through the call.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o644) }, 0);
    let link = dir.join("blockwire-fence-link");
    std::os::unix::fs::symlink(&other, &link).expect("symlink");
    let held = file("blockwire-fence-held", &whole);
    let holder = std::fs::File::open(&held).expect("open");
    assert!(super::flock::try_flock(&holder, libc::LOCK_SH).expect("flock"));
    assert_eq!(published::sweep(&dir), 2);
    assert!(!left.exists() && !old.exists());
    assert!(young.exists() && other.exists() && held.exists());
    assert!(fifo.exists() && link.symlink_metadata().is_ok());
    drop(holder);
    assert_eq!(published::sweep(&dir), 1, "the held file, once let go");
    std::fs::remove_dir_all(&dir).expect("remove");
}

#[test]
fn publishers_sweeping_each_other_all_publish() {
    // Each publish sweeps /dev/shm, taking every unheld fence file's lock for a moment: a
    // publisher whose new file another's sweep is looking at waits for the lock, not fails,
    // and the sweep leaves a file made and not yet written.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..100 {
                    let key = key(&format!("racing {t} {i}"));
                    let mut fence = CloseFence::create().expect("create");
                    fence
                        .publish(&key)
                        .unwrap_or_else(|e| panic!("publish {t} {i}: {e}"));
                    // No sweep removed it, not even one that saw it made and not yet written.
                    assert_eq!(FenceRef::published(&key), Some(fence.reference()));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a publisher failed");
    }
}
