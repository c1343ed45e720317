//! Model-based random testing of the [`Transport`](blockwire::Transport) contract: run a
//! sequence of [`Action`]s against real transports of a [`Fixture`] and check every result
//! against a small reference model.
//!
//! One run opens a local transport (the only one that posts transfers) and one remote transport
//! per entry of [`Setup::remote_blocks`] (`r0`, `r1`, ...), with different block counts, and
//! registers remotes on the local side under the peer names `p0`, `p1`, ... as the actions
//! say. The actions are abstract (which peer, how many blocks, a number to pick blocks
//! with), so any sequence is valid input and shrinks well.
//!
//! The model is pure: for each action it says which concrete calls to make (the blocks, ids
//! and fresh contents it chose) and what each must return, with no transport, clock or thread
//! of its own; where the contract leaves a result to the backend (an id, what a poll or a
//! cancel-wait reports) it checks what the runner hands back. The runner makes the calls,
//! waits where waiting is due (registrations, drains, the backends' live counts) and compares.
//! What every call must return:
//!
//! - **ids**: every id is reported by `poll` exactly once, done or failed, unless a
//!   `cancel(Wait)` took it (it was asked for and not returned) or `cancel(Immediate)` forgot
//!   it; `poll(Some(p))` reports only ids posted to `p`; ids are never reused; a poll lists
//!   `done` and `failed` each in id order; a `cancel(Wait)` returns only ids asked for and
//!   still in flight, each of which must then surface through `poll`.
//! - **outcomes**: a transfer to a live peer ends done (or, once a `cancel(Wait)` returned it,
//!   done or failed); a transfer whose peer was removed or replaced before it was reported ends
//!   done (it had completed) or fails with
//!   [`FailureReason::PeerRemoved`](blockwire::FailureReason::PeerRemoved); no healthy peer is
//!   ever reported faulted (`PollResult::peer_fault`).
//! - **in flight**: after every step, `in_flight(Some(p))` and `in_flight(None)` equal the
//!   transfers the model tracks (posted, not reported, not taken by a cancel).
//! - **data**: the model only picks blocks that no transfer still in flight touches (including
//!   ones an immediate cancel forgot, until the next drain), the runner writes fresh content
//!   into the source blocks before it posts, and at every drain point (poll until nothing is
//!   in flight) compares every block of every transport with the model. A done transfer's
//!   destinations hold its sources' content; a failed or cancelled one's are unknown until
//!   overwritten; source blocks never change.
//! - **errors**: an unknown peer gives `UnknownPeer`, a bad index list exactly its variant
//!   (`LengthMismatch`, `EmptyTransfer`, `LocalIndexOutOfRange`, `RemoteIndexOutOfRange`,
//!   `DuplicateDestination`) and tracks nothing; after `close` every call is `Err(Closed)` and
//!   `close` itself stays `Ok`.
//! - **notifications**: every notified transfer and standalone `notify` carries a message
//!   unique to its action, to the transfer's target (the remote written or read). A drain
//!   (`notifications(None)`, `notifications(Some(<local name>))`, at any remote or at the local
//!   transport) returns only messages sent there, each once, from the local transport's
//!   [name](blockwire::Transport::name); `notifications(Some("stranger"))` returns none. A
//!   notification may be drained before its transfer is reported, but never for a transfer
//!   reported failed (whichever comes first); one reported done owes exactly one, which the end
//!   of the run drains (bounded by [`Setup::timeout`]); one that left with no verdict (forgotten
//!   by `cancel(Immediate)`, taken by `cancel(Wait)`, in flight at close) may deliver one or
//!   none, as timing decides. When a notified transfer's notification is drained, every
//!   destination block it landed and no later write was planned on must already hold its
//!   bytes. After `close`, `notifications` is `Err(Closed)`; at the end each remote is closed
//!   with one notification queued per published peer (a standalone `notify` the end posts),
//!   and its close must discard what was queued, counted in `notification_stats`. A backend
//!   that carries none ([`Capabilities::notifications`](blockwire::Capabilities)) must refuse
//!   each notified call with `Unsupported`.
//! - **registrations**: a handle resolves `Ok`, or `Superseded` when the peer was removed or
//!   added again before it published, or `Closed` once the transport closed; at a drain point
//!   `peers()` and the backend's connected peer count equal the model's published peers.
//! - **resources**: after the run every transport is closed and dropped; the backends' live
//!   counts must be zero, and the process's threads, open file descriptors and `/dev/shm` files
//!   naming its pid must be back to what they were before the run (waiting a little for them
//!   to settle). Backends may keep process-wide singletons: run [`warm_up`] once first.
//!
//! [`run`] takes a plain `&[Action]`; generating sequences (proptest, a fuzzer, a fixed list)
//! is the caller's business. [`random`] generates them with proptest, one `libtest` trial per
//! fixture: each backend crate's `tests/model.rs` runs it on that backend's settings. A
//! violation
//! names the failing step, what was observed and expected, and the runner's trace of every
//! call.
//!
//! # Replaying a failure
//!
//! A failing random run prints its seed and the minimal sequence proptest found, as JSON
//! lines ([`Sequence`]). Either replays it:
//!
//! - the seed: `PROPTEST_RNG_SEED=<seed> cargo test -p blockwire-shm --test model --
//!   model::shm` (the backend's crate) generates the same sequences again (and shrinks again);
//! - the sequence: save the printed lines (the `{"fixture":...,"block_len":...}` header and
//!   one action per line) to a file and run with `BLOCKWIRE_MODEL_REPLAY=<file>`
//!   ([`random::replay`]); `BLOCKWIRE_MODEL_SAVE=<file>` writes every sequence there before
//!   it runs, so one that crashes the process is left behind. From code,
//!   [`Sequence::from_json_lines`] and [`run`] (the example runs in a process of its own: the
//!   leak check counts the process's threads):
//!
//! ```standalone_crate
//! use blockwire::Op;
//! use blockwire_conformance::model::{self, Action, Sequence, Setup};
//! use blockwire_conformance::{Plain, Setting};
//! let fx = Plain(Setting::<blockwire_shm::ShmBackend>::default());
//! let saved = Sequence {
//!     fixture: "model::shm".into(),
//!     block_len: 4096,
//!     actions: vec![
//!         Action::Add { peer: 0, remote: 1 },
//!         Action::Transfer { op: Op::Write, peer: 0, blocks: 3, pick: 7 },
//!         Action::Poll { peer: Some(0) },
//!         Action::Drain,
//!     ],
//! }
//! .to_json_lines();
//! let seq = Sequence::from_json_lines(&saved)?;
//! let setup = Setup::new(16, seq.block_len);
//! model::warm_up(&fx, &setup)?;
//! let report = model::run(&fx, &setup, &seq.actions)?;
//! // The end posts one standalone notification to p0, left queued for r1's close.
//! assert_eq!((report.ops, report.posted, report.notifies), (4, 2, 1));
//! assert_eq!(report.notes_discarded, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::time::Duration;

