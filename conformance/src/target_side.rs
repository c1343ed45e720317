//! The target's side of close across processes: once a transport's close returns, no peer
//! process's WRITE lands in its region and no peer's READ reads it.
//!
//! The target is closed but kept, so its memory stays mapped, and is filled with a canary
//! right after close returned (made before, so that it lands at once: a READ that still
//! copies is then caught); the initiator's transfers must then surface within a bound, and
//! the canary must be intact once they did. Each direction is run: a spawned peer process is
//! the target ([`Request::Close`] and [`Request::Holds`]), and this process is the target of
//! the peer's [`Request::Post`]s. Each with transfers posted after the close, and with long
//! transfers running while the target closes.

use std::time::{Duration, Instant};

use blockwire::{Op, PeerId, TransferId, Transport};

use crate::peer::{Opener, Reply, Request, SpawnedPeer};
use crate::support::{Outcomes, pattern, record};

type Fallible<T> = Result<T, String>;

const BLOCKS: u32 = 16;
const LEN: usize = 1 << 20;
/// The canary's seed.
const CANARY: u8 = 202;
/// No post may hold the caller this long.
const POST_LIMIT: Duration = Duration::from_secs(1);

/// What one run observed.
#[derive(Debug, Clone, Default)]
pub struct TargetSideReport {
    /// The longest `write_blocks`/`read_blocks` call of this process.
    pub longest_post: Duration,
    /// Posts this process made to a closed target that were refused (the others failed).
    pub refused: usize,
    /// The longest a transfer to a closing or closed target took to surface.
    pub surfaced_after: Duration,
    /// Transfers running when the target closed that completed before it.
    pub done_before_close: usize,
}

fn all() -> Vec<u32> {
    (0..BLOCKS).collect()
}

