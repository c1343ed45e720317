//! A `shm` target's close against READs from peers in other processes.
//!
//! libfabric 1.17's `shm` provider serves a READ posted without `FI_DELIVERY_COMPLETE` inside
//! the initiator's own `fi_readmsg` (a `process_vm_readv` from the target), so the target's
//! progress thread, which its close stops, never sees it. Asking for delivery completion
//! moves the copy to the target but cost READs across processes 25 times their speed
//! (0.04 GB/s instead of 1.06 at 64 KiB, SECURITY.md). Instead, both sides agree through the
//! target endpoint's file in `/dev/shm`, which a peer in another process opens when it
//! connects ([`ReadLock`]):
//!
//! - an initiator posts READs under a shared `flock` of that file, taken before it checks that
//!   the file's path is still there and the target's process alive, and given back after at
//!   most [`GUARD_BYTES`] of READs or at the end of its post ([`ReadGuard`]);
//! - a closing target removes the path first, then takes the lock exclusively
//!   ([`close_to_reads`]), which it gets only once every READ posted before the removal has
//!   returned from the provider, its copy done. A READ posted later finds the path gone, or
//!   the lock taken, and is refused: its transfer fails as a remote disconnect.
//!
//! The lock and the wait are `blockwire_core::kit::fence`'s, which NIXL's backend uses too; a
//! target waits at most [`CLOSE_WAIT`] (an initiator stopped inside a post keeps its lock):
//! past it the close goes on, and says so at `error` level.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use blockwire_core::kit::fence::{CLOSE_WAIT, SharedFlock, wait_exclusive};

use crate::post::{RmaOp, Verb};

/// How many bytes of READs an initiator posts under one shared lock before it gives it back
/// and takes it again: a closing target waits for at most about this much copying per peer.
pub(crate) const GUARD_BYTES: usize = 1 << 20;

/// What a guard asks of the target it posts to (a [`crate::link::Link`]).
pub(crate) trait ReadTarget {
    /// Why the target will never serve an operation again, `None` while it may.
    fn gone(&self) -> Option<String>;
    /// The target, in words, for errors.
    fn describe(&self) -> String;
}

/// An initiator's open of a `shm` target's endpoint file, whose shared lock its READs hold
/// (one open for every post to the target: the posting and retry threads).
pub(crate) struct ReadLock(SharedFlock);

impl ReadLock {
    /// Opens the target's endpoint file `path` (named by the peer's address: a link or a
    /// FIFO is refused, not opened). `None` when it is gone already (the target closed: every
    /// post is refused, `Link::gone`).
    pub(crate) fn open(path: &Path) -> std::io::Result<Option<Self>> {
        match blockwire_core::kit::fence::open_regular(path) {
            Ok(file) => Ok(Some(ReadLock(SharedFlock::new(file)))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One more holder; `Err` when the target holds the lock (it is closing).
    fn acquire(&self, target: &dyn ReadTarget) -> Result<(), String> {
        match self.0.acquire() {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("{} is closing", target.describe())),
            Err(e) => Err(format!("locking {}: {e}", target.describe())),
        }
    }
}

/// One post's hold on its target's [`ReadLock`], taken by its first READ and kept for at most
/// [`GUARD_BYTES`] of them (see the module docs). WRITEs and sends need none: the target's
/// progress thread copies them, and its close stops that first.
pub(crate) struct ReadGuard<'a> {
    target: &'a dyn ReadTarget,
    lock: Option<&'a ReadLock>,
    held: bool,
    bytes: usize,
}

impl<'a> ReadGuard<'a> {
    /// A guard for posts to `target`, whose endpoint file is `lock` (`None`: a peer of this
    /// process, or another provider: nothing to hold).
    pub(crate) fn new(target: &'a dyn ReadTarget, lock: Option<&'a ReadLock>) -> Self {
        ReadGuard {
            target,
            lock,
            held: false,
            bytes: 0,
        }
    }

    /// Before `op` is posted: for a READ, holds the target's lock, checking as it takes it
    /// that the target has not closed. `Err(why)` when it has, or is closing: `op` must not
    /// be posted.
    pub(crate) fn admit(&mut self, op: &RmaOp) -> Result<(), String> {
        let Some(lock) = self.lock.filter(|_| op.op == Verb::Read) else {
            return Ok(());
        };
        if self.held {
            // A target that removed its path since waits for the lock: this READ is before
            // its close returns.
            return Ok(());
        }
        lock.acquire(self.target)?;
        self.held = true;
        // After the lock: a target that removed its path before this waits for this READ.
        if let Some(why) = self.target.gone() {
            self.give_back();
            return Err(why);
        }
        Ok(())
    }

    /// After `op` was posted (or refused): the lock goes back once [`GUARD_BYTES`] of READs
    /// were posted under it.
    pub(crate) fn posted(&mut self, op: &RmaOp) {
        if !self.held {
            return;
        }
        self.bytes += op.len;
        if self.bytes >= GUARD_BYTES {
            self.give_back();
        }
    }

    fn give_back(&mut self) {
        if let (true, Some(lock)) = (self.held, self.lock) {
            lock.0.release();
        }
        self.held = false;
        self.bytes = 0;
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// A closing `shm` target's side (see the module docs): removes its endpoint's file `path`,
/// then waits, for at most [`CLOSE_WAIT`], until no peer holds its READ lock. Returns how long
/// it waited.
pub(crate) fn close_to_reads(path: &Path) -> Duration {
    let started = Instant::now();
    // Opened before the removal: the lock is the file's, whatever its path.
    let file = File::open(path);
    if let Err(e) = std::fs::remove_file(path) {
        tracing::debug!(path = %path.display(), error = %e, "removing the shm endpoint's file");
    }
    match file {
        // Past the bound `wait_exclusive` says so itself.
        Ok(file) => drop(wait_exclusive(&file, CLOSE_WAIT)),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "opening the shm endpoint's file");
        }
    }
    started.elapsed()
}

#[cfg(test)]
mod tests;