use crate::fixture::Fixture;

mod action;
mod expected;
pub mod random;
mod reference;
mod resources;
mod runner;
mod state;

pub use action::{Action, Defect, ReplayError, Sender, Sequence};

use resources::Resources;
use runner::Runner;

/// The transports one run opens, and its time limits.
///
/// ```
/// let s = blockwire_conformance::model::Setup::new(16, 4096);
/// assert_eq!(s.remote_blocks, vec![12, 16, 20]);
/// assert_eq!(s.peers, 3);
/// ```
#[derive(Clone, Debug)]
pub struct Setup {
    /// Blocks of the local transport.
    pub num_blocks: u32,
    /// Blocks of each remote transport `r0`, `r1`, ... (one transport per entry).
    pub remote_blocks: Vec<u32>,
    /// Bytes per block (every transport).
    pub block_len: usize,
    /// Peer names `p0` .. `p<peers - 1>`.
    pub peers: u8,
    /// Longest wait for anything that should happen (a drain, a registration, resources
    /// settling).
    pub timeout: Duration,
}

impl Setup {
    /// A local transport of `num_blocks` blocks, three remotes of `num_blocks - 4`,
    /// `num_blocks` and `num_blocks + 4` blocks (at least one each), three peer names, and a
    /// 15 s timeout; a cancel may name an id twice, adds may replace, supersede and follow
    /// removes, and every poll result must be in id order.
    ///
    /// ```
    /// let s = blockwire_conformance::model::Setup::new(2, 64);
    /// assert_eq!(s.remote_blocks, vec![1, 2, 6]);
    /// ```
    pub fn new(num_blocks: u32, block_len: usize) -> Self {
        Setup {
            num_blocks,
            remote_blocks: vec![
                num_blocks.saturating_sub(4).max(1),
                num_blocks,
                num_blocks.saturating_add(4),
            ],
            block_len,
            peers: 3,
            timeout: Duration::from_secs(15),
        }
    }
}