/// Polls `peer` until each of `ids` is reported or `bound` passes.
fn surface(
    t: &dyn Transport,
    peer: &PeerId,
    ids: &[TransferId],
    bound: Duration,
) -> Fallible<Outcomes> {
    let started = Instant::now();
    let mut seen = Outcomes::new();
    while !ids.iter().all(|id| seen.contains_key(id)) {
        if started.elapsed() > bound {
            return Err(format!(
                "{} of {} transfers to the closed target did not surface within {bound:?}",
                ids.len() - seen.len(),
                ids.len()
            ));
        }
        record(&mut seen, t.poll(Some(peer)).map_err(|e| e.report())?);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(seen)
}

impl TargetSideReport {
    fn post(&mut self, t: &dyn Transport, peer: &PeerId, op: Op) -> Fallible<Option<TransferId>> {
        let blocks = all();
        let started = Instant::now();
        let posted = match op {
            Op::Write => t.write_blocks(peer, &blocks, &blocks),
            Op::Read => t.read_blocks(peer, &blocks, &blocks),
        };
        let took = started.elapsed();
        self.longest_post = self.longest_post.max(took);
        if took > POST_LIMIT {
            return Err(format!("a {op} held the caller {took:?}"));
        }
        match posted {
            Ok(id) => Ok(Some(id)),
            Err(blockwire::Error::Submit { .. } | blockwire::Error::PeerFaulted { .. }) => {
                self.refused += 1;
                Ok(None)
            }
            Err(e) => Err(format!("a {op} to the closed target: {}", e.report())),
        }
    }
}

/// A child's count of blocks holding `pattern(seed, i)`.
fn holds(child: &mut SpawnedPeer, seed: u8) -> Fallible<usize> {
    match child.request(&Request::Holds { seed })? {
        Reply::Holds { blocks } => Ok(blocks),
        other => Err(format!("Holds: {other:?}")),
    }
}

/// How many blocks of `t` hold the canary.
fn local_holds(t: &dyn Transport) -> Fallible<usize> {
    let mut n = 0;
    for i in 0..BLOCKS {
        if t.region().block(i).map_err(|e| e.report())? == pattern(CANARY, i, LEN) {
            n += 1;
        }
    }
    Ok(n)
}

/// The canary of every block, made before a close so that it lands right after it.
fn canary() -> Vec<Vec<u8>> {
    (0..BLOCKS).map(|i| pattern(CANARY, i, LEN)).collect()
}

fn fill_canary(t: &dyn Transport, canary: &[Vec<u8>]) -> Fallible<()> {
    for (i, block) in (0..BLOCKS).zip(canary) {
        t.region().write_block(i, block).map_err(|e| e.report())?;
    }
    Ok(())
}

/// Runs every target-side check for `backend` with transports from `open` and peer
/// processes from `exe`; `bound` is how long transfers to a closed target may take to surface
/// (the initiator's stall timeout, plus margin).
///
/// ```no_run
/// use blockwire_conformance::{peer::open_any, target_side::target_side_with};
/// fn main() -> Result<(), String> {
///     let r = target_side_with(open_any, "target/debug/blockwire-peer", "shm", "",
///                              std::time::Duration::from_secs(10))?;
///     assert!(r.longest_post < std::time::Duration::from_secs(1));
///     Ok(())
/// }
/// ```
pub fn target_side_with(
    open: Opener,
    exe: &str,
    backend: &str,
    opts: &str,
    bound: Duration,
) -> Fallible<TargetSideReport> {
    let mut report = TargetSideReport::default();
    let settle = || std::thread::sleep(Duration::from_millis(50));

    // 1. The child is the target; this process initiates.
    for during in [false, true] {
        for op in [Op::Write, Op::Read] {
            let me = open(backend, BLOCKS, LEN, opts)?;
            let mut child = SpawnedPeer::spawn(exe, backend, BLOCKS, LEN, 2, opts)?;
            let peer = PeerId::from("child");
            me.add_remote_peer(&peer, &child.descriptor)
                .map_err(|e| e.report())?;
            let what = format!(
                "the child closed {} this side's {op}s",
                if during { "during" } else { "before" }
            );
            // Also makes the child's canary before its close (`Request::Close`).
            if holds(&mut child, CANARY)? != 0 {
                return Err(format!(
                    "{what}: the child holds the canary before its close"
                ));
            }
            let mut ids = Vec::new();
            if during {
                for _ in 0..4 {
                    ids.extend(report.post(&*me, &peer, op)?);
                }
            }
            let started = Instant::now();
            child.expect_ok(&Request::Close { seed: CANARY })?;
            if !during {
                for _ in 0..2 {
                    ids.extend(report.post(&*me, &peer, op)?);
                }
            }
            let seen = surface(&*me, &peer, &ids, bound).map_err(|e| format!("{what}: {e}"))?;
            report.surfaced_after = report.surfaced_after.max(started.elapsed());
            for (id, outcome) in &seen {
                match outcome {
                    Ok(()) if during => report.done_before_close += 1,
                    Ok(()) => return Err(format!("{what}: transfer {id} reported done")),
                    Err(_) => {}
                }
            }
            settle();
            let n = holds(&mut child, CANARY)?;
            if n != BLOCKS as usize {
                return Err(format!(
                    "{what}: {} blocks of the closed target changed after its close",
                    BLOCKS as usize - n
                ));
            }
            if op == Op::Read && local_holds(&*me)? != 0 {
                return Err(format!(
                    "{what}: this side read the target's memory after its close"
                ));
            }
            child.quit()?;
        }
    }

    // 2. This process is the target; the child initiates.
    for during in [false, true] {
        for op in [Op::Write, Op::Read] {
            let me = open(backend, BLOCKS, LEN, opts)?;
            let mut child = SpawnedPeer::spawn(exe, backend, BLOCKS, LEN, 3, opts)?;
            let desc = me.descriptor().map_err(|e| e.report())?;
            child.expect_ok(&Request::add("parent", &desc))?;
            let what = format!(
                "this side closed {} the child's {op}s",
                if during { "during" } else { "before" }
            );
            let canary = canary();
            let mut posted = 0;
            let mut post = |child: &mut SpawnedPeer| -> Fallible<()> {
                let command = Request::Post {
                    op,
                    name: "parent".into(),
                    pairs: all().into_iter().map(|b| (b, b)).collect(),
                };
                match child.request(&command)? {
                    Reply::Id { .. } => posted += 1,
                    Reply::Refused { .. } => {}
                    other => return Err(format!("{what}: {command:?}: {other:?}")),
                }
                Ok(())
            };
            if during {
                for _ in 0..4 {
                    post(&mut child)?;
                }
            }
            me.close().map_err(|e| e.report())?;
            fill_canary(&*me, &canary)?;
            if !during {
                for _ in 0..2 {
                    post(&mut child)?;
                }
            }
            let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
            match child.request(&Request::Settle { ms })? {
                Reply::Settled {
                    done, elapsed_ms, ..
                } => {
                    report.surfaced_after =
                        report.surfaced_after.max(Duration::from_millis(elapsed_ms));
                    if !during && done > 0 {
                        return Err(format!(
                            "{what}: {done} of {posted} reported done after the close"
                        ));
                    }
                    report.done_before_close += if during { done } else { 0 };
                }
                other => return Err(format!("{what}: {other:?}")),
            }
            settle();
            let n = local_holds(&*me)?;
            if n != BLOCKS as usize {
                return Err(format!(
                    "{what}: {} blocks of this closed side changed after its close",
                    BLOCKS as usize - n
                ));
            }
            if op == Op::Read && holds(&mut child, CANARY)? != 0 {
                return Err(format!(
                    "{what}: the child read this side's memory after its close"
                ));
            }
            child.quit()?;
        }
    }
    Ok(report)
}
