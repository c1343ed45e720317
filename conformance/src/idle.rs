//! What an idle transport costs: the cores this process uses while nothing moves. A test that
//! reads it runs in its own binary, so that no other test's threads add to the process's CPU
//! time (a loaded machine can only make a busy thread look idler).

use std::time::{Duration, Instant};

/// This process's CPU time so far, user and system, in seconds (a test helper: panics if
/// `getrusage` fails).
pub fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a writable rusage; RUSAGE_SELF reads this process's counters.
    let ret = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(ret, 0, "getrusage: {}", std::io::Error::last_os_error());
    // SAFETY: getrusage filled it in (it returned 0).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The cores this process keeps busy over `over` while the calling thread sleeps, after
/// `settle` (for the threads a transport just started to reach their idle state).
///
/// ```
/// let cores = blockwire_conformance::idle::cores_while_asleep(
///     std::time::Duration::ZERO,
///     std::time::Duration::from_millis(20),
/// );
/// assert!(cores >= 0.0);
/// ```
pub fn cores_while_asleep(settle: Duration, over: Duration) -> f64 {
    std::thread::sleep(settle);
    let (cpu, wall) = (process_cpu_seconds(), Instant::now());
    std::thread::sleep(over);
    (process_cpu_seconds() - cpu) / wall.elapsed().as_secs_f64()
}