/// What one run (or several, [`merge`](Report::merge)d) did.
///
/// ```
/// use blockwire_conformance::model::Report;
/// let mut total = Report::default();
/// total.merge(&Report { ops: 3, posted: 1, done: 1, ..Report::default() });
/// assert_eq!((total.ops, total.posted), (3, 1));
/// assert!(total.to_string().contains("3 ops"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Operations run.
    pub ops: usize,
    /// Transfers posted (ids issued).
    pub posted: usize,
    /// Ids reported done.
    pub done: usize,
    /// Ids reported failed.
    pub failed: usize,
    /// Ids a `cancel(Wait)` took.
    pub taken_by_wait: usize,
    /// Ids a `cancel(Wait)` returned as still running (counted per return).
    pub still_running: usize,
    /// Ids a `cancel(Immediate)` forgot.
    pub forgotten: usize,
    /// Ids in flight when the transport closed.
    pub in_flight_at_close: usize,
    /// Calls refused as the model said (bad indices, unknown peer, closed).
    pub refused: usize,
    /// Registration handles that resolved `Superseded`.
    pub superseded: usize,
    /// Operations skipped: a transfer with no free block.
    pub skipped: usize,
    /// Drain points (including the final one).
    pub drains: usize,
    /// Most transfers in flight at once (tracked by the model).
    pub max_in_flight: usize,
    /// Transfers posted with a notification (`write_blocks_notify`, `read_blocks_notify`).
    pub notified: usize,
    /// Standalone notifications posted (`notify`).
    pub notifies: usize,
    /// Notifications drained (each matched to the transfer that carried it).
    pub notes_drained: usize,
    /// Of those, drained before their transfer was reported.
    pub notes_early: usize,
    /// Of those, of transfers that left with no verdict (a cancel took or forgot them, or
    /// close found them in flight).
    pub notes_undetermined: usize,
    /// Destination blocks compared right after their notification was drained.
    pub notes_blocks_checked: usize,
    /// Notifications a target's close discarded (at the end of a run).
    pub notes_discarded: usize,
}

