//! Model-based random testing of the [`Transport`](blockwire::Transport) contract: run a sequence of [`Op`]s against
//! real transports of a [`Fixture`] and check every result against a small reference model.
//!
//! One run opens a local transport (the only one that posts transfers) and one remote transport
//! per entry of [`Setup::remote_blocks`] (`r0`, `r1`, ...), with different block counts, and
//! registers remotes on the local side under the peer names `p0`, `p1`, ... as the operations
//! say. The operations are abstract (which peer, how many blocks, a number to pick blocks
//! with), so any sequence is valid input and shrinks well; the runner turns each into concrete
//! calls and knows, from the model, what every call must return:
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
//! - **data**: the runner only picks blocks that no transfer still in flight touches (including
//!   ones an immediate cancel forgot, until the next drain), writes fresh content into the
//!   source blocks before it posts, and at every drain point (poll until nothing is in flight)
//!   compares every block of every transport with the model. A done transfer's destinations
//!   hold its sources' content; a failed or cancelled one's are unknown until overwritten;
//!   source blocks never change.
//! - **errors**: an unknown peer gives `UnknownPeer`, a bad index list exactly its variant
//!   (`LengthMismatch`, `EmptyTransfer`, `LocalIndexOutOfRange`, `RemoteIndexOutOfRange`,
//!   `DuplicateDestination`) and tracks nothing; after `close` every call is `Err(Closed)` and
//!   `close` itself stays `Ok`.
//! - **registrations**: a handle resolves `Ok`, or `Superseded` when the peer was removed or
//!   added again before it published, or `Closed` once the transport closed; at a drain point
//!   `peers()` and the backend's connected peer count equal the model's published peers.
//! - **resources**: after the run every transport is closed and dropped; the backends' live
//!   counts must be zero, and the process's threads, open file descriptors and `/dev/shm` files
//!   naming its pid must be back to what they were before the run (waiting a little for them
//!   to settle). Backends may keep process-wide singletons: run [`warm_up`] once first.
//!
//! The runner takes a plain `&[Op]`; generating sequences (proptest, a fuzzer, a fixed list)
//! is the caller's business. [`random`] generates them with proptest, one `libtest` trial per
//! fixture: `conformance/tests/model.rs` runs it for every backend compiled in but nixl, and
//! `backends/nixl/tests/nixl_model.rs` for nixl (its own process, like its suite). A violation
//! names the failing step, what was observed and expected, and the runner's trace of every
//! call; [`Op::parse_list`] reads a sequence back from its `Debug` lines to replay it.
//!
//! ```
//! use blockwire_conformance::model::{self, Dir, Op, Setup};
//! use blockwire_conformance::{Plain, ShmFactory};
//! let fx = Plain(ShmFactory::default());
//! let setup = Setup::new(16, 4096);
//! model::warm_up(&fx, &setup)?;
//! let ops = [
//!     Op::Add { peer: 0, remote: 1 },
//!     Op::Transfer { dir: Dir::Write, peer: 0, blocks: 3, pick: 7 },
//!     Op::Poll { peer: Some(0) },
//!     Op::Drain,
//! ];
//! let report = model::run(&fx, &setup, &ops)?;
//! assert_eq!(report.ops, 4);
//! # Ok::<(), model::Violation>(())
//! ```

use std::fmt;
use std::time::Duration;

use blockwire_core::{CancelMode, Op as XferOp};

use crate::fixture::{Fixture, Spec};

pub mod random;
mod resources;
mod runner;
mod state;

use resources::*;
use runner::*;

/// Direction of a transfer, seen from the local transport.
///
/// ```
/// use blockwire_conformance::model::Dir;
/// assert_ne!(Dir::Write, Dir::Read);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Local blocks into the peer's blocks.
    Write,
    /// The peer's blocks into local blocks.
    Read,
}

impl Dir {
    fn op(self) -> XferOp {
        match self {
            Dir::Write => XferOp::Write,
            Dir::Read => XferOp::Read,
        }
    }
}

