//! The stale-descriptor check across processes (with a backend feature: it spawns peer
//! processes, `crate::peer`).

use std::time::{Duration, Instant};

use blockwire::PeerId;

use super::{BLOCK_LEN, BLOCKS};
use crate::peer::{Opener, Reply, Request, SpawnedPeer};
use crate::support::pattern;

type Fallible<T> = Result<T, String>;

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
