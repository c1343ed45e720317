//! Peers that come and go: a server registers and removes the same live peers again and again
//! (a registration replaced by a newer one, a peer dropped and added back), for weeks. What a
//! transport keeps per add and remove of a peer that stays alive must not grow: UCX 1.13 keeps
//! an endpoint closed gracefully, and its socket at both ends, for as long as the peer lives
//! (blockwire's ucx once left two file descriptors per cycle; vLLM deployments on NIXL have
//! crashed on the same kind of leak). [`flat_over`] adds and removes one live peer many times,
//! with a transfer on each registration, and samples the process's open file descriptors and
//! resident set after a warm-up, half-way and at the end. The descriptors may not grow over
//! the second half; the resident set may not grow in both halves. (What a process grows to
//! once and keeps grows in one half only: on libfabric tcp, steps of 12 to 34 MiB at random
//! cycles, an allocator arena taking in a new endpoint's 12 MiB completion queue, each
//! allocating thread its own; a leak grows in both.)

use std::time::{Duration, Instant};

use blockwire::Transport;

use crate::fixture::{Fixture, Spec};
use crate::memory::{SLACK, resident};
use crate::support::{Outcomes, open, pattern, record};

/// Add-and-remove cycles before the first sample (connections and caches a library makes
/// once per peer worker).
pub const WARM_UP: usize = 20;

/// Growth in open file descriptors allowed after the warm-up (a library's lazily opened
/// files).
pub const FD_SLACK: usize = 8;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct ChurnReport {
    /// Cycles measured after the warm-up.
    pub cycles: usize,
    /// Open file descriptors after the warm-up, half-way through the measured cycles, and
    /// at the end.
    pub fds: [usize; 3],
    /// Resident set (bytes) after the warm-up, half-way, and at the end.
    pub resident: [u64; 3],
    /// Wall time.
    pub took: Duration,
}

impl ChurnReport {
    /// Open file descriptors gained over the second half of the measured cycles.
    ///
    /// ```
    /// let r = blockwire_conformance::churn::ChurnReport {
    ///     cycles: 10, fds: [10, 12, 15], resident: [0; 3], took: Default::default(),
    /// };
    /// assert_eq!(r.fds_growth(), 3);
    /// ```
    pub fn fds_growth(&self) -> usize {
        self.fds[2].saturating_sub(self.fds[1])
    }

    /// Resident bytes gained in the half of the measured cycles that gained less: what
    /// grew in both halves.
    ///
    /// ```
    /// let r = blockwire_conformance::churn::ChurnReport {
    ///     cycles: 10, fds: [0; 3], resident: [10, 15, 35], took: Default::default(),
    /// };
    /// assert_eq!(r.resident_growth(), 5);
    /// ```
    pub fn resident_growth(&self) -> u64 {
        let first = self.resident[1].saturating_sub(self.resident[0]);
        let second = self.resident[2].saturating_sub(self.resident[1]);
        first.min(second)
    }
}

/// This process's open file descriptors.
fn open_fds() -> Result<usize, String> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .map_err(|e| format!("/proc/self/fd: {e}"))
}

/// Runs `warm_up` and then `n` cycles of `add_remote_peer` (of one live transport), a
/// one-block WRITE to it (polled done) and `remove_remote_peer`, between two transports of
/// `fx`; checks that over the second half of the `n` the open file descriptors grew by at
/// most [`FD_SLACK`], and that the resident set did not grow by more than
/// [`SLACK`] in each half. The process must run nothing else meanwhile
/// (both are the whole process's).
///
/// ```
/// use blockwire_conformance::{churn::flat_over, Plain, Setting};
/// let r = flat_over(&Plain(Setting::<blockwire_shm::ShmBackend>::default()), 5, 50)?;
/// assert_eq!(r.cycles, 50);
/// # Ok::<(), String>(())
/// ```
pub fn flat_over<F: Fixture>(fx: &F, warm_up: usize, n: usize) -> Result<ChurnReport, String> {
    let spec = Spec::new(4, 4096);
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    let desc = b.descriptor().map_err(|e| e.report())?;
    let peer = blockwire::PeerId::from("b");
    let started = Instant::now();
    let sample = || -> Result<(usize, u64), String> { Ok((open_fds()?, resident()?)) };
    let mut samples = Vec::with_capacity(3);
    for cycle in 0..warm_up + n {
        if cycle == warm_up || cycle == warm_up + n / 2 {
            samples.push(sample()?);
        }
        a.add_remote_peer(&peer, &desc)
            .map_err(|e| format!("cycle {cycle}: add_remote_peer: {}", e.report()))?;
        // Bytes of this cycle's own, checked where they land below: a connection reused
        // from an earlier cycle must carry this registration's writes.
        let block = (cycle % 4) as u32;
        let bytes = pattern(cycle as u8, block, spec.block_len);
        a.region()
            .write_block(block, &bytes)
            .map_err(|e| e.report())?;
        let id = a
            .write_blocks(&peer, &[block], &[block])
            .map_err(|e| format!("cycle {cycle}: write_blocks: {}", e.report()))?;
        let mut seen = Outcomes::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !seen.contains_key(&id) {
            if Instant::now() > deadline {
                return Err(format!("cycle {cycle}: the WRITE did not end in 30 s"));
            }
            record(
                &mut seen,
                a.poll_wait(Some(&peer), Duration::from_millis(100))
                    .map_err(|e| e.report())?,
            );
        }
        if let Some(Err(why)) = seen.remove(&id) {
            return Err(format!("cycle {cycle}: the WRITE failed: {why}"));
        }
        if b.region().block(block).map_err(|e| e.report())? != bytes {
            return Err(format!(
                "cycle {cycle}: the WRITE reported done, its bytes not there"
            ));
        }
        a.remove_remote_peer(&peer)
            .map_err(|e| format!("cycle {cycle}: remove_remote_peer: {}", e.report()))?;
    }
    while samples.len() < 3 {
        samples.push(sample()?);
    }
    let report = ChurnReport {
        cycles: n,
        fds: [samples[0].0, samples[1].0, samples[2].0],
        resident: [samples[0].1, samples[1].1, samples[2].1],
        took: started.elapsed(),
    };
    if report.fds_growth() > FD_SLACK {
        return Err(format!(
            "{}: open file descriptors grew by {} over the last {} of {n} add-and-remove \
             cycles of a live peer: {report:?}",
            fx.name(),
            report.fds_growth(),
            n - n / 2
        ));
    }
    if report.resident_growth() > SLACK {
        return Err(format!(
            "{}: resident memory grew by {} KiB or more in each half of {n} add-and-remove \
             cycles of a live peer: {report:?}",
            fx.name(),
            report.resident_growth() / 1024
        ));
    }
    Ok(report)
}
