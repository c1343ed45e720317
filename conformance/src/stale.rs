//! A peer's descriptor of a transport that closed, reaching another registration at the same
//! endpoint address (a TCP port the kernel handed out again, a restarted process): a WRITE
//! through it must move nothing and must not be reported done.
//!
//! Backends arrange the reuse their own way (ucx and nixl pin the new worker to the closed
//! one's TCP port; libfabric puts the closed registration's key in the new one's address):
//! [`stale_write`] runs the rest, at the backend level, and says what the WRITE did.
//! [`stale_write_across`] does it across processes: both targets are peer processes, the
//! closed one exited, the new one took its address through its environment.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire_core::{Backend, Op, PeerDescriptor, RegionSpan, XferState};

#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
mod across;
#[cfg(any(
    feature = "shm",
    feature = "ucx",
    feature = "libfabric",
    feature = "nixl"
))]
pub use across::{AcrossOutcome, WriteEnd, stale_write_across};

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
/// `open(role, span)` opens a backend over `span` ([`BLOCKS`] blocks of [`BLOCK_LEN`] bytes),
/// memory this function keeps allocated, unmoved, until that backend is dropped.
pub fn stale_write<B: Backend>(
    open: impl Fn(Role, RegionSpan) -> B,
    rewrite: impl FnOnce(PeerDescriptor, &B) -> PeerDescriptor,
    bound: Duration,
) -> Outcome {
    let len = BLOCKS as usize * BLOCK_LEN;
    let mut initiator_mem = vec![7u8; len];
    let mut closed_mem = vec![0u8; len];
    let mut new_mem = vec![0u8; len];
    let span = |mem: &mut Vec<u8>| {
        RegionSpan::new(
            NonNull::new(mem.as_mut_ptr()).expect("a vector's pointer"),
            BLOCKS,
            BLOCK_LEN,
        )
        .expect("BLOCKS blocks of BLOCK_LEN bytes")
    };
    let initiator = open(Role::Initiator, span(&mut initiator_mem));
    let closed = open(Role::Closed, span(&mut closed_mem));
    let desc = PeerDescriptor::new(
        closed.kind(),
        closed.address(),
        closed_mem.as_ptr() as u64,
        BLOCKS,
        BLOCK_LEN as u64,
        "",
    );
    drop(closed);
    let new = open(Role::New, span(&mut new_mem));
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
