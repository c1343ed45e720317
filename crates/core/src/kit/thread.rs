//! [`spawn`]: how blockwire starts each of its own threads (copy, posting, progress,
//! registration, notification threads), so that they all follow one scheduling rule.

use std::thread::JoinHandle;

/// Starts a thread named `name` running `f`, scheduled as a batch thread (Linux
/// `SCHED_BATCH`): it gets its fair share of the CPU as before, but waking it never preempts
/// a thread that runs now. A caller's `write_blocks` hands a transfer to a posting or copy
/// thread and wakes it; on a machine with no idle core, that thread would otherwise take the
/// caller's core in the middle of the call (on 2 cores, a submit's 99th percentile was
/// another thread's time slice). Where the policy cannot be set (not Linux, or refused), the
/// thread runs as a normal one, and a debug event says so. `BLOCKWIRE_THREAD_POLICY=normal`
/// ([`THREAD_POLICY_ENV`]) keeps the process's own policy instead (a woken blockwire thread
/// then preempts as any normal thread does), for a deployment that measures it better: on a
/// 2-core machine the bench's done-latencies were the same either way, within noise.
///
/// ```
/// let t = blockwire_core::kit::spawn("blockwire-doc".into(), || 6 * 7)?;
/// assert_eq!(t.join().unwrap(), 42);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn spawn<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name).spawn(move || {
        yield_to_running_threads();
        f()
    })
}

/// The environment variable that chooses the scheduling policy of blockwire's threads:
/// `batch` (the default, see [`spawn`]) or `normal` (the process's own policy, unchanged).
pub const THREAD_POLICY_ENV: &str = "BLOCKWIRE_THREAD_POLICY";

/// Whether [`spawn`] makes its threads batch threads: unless [`THREAD_POLICY_ENV`] says
/// `normal` (read once per process).
fn batch_threads() -> bool {
    static BATCH: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BATCH.get_or_init(|| batch_policy(std::env::var(THREAD_POLICY_ENV).ok().as_deref()))
}

/// What a value of [`THREAD_POLICY_ENV`] asks for: batch threads unless it is `normal` (any
/// case); a value that is neither `batch` nor `normal` is warned about and means batch.
fn batch_policy(value: Option<&str>) -> bool {
    match value {
        Some(v) if v.eq_ignore_ascii_case("normal") => false,
        Some(v) if !v.eq_ignore_ascii_case("batch") => {
            tracing::warn!(value = %v, "{THREAD_POLICY_ENV} is neither batch nor normal; batch");
            true
        }
        _ => true,
    }
}

/// Makes the calling thread a batch thread (see [`spawn`]).
fn yield_to_running_threads() {
    #[cfg(target_os = "linux")]
    if batch_threads() {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param (priority 0, which SCHED_BATCH requires);
        // pid 0 names the calling thread; the call changes only its scheduling policy, which
        // any thread may lower for itself without privileges.
        let ret = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
        if ret != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "could not make a blockwire thread a batch thread; it runs as a normal one"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn policy_is_batch_unless_normal() {
        use super::batch_policy;
        assert!(batch_policy(None));
        assert!(batch_policy(Some("batch")));
        assert!(batch_policy(Some("BATCH")));
        assert!(batch_policy(Some("fifo")));
        assert!(!batch_policy(Some("normal")));
        assert!(!batch_policy(Some("Normal")));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn threads_run_as_batch_threads() {
        // SAFETY: sched_getscheduler(0) only reads the calling thread's policy.
        let policy = super::spawn("blockwire-test".into(), || unsafe {
            libc::sched_getscheduler(0)
        })
        .expect("spawn")
        .join()
        .expect("join");
        assert_eq!(policy, libc::SCHED_BATCH);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
    }
}
