//! The driver's loop: transfers kept in flight for a while, each submit and completion timed.

use std::time::{Duration, Instant};

use blockwire::{Op, PeerId, TransferId, Transport};

use super::Summary;
use crate::remote::PEER;
use crate::stall::{SpinProbe, preemptions, thread_cpu};
use crate::wake::WakeProbe;
use crate::{Args, Res, Shape, Waiting};

/// What one run of [`pump`] measured.
pub(crate) struct Pumped {
    /// Bytes of the transfers that ended.
    pub(crate) bytes: f64,
    /// Seconds from the first submit to the last transfer's end.
    pub(crate) secs: f64,
    /// Each submit call once the transfers are in flight (after the first poll), µs.
    pub(crate) submits: Vec<f64>,
    /// Each submit that filled the pipeline (before the first poll: the first `depth`), µs:
    /// handed to a transport whose threads had nothing to do since the run (or slice) began.
    pub(crate) fills: Vec<f64>,
    /// Each submit call during which the thread was not preempted, µs.
    pub(crate) submits_on_core: Vec<f64>,
    /// Each transfer from submit to reported done, µs.
    pub(crate) completes: Vec<f64>,
    /// Each wake probe right after a submit, µs ([`WakeProbe`]).
    pub(crate) wakes: Vec<f64>,
    /// Each spin as long as the median recent submit, right after a submit and not
    /// preempted, µs ([`SpinProbe`]).
    pub(crate) spins: Vec<f64>,
    /// Each `poll` call, µs: with [`Waiting::Sleep`] only (`poll_wait` sleeps by design).
    pub(crate) polls: Vec<f64>,
    /// The CPU time the calling thread used over the run, seconds (`None` where unknown).
    pub(crate) caller_cpu_secs: Option<f64>,
}

impl Pumped {
    /// Blocks moved per second, in GB/s.
    pub(crate) fn gbps(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes / self.secs / 1e9
        } else {
            0.0
        }
    }

    /// Adds a later slice of the same point: its bytes and time, and its samples.
    pub(crate) fn absorb(&mut self, slice: Pumped) {
        self.bytes += slice.bytes;
        self.secs += slice.secs;
        self.submits.extend(slice.submits);
        self.fills.extend(slice.fills);
        self.submits_on_core.extend(slice.submits_on_core);
        self.completes.extend(slice.completes);
        self.wakes.extend(slice.wakes);
        self.spins.extend(slice.spins);
        self.polls.extend(slice.polls);
        self.caller_cpu_secs = self
            .caller_cpu_secs
            .zip(slice.caller_cpu_secs)
            .map(|(a, b)| a + b);
    }

    /// The calling thread's CPU time per transfer that ended, µs.
    pub(crate) fn caller_cpu_us_per_transfer(&self) -> Option<f64> {
        let transfers = self.completes.len();
        self.caller_cpu_secs
            .filter(|_| transfers > 0)
            .map(|cpu| cpu * 1e6 / transfers as f64)
    }
}

/// How the driver waits between its submits (`--waiting`, `--poll-sleep-us`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Driver {
    pub(crate) waiting: Waiting,
    pub(crate) poll_sleep: Duration,
}

impl Driver {
    pub(crate) fn of(args: &Args) -> Self {
        Driver {
            waiting: args.waiting,
            poll_sleep: Duration::from_micros(args.poll_sleep_us),
        }
    }
}

/// The longest one `poll_wait` of the driver waits (a transfer slower than this is polled
/// again, not failed).
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(200);