/// The one thing wrong with an [`Op::Invalid`] transfer.
///
/// ```
/// use blockwire_conformance::model::Defect;
/// assert_ne!(Defect::Empty, Defect::LengthMismatch);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// The remote list is one longer than the local list.
    LengthMismatch,
    /// Both lists are empty.
    Empty,
    /// One local index is past the local region.
    LocalOutOfRange,
    /// One remote index is past the peer's region.
    RemoteOutOfRange,
    /// The destination list (remote for a WRITE, local for a READ) names a block twice.
    DuplicateDestination,
}

/// One step of a sequence. Peer and remote numbers are taken modulo the counts of the
/// [`Setup`], so every value is valid input.
///
/// ```
/// use blockwire_conformance::model::{Dir, Op};
/// let ops = vec![
///     Op::AddAsync { peer: 1, remote: 2 },
///     Op::Transfer { dir: Dir::Read, peer: 1, blocks: 2, pick: 99 },
///     Op::Cancel { mode: blockwire::CancelMode::Wait, picks: vec![0, 4] },
///     Op::Remove { peer: 1 },
///     Op::Drain,
/// ];
/// assert_eq!(ops.len(), 5);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `add_remote_peer(p<peer>, descriptor of r<remote>)`, synchronous.
    Add {
        /// Peer name number.
        peer: u8,
        /// Remote transport number.
        remote: u8,
    },
    /// `add_remote_peer_async(p<peer>, descriptor of r<remote>)`; the handle is kept and
    /// checked once the runner needs the peer's state settled (a transfer to it, a drain,
    /// close).
    AddAsync {
        /// Peer name number.
        peer: u8,
        /// Remote transport number.
        remote: u8,
    },
    /// `remove_remote_peer(p<peer>)`.
    Remove {
        /// Peer name number.
        peer: u8,
    },
    /// A valid WRITE or READ of up to `blocks` blocks (fewer when fewer are free, none when
    /// none are) to `p<peer>`, on blocks `pick` chooses among those no transfer in flight
    /// touches. Sources get fresh content first; `pick` also decides whether a source block
    /// repeats (allowed: only destinations must differ). Expects `UnknownPeer` when the peer
    /// is not published.
    Transfer {
        /// WRITE or READ.
        dir: Dir,
        /// Peer name number.
        peer: u8,
        /// Most blocks to move (at least one is tried).
        blocks: u8,
        /// Chooses the blocks.
        pick: u64,
    },
    /// A transfer with exactly one [`Defect`]; must be refused with that defect's error (or
    /// `UnknownPeer` when the peer is not published) and leave nothing tracked.
    Invalid {
        /// WRITE or READ.
        dir: Dir,
        /// Peer name number.
        peer: u8,
        /// What is wrong with it.
        defect: Defect,
        /// Chooses the indices.
        pick: u64,
    },
    /// `poll(Some(p<peer>))`, or `poll(None)`.
    Poll {
        /// Peer name number, or every peer.
        peer: Option<u8>,
    },
    /// `cancel(ids, mode)`. Each pick chooses an id: mostly one in flight (`pick % 4 != 3`;
    /// two picks may choose the same one), else one already finished or one never issued.
    Cancel {
        /// Immediate or wait.
        mode: CancelMode,
        /// One id per pick.
        picks: Vec<u32>,
    },
    /// A drain point: settle every registration, poll every peer until nothing is in flight
    /// (bounded by [`Setup::timeout`]), then compare every block of every transport and the
    /// peer table with the model.
    Drain,
    /// `close()` of the local transport (again: still `Ok`). Every later call must be
    /// `Err(Closed)`.
    Close,
}

