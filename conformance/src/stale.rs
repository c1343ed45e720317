//! A peer's descriptor of a transport that closed, reaching another registration at the same
//! endpoint address (a TCP port the kernel handed out again, a restarted process): a WRITE
//! through it must move nothing and must not be reported done.
//!
//! Backends arrange the reuse their own way (ucx and nixl pin the new worker to the closed
//! one's TCP port; libfabric puts the closed registration's key in the new one's address):
//! [`stale_write`] runs the rest, at the backend level, and says what the WRITE did.
//! [`stale_write_across`] does it across processes: both targets are peer processes, the
//! closed one exited, the new one took its address through its environment.

use std::time::{Duration, Instant};

use blockwire::PeerId;
use blockwire_core::{Backend, Op, PeerDescriptor, XferState};

use crate::peer::{Opener, Reply, Request, SpawnedPeer};
use crate::support::pattern;

type Fallible<T> = Result<T, String>;

/// Blocks of each region of the check.
pub const BLOCKS: u32 = 4;
/// Bytes of each block.
pub const BLOCK_LEN: usize = 1024;

/// Which backend of the check [`stale_write`] asks its `open` for, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The one that writes.
    Initiator,
    /// The target whose descriptor goes stale: closed before [`Role::New`] opens.
    Closed,
    /// The target opened after it, at its address where the backend can arrange that.
    New,
}

/// What the stale WRITE did.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `None` when the connect or the post was refused; else the state the WRITE reached
    /// (`Running` when it was still running at the bound).
    pub state: Option<XferState>,
    /// Bytes that changed in the closed target's memory (which the caller still holds).
    pub landed_closed: usize,
    /// Bytes that changed in the new target's region.
    pub landed_new: usize,
}

impl Outcome {
    /// Nothing landed on either side and the WRITE was not reported done.
    ///
    /// ```
    /// use blockwire_conformance::stale::Outcome;
    /// use blockwire_core::XferState;
    /// let refused = Outcome { state: None, landed_closed: 0, landed_new: 0 };
    /// assert!(refused.moved_nothing());
    /// let done = Outcome { state: Some(XferState::Done), landed_closed: 2048, landed_new: 0 };
    /// assert!(!done.moved_nothing());
    /// ```
    pub fn moved_nothing(&self) -> bool {
        self.landed_closed == 0 && self.landed_new == 0 && self.state != Some(XferState::Done)
    }
}

/// Opens the initiator and the closed target, takes the target's descriptor, closes the
/// target, opens the new one, gives `rewrite` the descriptor and the new backend (it returns
/// the descriptor the initiator connects with: the same, where the backend pinned the new one
/// to the old address), then WRITEs the initiator's blocks 0 and 2 to blocks 1 and 3 through
/// it and polls the WRITE for up to `bound`. Every backend is dropped before the memory is
/// read.
///
/// `open(role, memory)` opens a backend over `memory` ([`BLOCKS`] blocks of [`BLOCK_LEN`]
/// bytes), which this function keeps allocated, unmoved, until that backend is dropped.
pub fn stale_write<B: Backend>(
    open: impl Fn(Role, &mut [u8]) -> B,
    rewrite: impl FnOnce(PeerDescriptor, &B) -> PeerDescriptor,
    bound: Duration,
) -> Outcome {
    let len = BLOCKS as usize * BLOCK_LEN;
    let mut initiator_mem = vec![7u8; len];
    let mut closed_mem = vec![0u8; len];
    let mut new_mem = vec![0u8; len];
    let initiator = open(Role::Initiator, &mut initiator_mem);
    let closed = open(Role::Closed, &mut closed_mem);
    let desc = PeerDescriptor::new(
        closed.kind(),
        closed.address(),
        closed_mem.as_ptr() as u64,
        BLOCKS,
        BLOCK_LEN as u64,
        "",
    );
    drop(closed);
    let new = open(Role::New, &mut new_mem);
    let stale = rewrite(desc, &new);
    let state = match initiator.connect(&stale) {
        Err(_) => None,
        Ok(peer) => {
            let state = match initiator.post(&peer, Op::Write, &[0, 2], &[1, 3]) {
                Err(_) => None,
                Ok(mut xfer) => {
                    let started = Instant::now();
                    let state = loop {
                        let state = initiator.state(&mut xfer);
                        if state != XferState::Running || started.elapsed() > bound {
                            break state;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    };
                    // A WRITE still running is given up with its backend below.
                    let _ = initiator.release(xfer);
                    Some(state)
                }
            };
            initiator.disconnect(peer);
            state
        }
    };
    drop((initiator, new));
    let changed = |v: &[u8]| v.iter().filter(|&&b| b != 0).count();
    Outcome {
        state,
        landed_closed: changed(&closed_mem),
        landed_new: changed(&new_mem),
    }
}

/// How the WRITE of [`stale_write_across`] ended, seen from this process.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteEnd {
    /// `add_remote_peer` or `write_blocks` refused it (the error's report).
    Refused(String),
    /// It failed (the reason).
    Failed(String),
    /// It was reported done.
    Done,
    /// Still running at the bound.
    Running,
}