/// Keeps `shape.depth` transfers of `shape.batch` blocks in flight from `a` to [`PEER`] for
/// `shape.run_for`, then waits for the last ones. Between submits it waits with `poll_wait`
/// ([`Waiting::Wait`]), or ([`Waiting::Sleep`]) polls and, after a poll that reported
/// nothing, sleeps a sixteenth of the average completion time so far, at most
/// `driver.poll_sleep` (it yields instead when that is under 2 µs, or when `poll_sleep` is
/// zero): a poll about 16 times per transfer's life, so short transfers are not held up by
/// the sleep and long ones leave the cores to the data path.
pub(crate) fn pump(a: &dyn Transport, shape: &Shape, driver: Driver) -> Res<Pumped> {
    let peer = PeerId::from(PEER);
    let (op, batch) = (shape.op, shape.batch);
    let mut next = 0u32;
    let mut submits = Vec::new();
    let mut fills = Vec::new();
    let mut submits_on_core = Vec::new();
    let mut polled = false;
    let mut completes = Vec::new();
    let mut inflight: Vec<(TransferId, Instant)> = Vec::new();
    let mut polls = Vec::new();
    let mut wake = WakeProbe::start()?;
    let mut spin = SpinProbe::default();
    short_timer_slack();
    let cpu_at_start = thread_cpu();
    let start = Instant::now();
    let mut completed_us = 0.0;
    loop {
        let running = start.elapsed() < shape.run_for;
        while running && inflight.len() < shape.depth {
            let idx = shape.layout.batch(next, batch, shape.blocks);
            next = next.wrapping_add(1);
            let switches = preemptions();
            let t = Instant::now();
            let id = match op {
                Op::Write => a.write_blocks(&peer, &idx, &idx)?,
                _ => a.read_blocks(&peer, &idx, &idx)?,
            };
            let us = t.elapsed().as_secs_f64() * 1e6;
            inflight.push((id, t));
            if !polled {
                fills.push(us);
                continue;
            }
            submits.push(us);
            if switches.is_some() && preemptions() == switches {
                submits_on_core.push(us);
            }
            wake.probe();
            spin.after_submit(us);
        }
        if inflight.is_empty() {
            break;
        }
        polled = true;
        let r = match driver.waiting {
            Waiting::Wait => a.poll_wait(Some(&peer), WAIT_SLICE)?,
            Waiting::Sleep => {
                let t = Instant::now();
                let r = a.poll(Some(&peer))?;
                polls.push(t.elapsed().as_secs_f64() * 1e6);
                r
            }
        };
        if let Some((id, reason)) = r.failed.first() {
            return Err(format!("transfer {id} failed: {reason}").into());
        }
        if r.done.is_empty() && driver.waiting == Waiting::Sleep {
            // Leave the cores to the data path (copy, posting and progress threads).
            let average_us = completed_us / completes.len().max(1) as f64;
            let nap = driver
                .poll_sleep
                .min(Duration::from_secs_f64(average_us / 16.0 / 1e6));
            if nap < Duration::from_micros(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap);
            }
        }
        for id in r.done {
            if let Some(k) = inflight.iter().position(|(x, _)| *x == id) {
                let us = inflight.swap_remove(k).1.elapsed().as_secs_f64() * 1e6;
                completed_us += us;
                completes.push(us);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let caller_cpu_secs = cpu_at_start
        .zip(thread_cpu())
        .map(|(then, now)| now.saturating_sub(then).as_secs_f64());
    let bytes = completes.len() as f64 * f64::from(batch) * shape.block as f64;
    Ok(Pumped {
        bytes,
        secs,
        submits,
        fills,
        submits_on_core,
        completes,
        wakes: wake.finish(),
        spins: spin.finish(),
        polls,
        caller_cpu_secs,
    })
}

/// Makes this thread's sleeps end within a microsecond of their time (the default slack is
/// 50 µs), so the driver's short sleeps are what they say.
fn short_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a value in ns and touches only the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
}

/// The share of `all` submits that are not in `on_core`, and the 99th percentile of those that
/// are (`None`, `None` when the switches could not be read).
pub(crate) fn preempted(all: usize, on_core: Vec<f64>) -> (Option<f64>, Option<f64>) {
    if all == 0 || on_core.is_empty() {
        return (None, None);
    }
    let share = 1.0 - on_core.len() as f64 / all as f64;
    (Some(share), Some(Summary::of(on_core).p99))
}