impl Op {
    /// Parses operations written as `Debug` prints them (what a failure report and a saved
    /// sequence list), one per line; a trailing comma, blank lines and `//` comments are
    /// ignored.
    ///
    /// ```
    /// use blockwire_conformance::model::{Dir, Op};
    /// let text = "// a saved sequence\n\
    ///             Add { peer: 0, remote: 2 },\n\
    ///             Transfer { dir: Write, peer: 0, blocks: 3, pick: 42 },\n\
    ///             Cancel { mode: Wait, picks: [1, 7] },\n\
    ///             Poll { peer: None },\n\
    ///             Drain,";
    /// let ops = Op::parse_list(text)?;
    /// assert_eq!(ops[1], Op::Transfer { dir: Dir::Write, peer: 0, blocks: 3, pick: 42 });
    /// assert_eq!(ops.len(), 5);
    /// let again = ops.iter().map(|op| format!("{op:?}")).collect::<Vec<_>>().join("\n");
    /// assert_eq!(Op::parse_list(&again)?, ops);
    /// assert!(Op::parse_list("Jump { peer: 1 }").is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn parse_list(text: &str) -> Result<Vec<Op>, String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(|l| Op::parse(l).map_err(|e| format!("{l:?}: {e}")))
            .collect()
    }

    fn parse(line: &str) -> Result<Op, String> {
        let words: Vec<&str> = line
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        // Field names and values alternate after the variant: `Add peer 0 remote 2`.
        let field = |name: &str| -> Result<&str, String> {
            let at = words
                .iter()
                .position(|w| *w == name)
                .ok_or_else(|| format!("no field {name}"))?;
            words
                .get(at + 1)
                .copied()
                .ok_or_else(|| format!("no value for {name}"))
        };
        let num = |name: &str| -> Result<u64, String> {
            field(name)?
                .parse()
                .map_err(|e| format!("field {name}: {e}"))
        };
        let small = |name: &str| -> Result<u8, String> {
            u8::try_from(num(name)?).map_err(|e| format!("field {name}: {e}"))
        };
        let dir = || match field("dir")? {
            "Write" => Ok(Dir::Write),
            "Read" => Ok(Dir::Read),
            other => Err(format!("no direction {other}")),
        };
        let op = match words.first().copied().unwrap_or_default() {
            "Add" => Op::Add {
                peer: small("peer")?,
                remote: small("remote")?,
            },
            "AddAsync" => Op::AddAsync {
                peer: small("peer")?,
                remote: small("remote")?,
            },
            "Remove" => Op::Remove {
                peer: small("peer")?,
            },
            "Transfer" => Op::Transfer {
                dir: dir()?,
                peer: small("peer")?,
                blocks: small("blocks")?,
                pick: num("pick")?,
            },
            "Invalid" => Op::Invalid {
                dir: dir()?,
                peer: small("peer")?,
                defect: match field("defect")? {
                    "LengthMismatch" => Defect::LengthMismatch,
                    "Empty" => Defect::Empty,
                    "LocalOutOfRange" => Defect::LocalOutOfRange,
                    "RemoteOutOfRange" => Defect::RemoteOutOfRange,
                    "DuplicateDestination" => Defect::DuplicateDestination,
                    other => return Err(format!("no defect {other}")),
                },
                pick: num("pick")?,
            },
            "Poll" => Op::Poll {
                peer: match field("peer")? {
                    "None" => None,
                    _ => Some(
                        words
                            .get(3)
                            .and_then(|w| w.parse().ok())
                            .ok_or("field peer: expected Some(n) or None")?,
                    ),
                },
            },
            "Cancel" => Op::Cancel {
                mode: match field("mode")? {
                    "Wait" => CancelMode::Wait,
                    "Immediate" => CancelMode::Immediate,
                    other => return Err(format!("no cancel mode {other}")),
                },
                picks: words
                    .iter()
                    .skip_while(|w| **w != "picks")
                    .skip(1)
                    .map(|w| w.parse().map_err(|e| format!("field picks: {e}")))
                    .collect::<Result<_, String>>()?,
            },
            "Drain" => Op::Drain,
            "Close" => Op::Close,
            other => return Err(format!("no operation {other}")),
        };
        Ok(op)
    }
}

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
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops, {} transfers ({} done, {} failed, {} taken by cancel-wait, {} returned \
             running by cancel-wait, {} forgotten by cancel-immediate, {} in flight at close; \
             at most {} in flight), {} calls refused as expected, {} registrations superseded, \
             {} operations skipped, {} drains",
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
            self.drains
        )
    }
}