impl Report {
    /// Adds `other`'s counts (and keeps the larger `max_in_flight`).
    ///
    /// ```
    /// use blockwire_conformance::model::Report;
    /// let mut a = Report { max_in_flight: 2, ..Report::default() };
    /// a.merge(&Report { max_in_flight: 5, drains: 1, ..Report::default() });
    /// assert_eq!((a.max_in_flight, a.drains), (5, 1));
    /// ```
    pub fn merge(&mut self, other: &Report) {
        self.ops += other.ops;
        self.posted += other.posted;
        self.done += other.done;
        self.failed += other.failed;
        self.taken_by_wait += other.taken_by_wait;
        self.still_running += other.still_running;
        self.forgotten += other.forgotten;
        self.in_flight_at_close += other.in_flight_at_close;
        self.refused += other.refused;
        self.superseded += other.superseded;
        self.skipped += other.skipped;
        self.drains += other.drains;
        self.max_in_flight = self.max_in_flight.max(other.max_in_flight);
        self.notified += other.notified;
        self.notifies += other.notifies;
        self.notes_drained += other.notes_drained;
        self.notes_early += other.notes_early;
        self.notes_undetermined += other.notes_undetermined;
        self.notes_blocks_checked += other.notes_blocks_checked;
        self.notes_discarded += other.notes_discarded;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops, {} transfers ({} done, {} failed, {} taken by cancel-wait, {} returned \
             running by cancel-wait, {} forgotten by cancel-immediate, {} in flight at close; \
             at most {} in flight), {} calls refused as expected, {} registrations superseded, \
             {} operations skipped, {} drains; notifications: {} notified transfers, {} \
             standalone, {} drained ({} before their transfer was reported, {} of transfers \
             left with no verdict), {} destination blocks checked at their drain, {} discarded \
             by a target's close",
            self.ops,
            self.posted,
            self.done,
            self.failed,
            self.taken_by_wait,
            self.still_running,
            self.forgotten,
            self.in_flight_at_close,
            self.max_in_flight,
            self.refused,
            self.superseded,
            self.skipped,
            self.drains,
            self.notified,
            self.notifies,
            self.notes_drained,
            self.notes_early,
            self.notes_undetermined,
            self.notes_blocks_checked,
            self.notes_discarded
        )
    }
}

