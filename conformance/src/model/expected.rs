//! The model's output: what [`Model::apply`](super::reference::Model::apply) says the runner
//! must call for one action, and what each call must return.

use std::fmt;

use blockwire_core::{BlockIndex, CancelMode, Error, Op, TransferId};

use super::action::Sender;
use super::state::{Content, Landing, RegOutcome};

/// A registration handle: the `n`-th asynchronous add of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct HandleId(pub(super) usize);

/// A handle to wait for, and what it may resolve to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Settle {
    pub(super) handle: HandleId,
    pub(super) peer: usize,
    /// Names the registration in a report.
    pub(super) what: String,
    pub(super) allowed: Vec<RegOutcome>,
}

/// One call of the local transport, with the concrete arguments the model chose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Call {
    Add {
        peer: usize,
        remote: usize,
    },
    /// The handle must already have resolved when the call returns.
    AddAsync {
        peer: usize,
        remote: usize,
    },
    Remove {
        peer: usize,
    },
    /// `write_blocks`/`read_blocks`, or with a `message` their `_notify` variants.
    Post {
        op: Op,
        peer: usize,
        local: Vec<BlockIndex>,
        remote: Vec<BlockIndex>,
        message: Option<Vec<u8>>,
    },
    Notify {
        peer: usize,
        message: Vec<u8>,
    },
    /// `notifications(from)` at remote `target`, or at the local transport for `None`.
    Notifications {
        target: Option<usize>,
        from: Sender,
    },
    Poll {
        peer: Option<usize>,
    },
    Cancel {
        ids: Vec<TransferId>,
        mode: CancelMode,
    },
}

/// Fresh content the runner writes into a source block before a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fill {
    pub(super) space: usize,
    pub(super) block: BlockIndex,
    pub(super) stamp: u64,
}

/// A valid transfer the model planned; once the backend issued its id, the runner hands it
/// back with [`Model::track`](super::reference::Model::track).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Planned {
    pub(super) peer: usize,
    pub(super) conn: usize,
    /// Destination (space, block) and the content it gets when done.
    pub(super) lands: Vec<(usize, BlockIndex, Content)>,
    /// Every (space, block) it reads or writes.
    pub(super) touches: Vec<(usize, BlockIndex)>,
    /// Names it in a report.
    pub(super) what: String,
    /// The notification it carries, if any.
    pub(super) note: Option<NotePlan>,
}

/// The notification a planned transfer carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NotePlan {
    /// The remote it goes to.
    pub(super) target: usize,
    pub(super) message: Vec<u8>,
    pub(super) lands: Vec<Landing>,
}

/// What one action asks of the runner: first wait for `settle`, then `then`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Expected {
    /// Registrations to wait for before the call, each with the outcomes it may have.
    pub(super) settle: Vec<Settle>,
    /// The call and what it must return.
    pub(super) then: Then,
}

/// The call of an [`Expected`] and what it must return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Then {
    /// `call` must fail with one of `allowed`; with `nothing_tracked`, the backend must hold
    /// as many transfers after it as before.
    Refused {
        call: Call,
        allowed: Vec<Error>,
        nothing_tracked: bool,
    },
    /// `add_remote_peer` must return `Ok`; then `settle` resolve as allowed.
    Added {
        peer: usize,
        remote: usize,
        settle: Vec<Settle>,
    },
    /// `add_remote_peer_async`: the runner keeps the handle as `handle`.
    Registering {
        peer: usize,
        remote: usize,
        handle: HandleId,
    },
    /// `remove_remote_peer` must return `Ok` (if `ok`) or `UnknownPeer` (if `unknown`).
    Removed {
        peer: usize,
        ok: bool,
        unknown: bool,
    },
    /// No block free for the transfer: no call.
    Skipped,
    /// Write `fill`, then the post (with `message`, the notified variant) of `local` and `remote` to `peer` must return a fresh id,
    /// which the runner hands to [`Model::track`](super::reference::Model::track) with
    /// `planned`.
    Posted {
        fill: Vec<Fill>,
        op: Op,
        peer: usize,
        local: Vec<BlockIndex>,
        remote: Vec<BlockIndex>,
        message: Option<Vec<u8>>,
        planned: Planned,
    },
    /// `notify(peer, message)` must return a fresh id, handed to
    /// [`Model::track`](super::reference::Model::track) with `planned`.
    Notified {
        peer: usize,
        message: Vec<u8>,
        planned: Planned,
    },
    /// `notifications(from)` at remote `target` (the local transport for `None`) must
    /// succeed; what it returned goes to
    /// [`Model::received`](super::reference::Model::received), and the blocks that names
    /// must hold their content.
    Drank { target: Option<usize>, from: Sender },
    /// `poll` of `peer` (every peer for `None`) must succeed; its result goes to
    /// [`Model::absorb`](super::reference::Model::absorb).
    Polled { peer: Option<usize> },
    /// `cancel(ids, mode)` must succeed; what it returned goes to
    /// [`Model::cancelled`](super::reference::Model::cancelled).
    Cancelled {
        ids: Vec<TransferId>,
        mode: CancelMode,
    },
    /// Poll until the model tracks nothing and the backend holds nothing, absorbing every
    /// result; then every known block must hold its content, `peers()` must be `published`
    /// and the backend must count one connected peer per published peer.
    Drained { published: Vec<usize> },
    /// No call; every known block must hold its content.
    Verify { when: &'static str },
    /// `close()` must return `Ok`; then `settle` resolve as allowed, `is_closed()` is true,
    /// `peers()` empty, `descriptor()` `Err(Closed)`, and every known block holds its content.
    /// `in_flight` transfers were still tracked.
    Closed {
        settle: Vec<Settle>,
        in_flight: usize,
    },
    /// `close()` again must return `Ok`.
    ClosedAgain,
}

/// "`Err(a)`", "`Err(a)` or `Err(b)`": the errors a refusal may have.
pub(super) struct Errs<'a>(pub(super) &'a [Error]);

impl fmt::Display for Errs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            write!(f, "Err({e:?})")?;
        }
        Ok(())
    }
}
