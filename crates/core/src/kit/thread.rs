//! [`spawn`]: how blockwire starts each of its own threads (copy, posting, progress,
//! registration, notification threads), so that they all follow one scheduling rule.

use std::thread::JoinHandle;

/// Starts a thread named `name` running `f`, scheduled as a batch thread (Linux
/// `SCHED_BATCH`): it gets its fair share of the CPU as before, but waking it never preempts
/// a thread that runs now. A caller's `write_blocks` hands a transfer to a posting or copy
/// thread and wakes it; on a machine with no idle core, that thread would otherwise take the
/// caller's core in the middle of the call (on 2 cores, a submit's 99th percentile was
/// another thread's time slice). Where the policy cannot be set (not Linux, or refused), the
/// thread runs as a normal one, and a debug event says so.
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

/// Makes the calling thread a batch thread (see [`spawn`]).
fn yield_to_running_threads() {
    #[cfg(target_os = "linux")]
    {
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
