//! Resident memory over many transfers: a transport that keeps a few bytes per transfer
//! (a context never freed, a list pruned too late) grows without bound in a server that runs
//! for weeks. [`flat_over`] runs one-block WRITEs between two transports in one process, a
//! few in flight at a time, each polled and released, and samples the process's resident set
//! after a warm-up: it must stay flat.
//!
//! The warm-up ([`WARM_UP`] transfers) is long enough for rings a library allocates up front
//! and fills once around before it reuses them: libfabric 1.17's `ofi_rxm` gives each
//! endpoint a completion queue of 262,144 entries (48 bytes each: 12 MiB, sized by
//! `FI_UNIVERSE_SIZE` times its connections' transmit depth), whose pages become resident
//! one completion after another, about 41 bytes per transfer, until the ring wraps; flat from
//! there (measured to 2,000,000 transfers).

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockwire::{PeerId, TransferId, Transport};
use libtest_mimic::Trial;

use crate::churn;
use crate::fixture::{Fixture, Spec};
use crate::support::{Outcomes, connect, open, record};

/// The environment variable that sets how many transfers [`flat_over`]'s callers run (CI runs
/// 1,000,000).
pub const TRANSFERS_ENV: &str = "BLOCKWIRE_MEMORY_TRANSFERS";