/// A difference between what a backend did and what the model says it must do.
///
/// ```
/// use blockwire_conformance::model::Violation;
/// let v = Violation {
///     step: Some(2),
///     action: Some(r#""Drain""#.into()),
///     message: "x".into(),
///     trace: vec![],
/// };
/// assert!(v.to_string().starts_with(r#"step 2 ("Drain"): x"#));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the action that found it; `None` for the checks after the last one.
    pub step: Option<usize>,
    /// That action, as one line of JSON ([`Action::to_json`]).
    pub action: Option<String>,
    /// What was observed, and what was expected.
    pub message: String,
    /// What the runner did up to then, one line per call.
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.step, &self.action) {
            (Some(step), Some(op)) => write!(f, "step {step} ({op}): {}", self.message)?,
            (Some(step), None) => write!(f, "step {step}: {}", self.message)?,
            _ => write!(f, "after the last step: {}", self.message)?,
        }
        if !self.trace.is_empty() {
            f.write_str("\ntrace:")?;
            for line in &self.trace {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

/// Runs `actions` against fresh transports of `fx` shaped by `setup`, checks every result
/// against the model, then closes and drops everything and checks that nothing leaked (see
/// the module docs). Returns what ran, or the first violation.
///
/// (The example runs in a process of its own: the leak check counts the process's threads.)
///
/// ```standalone_crate
/// use blockwire_conformance::model::{self, Action, Setup};
/// use blockwire_conformance::{Plain, Setting};
/// let fx = Plain(Setting::<blockwire_shm::ShmBackend>::default());
/// let setup = Setup::new(16, 4096);
/// model::warm_up(&fx, &setup)?;
/// let report = model::run(&fx, &setup, &[Action::Add { peer: 0, remote: 0 }, Action::Close])?;
/// assert_eq!(report.ops, 2);
/// # Ok::<(), model::Violation>(())
/// ```
pub fn run<F: Fixture>(fx: &F, setup: &Setup, actions: &[Action]) -> Result<Report, Violation> {
    let before = Resources::now();
    let report = run_unchecked(fx, setup, actions)?;
    before.settled(setup.timeout).map_err(|message| Violation {
        step: None,
        action: None,
        message,
        trace: Vec::new(),
    })?;
    Ok(report)
}

/// Opens, uses and closes the transports of one run once, without the resource checks, so
/// that the process-wide state a backend creates on first use (library singletons, their
/// threads and files) exists before the first measured run.
///
/// ```
/// use blockwire_conformance::model::{self, Setup};
/// use blockwire_conformance::{Plain, Setting};
/// model::warm_up(&Plain(Setting::<blockwire_shm::ShmBackend>::default()), &Setup::new(16, 4096))?;
/// # Ok::<(), model::Violation>(())
/// ```
pub fn warm_up<F: Fixture>(fx: &F, setup: &Setup) -> Result<(), Violation> {
    let actions = [
        Action::Add { peer: 0, remote: 0 },
        Action::AddAsync { peer: 1, remote: 1 },
        Action::Transfer {
            op: blockwire_core::Op::Write,
            peer: 0,
            blocks: 1,
            pick: 0,
        },
        Action::Transfer {
            op: blockwire_core::Op::Read,
            peer: 1,
            blocks: 1,
            pick: 0,
        },
        Action::Notified {
            op: blockwire_core::Op::Write,
            peer: 0,
            blocks: 1,
            pick: 0,
        },
        Action::Notify { peer: 1, pick: 0 },
        Action::Drain,
        Action::Notifications {
            target: 0,
            from: Sender::Any,
        },
        Action::Close,
    ];
    run_unchecked(fx, setup, &actions).map(|_| ())
}

fn run_unchecked<F: Fixture>(
    fx: &F,
    setup: &Setup,
    actions: &[Action],
) -> Result<Report, Violation> {
    let mut runner = Runner::open(fx, setup).map_err(|message| Violation {
        step: None,
        action: None,
        message: format!("{}: opening the transports: {message}", fx.name()),
        trace: Vec::new(),
    })?;
    for (i, action) in actions.iter().enumerate() {
        let json = action.to_json();
        runner.trace.push(format!("#{i} {json}"));
        if let Err(message) = runner.step(action) {
            return Err(Violation {
                step: Some(i),
                action: Some(json),
                message,
                trace: std::mem::take(&mut runner.trace),
            });
        }
        runner.report.ops += 1;
        let (in_flight, _) = runner.model.in_flight();
        runner.report.max_in_flight = runner.report.max_in_flight.max(in_flight);
    }
    runner
        .trace
        .push("end: drain, close, close the remotes".into());
    let trace = runner.trace.clone();
    runner.finish().map_err(|message| Violation {
        step: None,
        action: None,
        message,
        trace,
    })
}

#[cfg(test)]
mod tests {
    use super::resources::*;
    use super::state::*;
    use std::collections::BTreeSet;

    #[test]
    fn stamps_are_named_by_their_first_word() {
        let mut a = vec![0u8; 64];
        stamp_bytes(7, &mut a);
        assert_eq!(
            u64::from_le_bytes(a[..8].try_into().expect("8 bytes")) ^ MAGIC,
            7
        );
        let mut b = vec![0u8; 64];
        stamp_bytes(8, &mut b);
        assert_ne!(a, b);
        stamp_bytes(0, &mut b);
        assert!(b.iter().all(|&x| x == 0));
        let mut odd = vec![0u8; 13];
        stamp_bytes(3, &mut odd);
        assert_eq!(&odd[..8], &(3 ^ MAGIC).to_le_bytes());
    }

    #[test]
    fn choose_picks_distinct_members() {
        let from: Vec<u32> = (0..10).collect();
        let mut s = 5;
        let got = choose(&from, 4, &mut s);
        assert_eq!(got.len(), 4);
        assert_eq!(got.iter().collect::<BTreeSet<_>>().len(), 4);
        assert!(got.iter().all(|b| from.contains(b)));
        assert_eq!(choose(&from[..2], 4, &mut s).len(), 2);
    }

    #[test]
    fn pid_must_stand_alone() {
        assert!(names_pid("123:fi_shm", "123"));
        assert!(names_pid("ucx_shm_123_0", "123"));
        assert!(!names_pid("41234:x", "123"));
        assert!(!names_pid("1234", "123"));
    }
}