/// A difference between what a backend did and what the model says it must do.
///
/// ```
/// use blockwire_conformance::model::Violation;
/// let v = Violation { step: Some(2), op: Some("Drain".into()), message: "x".into(), trace: vec![] };
/// assert!(v.to_string().starts_with("step 2 (Drain): x"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the operation that found it; `None` for the checks after the last one.
    pub step: Option<usize>,
    /// That operation, as `Debug` prints it.
    pub op: Option<String>,
    /// What was observed, and what was expected.
    pub message: String,
    /// What the runner did up to then, one line per call.
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.step, &self.op) {
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

/// Runs `ops` against fresh transports of `fx` shaped by `setup`, checks every result against
/// the model, then closes and drops everything and checks that nothing leaked (see the module
/// docs). Returns what ran, or the first violation.
///
/// ```
/// use blockwire_conformance::model::{self, Op, Setup};
/// use blockwire_conformance::{Plain, ShmFactory};
/// let fx = Plain(ShmFactory::default());
/// let setup = Setup::new(16, 4096);
/// model::warm_up(&fx, &setup)?;
/// let report = model::run(&fx, &setup, &[Op::Add { peer: 0, remote: 0 }, Op::Close])?;
/// assert_eq!(report.ops, 2);
/// # Ok::<(), model::Violation>(())
/// ```
pub fn run<F: Fixture>(fx: &F, setup: &Setup, ops: &[Op]) -> Result<Report, Violation> {
    let before = Resources::now();
    let report = run_unchecked(fx, setup, ops)?;
    before.settled(setup.timeout).map_err(|message| Violation {
        step: None,
        op: None,
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
/// use blockwire_conformance::{Plain, ShmFactory};
/// model::warm_up(&Plain(ShmFactory::default()), &Setup::new(16, 4096))?;
/// # Ok::<(), model::Violation>(())
/// ```
pub fn warm_up<F: Fixture>(fx: &F, setup: &Setup) -> Result<(), Violation> {
    let ops = [
        Op::Add { peer: 0, remote: 0 },
        Op::AddAsync { peer: 1, remote: 1 },
        Op::Transfer {
            dir: Dir::Write,
            peer: 0,
            blocks: 1,
            pick: 0,
        },
        Op::Transfer {
            dir: Dir::Read,
            peer: 1,
            blocks: 1,
            pick: 0,
        },
        Op::Drain,
        Op::Close,
    ];
    run_unchecked(fx, setup, &ops).map(|_| ())
}

fn run_unchecked<F: Fixture>(fx: &F, setup: &Setup, ops: &[Op]) -> Result<Report, Violation> {
    let mut runner = Runner::open(fx, setup).map_err(|message| Violation {
        step: None,
        op: None,
        message: format!("{}: opening the transports: {message}", fx.name()),
        trace: Vec::new(),
    })?;
    for (i, op) in ops.iter().enumerate() {
        runner.trace.push(format!("#{i} {op:?}"));
        if let Err(message) = runner.step(op) {
            return Err(Violation {
                step: Some(i),
                op: Some(format!("{op:?}")),
                message,
                trace: std::mem::take(&mut runner.trace),
            });
        }
        runner.report.ops += 1;
        runner.report.max_in_flight = runner.report.max_in_flight.max(runner.m.tracked.len());
    }
    runner
        .trace
        .push("end: drain, close, close the remotes".into());
    let trace = runner.trace.clone();
    runner.finish().map_err(|message| Violation {
        step: None,
        op: None,
        message,
        trace,
    })
}

// ---------------------------------------------------------------------------------------------
// Block content.

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
