//! The shm provider keeps a file in /dev/shm per endpoint: closing the backend removes it, and
//! opening one removes those of dead processes unless told not to.

use std::collections::BTreeSet;
use std::ptr::NonNull;

use blockwire_core::{BackendOptions, OpenBackend, RegionSpan};
use blockwire_libfabric::OfiBackend;
use parking_lot::Mutex;

/// The tests that look at /dev/shm run one at a time (each open of the shm provider removes
/// dead processes' files, and one counts the files its open made).
static DEV_SHM: Mutex<()> = Mutex::new(());

fn shm_files() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn dropping_the_backend_removes_its_dev_shm_file() {
    let mut mem = vec![0u8; 4 * 4096];
    let span =
        RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("non-null"), 4, 4096).expect("span");
    let _one_at_a_time = DEV_SHM.lock();
    let before = shm_files();
    // SAFETY: `mem` outlives the backend, dropped below.
    let backend = unsafe { OfiBackend::open(span, BackendOptions::new().with("provider", "shm")) }
        .expect("open the shm provider");
    let during = shm_files();
    let created: Vec<_> = during.difference(&before).collect();
    assert!(
        !created.is_empty(),
        "the shm provider made no file in /dev/shm"
    );
    let pid = std::process::id().to_string();
    assert!(created.iter().all(|f| f.starts_with(&pid)), "{created:?}");
    drop(backend);
    let after = shm_files();
    let left: Vec<_> = after.difference(&before).collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn providers_report_what_they_granted() {
    let mut mem = vec![0u8; 4096];
    let span =
        RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("non-null"), 1, 4096).expect("span");
    // Not shm: the other test counts its /dev/shm files, and tests run in parallel.
    for opts in ["provider=tcp,domain=lo", "provider=net,domain=lo"] {
        let options = BackendOptions::parse_list(opts).expect("k=v");
        // SAFETY: `mem` outlives the backend, dropped at the end of the iteration.
        let b = unsafe { OfiBackend::open(span, options) }.expect("open");
        println!("{opts}: {}", b.attributes());
        assert!(b.attributes().contains("data progress"));
    }
}

/// A file of a dead process, planted: `reap_stale_files=false` leaves it, a default open
/// removes it.
#[test]
fn opening_removes_a_dead_processs_file_unless_told_not_to() {
    let mut mem = vec![0u8; 4096];
    let span =
        RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("non-null"), 1, 4096).expect("span");
    let _one_at_a_time = DEV_SHM.lock();
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let path = std::path::PathBuf::from(format!("/dev/shm/{pid}:{uid}:0"));
    // A region's header: version, then the creator's pid at offset 4.
    let mut head = vec![0u8; 64];
    head[0] = 4;
    head[4..8].copy_from_slice(&(pid as i32).to_ne_bytes());
    std::fs::write(&path, &head).expect("plant a dead process's file");
    let open = |opts: &str| {
        let options = BackendOptions::parse_list(opts).expect("k=v");
        // SAFETY: `mem` outlives the backend, dropped at once.
        drop(unsafe { OfiBackend::open(span, options) }.expect("open"));
    };
    open("provider=shm,reap_stale_files=false");
    let kept = path.exists();
    open("provider=shm");
    let removed = !path.exists();
    let _ = std::fs::remove_file(&path);
    assert!(kept, "reap_stale_files=false removed {}", path.display());
    assert!(
        removed,
        "{} of dead pid {pid} was not removed",
        path.display()
    );
}