/// What the stale WRITE across processes did.
#[derive(Debug)]
pub struct AcrossOutcome {
    /// How it ended here.
    pub write: WriteEnd,
    /// `Ok` when the new target process is alive and every block of its region holds what
    /// it held before; else what it answered, or why it did not.
    pub new_target: Result<(), String>,
}

impl AcrossOutcome {
    /// The new target is intact and the WRITE was not reported done (the closed target's
    /// process is gone: nothing can land there).
    ///
    /// ```
    /// use blockwire_conformance::stale::{AcrossOutcome, WriteEnd};
    /// let refused = AcrossOutcome { write: WriteEnd::Refused("stale".into()), new_target: Ok(()) };
    /// assert!(refused.moved_nothing());
    /// let crashed = AcrossOutcome { write: WriteEnd::Running, new_target: Err("gone".into()) };
    /// assert!(!crashed.moved_nothing());
    /// ```
    pub fn moved_nothing(&self) -> bool {
        self.new_target.is_ok() && self.write != WriteEnd::Done
    }
}

/// Spawns a target process (`exe`, the `blockwire-peer` binary, with `env` added to its
/// environment), takes its descriptor and lets it exit; spawns the new target with the same
/// environment (which should make it take the closed one's address: `UCX_TCP_PORT_RANGE`
/// for ucx); opens this side with `open` and WRITEs blocks 0 and 2 to blocks 1 and 3 through
/// the closed target's descriptor, polling it for up to `bound`; then asks the new target
/// whether its region still holds its own pattern.
///
/// Before ucx's connect checked whom it reached, the new process's worker copied such a
/// WRITE to the closed region's address in its own address space: into whatever it had
/// mapped there, or a crash where it had nothing.
pub fn stale_write_across(
    open: Opener,
    exe: &str,
    backend: &str,
    opts: &str,
    env: &[(&str, &str)],
    bound: Duration,
) -> Fallible<AcrossOutcome> {
    let closed = SpawnedPeer::spawn_with_env(env, exe, backend, BLOCKS, BLOCK_LEN, 2, opts)?;
    let stale = closed.descriptor.clone();
    closed.quit()?;
    let mut new = SpawnedPeer::spawn_with_env(env, exe, backend, BLOCKS, BLOCK_LEN, 3, opts)?;
    let me = open(backend, BLOCKS, BLOCK_LEN, opts)?;
    for i in 0..BLOCKS {
        me.region()
            .write_block(i, &pattern(1, i, BLOCK_LEN))
            .map_err(|e| e.report())?;
    }
    let peer = PeerId::from("stale");
    let write = match me.add_remote_peer(&peer, &stale) {
        Err(e) => WriteEnd::Refused(e.report()),
        Ok(()) => match me.write_blocks(&peer, &[0, 2], &[1, 3]) {
            Err(e) => WriteEnd::Refused(e.report()),
            Ok(id) => {
                let started = Instant::now();
                loop {
                    let polled = me.poll(Some(&peer)).map_err(|e| e.report())?;
                    if polled.done.contains(&id) {
                        break WriteEnd::Done;
                    }
                    if let Some((_, why)) = polled.failed.iter().find(|(f, _)| *f == id) {
                        break WriteEnd::Failed(why.to_string());
                    }
                    if started.elapsed() > bound {
                        break WriteEnd::Running;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        },
    };
    // A WRITE still running is given up with the close.
    drop(me);
    let new_target = match new.request(&Request::Verify {
        seed: 3,
        written: vec![],
    }) {
        Ok(Reply::Ok) => Ok(()),
        Ok(other) => Err(format!("the new target answered {other:?}")),
        Err(e) => Err(format!("the new target did not answer: {e}")),
    };
    if new_target.is_ok() {
        new.quit()?;
    }
    Ok(AcrossOutcome { write, new_target })
}