/// How many transfers to run: [`TRANSFERS_ENV`], else `default`.
///
/// ```
/// assert!(blockwire_conformance::memory::transfers(1000) >= 1);
/// ```
pub fn transfers(default: usize) -> usize {
    std::env::var(TRANSFERS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// Transfers run before the resident set is first sampled (see the module docs).
pub const WARM_UP: usize = 300_000;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct MemoryReport {
    /// Transfers measured after the warm-up (all done).
    pub transfers: usize,
    /// Resident set after the warm-up, in bytes.
    pub after_warm_up: u64,
    /// Resident set at the end, in bytes.
    pub at_end: u64,
    /// The largest resident set seen after the warm-up.
    pub peak: u64,
    /// Resident set (bytes) after each tenth of the measured transfers.
    pub samples: Vec<u64>,
    /// Wall time.
    pub took: Duration,
}

impl MemoryReport {
    /// Growth after the warm-up per transfer, in bytes (negative when it shrank).
    ///
    /// ```
    /// let r = blockwire_conformance::memory::MemoryReport {
    ///     transfers: 1000, after_warm_up: 1 << 20, at_end: (1 << 20) + 1000,
    ///     peak: (1 << 20) + 1000, samples: vec![], took: std::time::Duration::ZERO,
    /// };
    /// assert_eq!(r.growth_per_transfer(), 1.0);
    /// ```
    pub fn growth_per_transfer(&self) -> f64 {
        (self.at_end as f64 - self.after_warm_up as f64) / self.transfers.max(1) as f64
    }
}

/// This process's resident set in bytes (`/proc/self/statm`).
pub(crate) fn resident() -> Result<u64, String> {
    let statm = std::fs::read_to_string("/proc/self/statm").map_err(|e| e.to_string())?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or("malformed /proc/self/statm")?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Ok(pages * u64::try_from(page).unwrap_or(4096))
}

/// Growth allowed after the warm-up: the allocator's and the libraries' noise.
pub const SLACK: u64 = 8 << 20;

/// Runs `warm_up` and then `n` one-block WRITEs (16 in flight) between two transports of `fx`
/// and checks that the resident set grew by at most [`SLACK`] over the `n` (callers pass
/// [`WARM_UP`]).
///
/// ```
/// use blockwire_conformance::{memory::flat_over, Plain, Setting};
/// let r = flat_over(&Plain(Setting::<blockwire_shm::ShmBackend>::default()), 1000, 2000)?;
/// assert_eq!(r.transfers, 2000);
/// # Ok::<(), String>(())
/// ```
pub fn flat_over<F: Fixture>(fx: &F, warm_up: usize, n: usize) -> Result<MemoryReport, String> {
    const DEPTH: usize = 16;
    const BLOCKS: u32 = 64;
    let spec = Spec::new(BLOCKS, 4096);
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    let peer: PeerId = connect(&a, "b", &b);
    let started = Instant::now();
    let total = warm_up + n;
    let (mut posted, mut finished) = (0usize, 0usize);
    let mut in_flight: Vec<TransferId> = Vec::with_capacity(DEPTH);
    let mut seen = Outcomes::new();
    let mut after_warm_up = None;
    let mut peak = 0;
    let mut samples = Vec::new();
    while finished < total {
        while in_flight.len() < DEPTH && posted < total {
            let block = (posted % BLOCKS as usize) as u32;
            let id = a
                .write_blocks(&peer, &[block], &[block])
                .map_err(|e| format!("transfer {posted}: {e}"))?;
            in_flight.push(id);
            posted += 1;
        }
        // Sleeping until a transfer ends, not spinning: on a machine with few cores a
        // spinning poller takes a core from the backend's progress and copy threads.
        let polled = a.poll_wait(Some(&peer), Duration::from_secs(1));
        record(&mut seen, polled.map_err(|e| e.to_string())?);
        for (id, outcome) in seen.drain() {
            outcome.map_err(|why| format!("transfer {id} failed: {why}"))?;
            in_flight.retain(|x| *x != id);
            finished += 1;
            if finished == warm_up {
                after_warm_up = Some(resident()?);
            }
            let measured = finished.saturating_sub(warm_up);
            if measured > 0 && measured % (n / 100).max(1) == 0 {
                let now = resident()?;
                peak = peak.max(now);
                if measured % (n / 10).max(1) == 0 {
                    samples.push(now);
                }
            }
        }
        if started.elapsed() > Duration::from_secs(3600) {
            return Err(format!("{finished} of {total} transfers after an hour"));
        }
    }
    let at_end = resident()?;
    let after_warm_up = after_warm_up.unwrap_or(at_end);
    let report = MemoryReport {
        transfers: n,
        after_warm_up,
        at_end,
        peak: peak.max(at_end),
        samples,
        took: started.elapsed(),
    };
    if report.peak > after_warm_up + SLACK {
        return Err(format!(
            "{}: resident memory grew by {} KiB over {n} transfers after {warm_up} ({:.1} \
             bytes per transfer): {report:?}",
            fx.name(),
            (report.peak - after_warm_up) / 1024,
            report.growth_per_transfer()
        ));
    }
    Ok(report)
}

/// The `libtest` trial `memory::<fixture>`: [`flat_over`] with [`WARM_UP`] and
/// [`transfers`]`(100_000)`, printing what it measured. Run trials one at a time (each
/// measures the whole process).
///
/// ```
/// use blockwire_conformance::{memory, Plain, Setting};
/// let t = memory::trial(Plain(Setting::<blockwire_shm::ShmBackend>::default()));
/// assert_eq!(t.name(), "memory::shm");
/// ```
pub fn trial<F: Fixture>(fx: F) -> Trial {
    transfers_trial(Arc::new(fx))
}

fn transfers_trial<F: Fixture>(fx: Arc<F>) -> Trial {
    Trial::test(format!("memory::{}", fx.name()), move || {
        let r = flat_over(&*fx, WARM_UP, transfers(100_000))?;
        eprintln!(
            "memory::{}: {} transfers after {WARM_UP} in {:.1} s, resident {} KiB after the \
             warm-up, {} KiB at the end, peak {} KiB ({:+.2} bytes per transfer); after each \
             tenth (KiB): {:?}",
            fx.name(),
            r.transfers,
            r.took.as_secs_f64(),
            r.after_warm_up / 1024,
            r.at_end / 1024,
            r.peak / 1024,
            r.growth_per_transfer(),
            r.samples.iter().map(|b| b / 1024).collect::<Vec<_>>()
        );
        Ok(())
    })
}

/// The `libtest` trial `memory::peer_churn::<fixture>`: [`churn::flat_over`] with
/// [`churn::WARM_UP`] and [`CHURN_CYCLES_ENV`] cycles (500 by default), printing what it
/// measured. Run trials one at a time (each measures the whole process).
///
/// ```
/// use blockwire_conformance::{memory, Plain, Setting};
/// let t = memory::churn_trial(Plain(Setting::<blockwire_shm::ShmBackend>::default()));
/// assert_eq!(t.name(), "memory::peer_churn::shm");
/// ```
pub fn churn_trial<F: Fixture>(fx: F) -> Trial {
    peer_churn_trial(Arc::new(fx))
}

/// The environment variable that sets how many add-and-remove cycles [`churn_trial`] runs.
pub const CHURN_CYCLES_ENV: &str = "BLOCKWIRE_CHURN_CYCLES";

fn peer_churn_trial<F: Fixture>(fx: Arc<F>) -> Trial {
    Trial::test(format!("memory::peer_churn::{}", fx.name()), move || {
        let cycles = std::env::var(CHURN_CYCLES_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(500);
        let r = churn::flat_over(&*fx, churn::WARM_UP, cycles)?;
        eprintln!(
            "memory::peer_churn::{}: {} add-and-remove cycles of a live peer after {} in \
             {:.1} s: open file descriptors {:?} and resident KiB {:?} after the warm-up, \
             half-way and at the end",
            fx.name(),
            r.cycles,
            churn::WARM_UP,
            r.took.as_secs_f64(),
            r.fds,
            r.resident.map(|b| b / 1024),
        );
        Ok(())
    })
}

/// The `main` of a backend's `tests/memory.rs` (`harness = false`): for each fixture, its
/// [`trial`] and its [`churn_trial`], run one after another (each measures the whole
/// process), then exits.
///
/// ```no_run
/// use blockwire_conformance::{Plain, Setting, memory};
/// memory::main([Plain(Setting::<blockwire_shm::ShmBackend>::default())]);
/// ```
pub fn main<F: Fixture>(fixtures: impl IntoIterator<Item = F>) -> ! {
    crate::init_tracing();
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = Some(1);
    let mut trials = Vec::new();
    for fx in fixtures {
        let fx = Arc::new(fx);
        trials.push(transfers_trial(fx.clone()));
        trials.push(peer_churn_trial(fx));
    }
    libtest_mimic::run(&args, trials).exit()
}
