//! The machine's own tail for work as short as a submit: a spin as long as a typical submit,
//! timed right after submits on the driver's thread.
//!
//! A submit's time holds whatever the machine does to its thread during the call: a timer
//! interrupt, softirqs, and in a virtual machine the hypervisor running something else on the
//! virtual CPU, which the guest's scheduler counters never see. A spin of the same length
//! that makes no system call and touches nothing the transport shares meets the same
//! interruptions and nothing of blockwire's, so its 99th percentile, over the spins the
//! scheduler did not preempt, is the floor under the submit's `core p99` on this machine
//! under this load. (On the project's 2-core VM, a thread that did nothing but read the
//! clock for 10 s saw about 240 gaps a second of 20 to 50 µs, 8 a second past 50 µs and one
//! past a millisecond, none with a context switch.)

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::wake::MIN_PROBE_GAP;

/// Submits the spin's length is taken from: the median of the last this many.
const RECENT: usize = 31;

/// No spin before this many submits: the first ones of a point are its slowest (cold caches,
/// first allocations), and a spin as long as them would time something else.
const WARM: usize = 8;

/// Timed spins, spaced like the wake probe's (at most one a millisecond).
#[derive(Default)]
pub(crate) struct SpinProbe {
    recent: VecDeque<f64>,
    seen: usize,
    last: Option<Instant>,
    spins: Vec<f64>,
}

impl SpinProbe {
    /// Notes a submit that took `submit_us`, then spins for the median of the last
    /// [`RECENT`] submits (a median, so that one slow submit does not set the length),
    /// unless fewer than [`WARM`] were seen or the last spin was under [`MIN_PROBE_GAP`] ago,
    /// and keeps the time the spin took (its length plus whatever interrupted it) when the
    /// scheduler did not preempt the thread meanwhile.
    pub(crate) fn after_submit(&mut self, submit_us: f64) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(submit_us);
        self.seen += 1;
        if self.seen < WARM || self.last.is_some_and(|t| t.elapsed() < MIN_PROBE_GAP) {
            return;
        }
        let mut sorted: Vec<f64> = self.recent.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let len = Duration::from_secs_f64(sorted[sorted.len() / 2] / 1e6);
        let switches = preemptions();
        let t = Instant::now();
        while t.elapsed() < len {
            std::hint::spin_loop();
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        self.last = Some(Instant::now());
        if switches.is_some() && preemptions() == switches {
            self.spins.push(us);
        }
    }

    /// Each kept spin's time, µs.
    pub(crate) fn finish(self) -> Vec<f64> {
        self.spins
    }
}

/// The CPU time the calling thread has used so far, user and system (`None` where unknown).
pub(crate) fn thread_cpu() -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a writable timespec; the clock is the calling thread's own.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (ret == 0).then(|| {
        Duration::new(
            u64::try_from(now.tv_sec).unwrap_or(0),
            u32::try_from(now.tv_nsec).unwrap_or(0),
        )
    })
}

/// The calling thread's involuntary context switches so far (`None` where unknown).
pub(crate) fn preemptions() -> Option<libc::c_long> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a writable rusage; RUSAGE_THREAD reads the calling thread's counters.
    let ret = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    // SAFETY: getrusage filled it in when it returned 0.
    (ret == 0).then(|| unsafe { usage.assume_init() }.ru_nivcsw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_start_warm_are_spaced_and_last_the_median_submit() {
        let mut probe = SpinProbe::default();
        // A slow first submit, then fast ones: the spins last the median (5 µs); with the
        // mean, the first would last 630 µs.
        probe.after_submit(5000.0);
        let start = Instant::now();
        let mut calls = 1;
        while start.elapsed() < Duration::from_millis(20) {
            probe.after_submit(5.0);
            calls += 1;
        }
        let spins = probe.finish();
        // One per millisecond at most, over 20 ms (a preempted one is dropped).
        assert!(
            !spins.is_empty() && spins.len() <= 21,
            "{} spins",
            spins.len()
        );
        assert!(calls > spins.len() + WARM, "every call spun");
        assert!(spins.iter().all(|us| *us >= 5.0), "{spins:?}");
        assert!(spins[0] < 400.0, "spun for the slow submit: {spins:?}");
    }

    #[test]
    fn no_spin_before_warm() {
        let mut probe = SpinProbe::default();
        for _ in 1..WARM {
            probe.after_submit(5.0);
        }
        assert!(probe.finish().is_empty());
    }
}
