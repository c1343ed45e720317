//! Operations, transfer states, failure reasons and poll results.

use std::fmt;
use std::time::Duration;

use crate::{TransferId, TransferRecord};

/// Direction of a transfer, seen from the side that posts it.
///
/// ```
/// use blockwire_core::Op;
/// assert_eq!(Op::Read.to_string(), "READ");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    /// Local blocks are copied into the remote peer's blocks.
    Write,
    /// Remote blocks are copied into local blocks.
    Read,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Write => "WRITE",
            Op::Read => "READ",
        })
    }
}

/// How `cancel` treats a transfer that may still be moving bytes.
///
/// ```
/// use blockwire_core::CancelMode;
/// assert_ne!(CancelMode::Immediate, CancelMode::Wait);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum CancelMode {
    /// Stop tracking each known id at once and return `[]`. The backend may keep moving bytes
    /// of those transfers for a while; its resources are released once it stops.
    #[default]
    Immediate,
    /// Release only transfers that have stopped. A still-running transfer stays tracked and
    /// its id is returned; it surfaces later through `poll` as done or failed. Once an id is no
    /// longer returned, no byte of it lands afterwards.
    Wait,
}

/// Why a transfer failed.
///
/// ```
/// use blockwire_core::FailureReason;
/// let r = FailureReason::RemoteDisconnect("peer process exited".into());
/// assert!(r.is_remote_disconnect());
/// assert_eq!(r.to_string(), "remote disconnect: peer process exited");
/// ```
#[non_exhaustive]
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum FailureReason {
    /// The peer was removed (or replaced by a newer registration) while the transfer ran.
    PeerRemoved,
    /// The remote side went away: process exited, region deregistered, link lost.
    RemoteDisconnect(String),
    /// The transfer stopped early because it was asked to (cancel, remove, close).
    Aborted,
    /// The backend reported an error for this transfer.
    Backend(String),
    /// Checking the transfer's state failed: the backend cannot say what became of it. Its
    /// peer is faulted at once ([`PeerFault::StateCheck`]).
    StateCheck(String),
    /// The transfer's bytes landed but its notification could not be delivered (the peer
    /// went away, refused it, or the library failed it): the target never learns of the
    /// transfer, so it must not count as done.
    NotificationUndelivered(String),
}

impl FailureReason {
    /// A short name of the reason's kind, for metric labels and counters: `peer_removed`,
    /// `remote_disconnect`, `aborted`, `backend`, `state_check`, `notification_undelivered`.
    ///
    /// ```
    /// use blockwire_core::FailureReason;
    /// assert_eq!(FailureReason::Aborted.label(), "aborted");
    /// ```
    pub fn label(&self) -> &'static str {
        match self {
            FailureReason::PeerRemoved => "peer_removed",
            FailureReason::RemoteDisconnect(_) => "remote_disconnect",
            FailureReason::Aborted => "aborted",
            FailureReason::Backend(_) => "backend",
            FailureReason::StateCheck(_) => "state_check",
            FailureReason::NotificationUndelivered(_) => "notification_undelivered",
        }
    }

    /// Whether this is a [`FailureReason::RemoteDisconnect`].
    ///
    /// ```
    /// # use blockwire_core::FailureReason;
    /// assert!(!FailureReason::Aborted.is_remote_disconnect());
    /// ```
    pub fn is_remote_disconnect(&self) -> bool {
        matches!(self, FailureReason::RemoteDisconnect(_))
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::PeerRemoved => f.write_str("peer removed"),
            FailureReason::RemoteDisconnect(m) => write!(f, "remote disconnect: {m}"),
            FailureReason::Aborted => f.write_str("aborted"),
            FailureReason::Backend(m) => write!(f, "backend error: {m}"),
            FailureReason::StateCheck(m) => write!(f, "state check failed: {m}"),
            FailureReason::NotificationUndelivered(m) => {
                write!(f, "notification undelivered: {m}")
            }
        }
    }
}

/// What a backend says about one posted transfer.
///
/// ```
/// use blockwire_core::{FailureReason, XferState};
/// assert!(XferState::Done.is_terminal());
/// assert!(XferState::Failed(FailureReason::Aborted).is_terminal());
/// assert!(!XferState::Running.is_terminal());
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum XferState {
    /// Still queued or moving bytes.
    Running,
    /// Every byte is at the target (remote completion, not merely local).
    Done,
    /// Stopped with an error.
    Failed(FailureReason),
}

impl XferState {
    /// Done or failed.
    ///
    /// ```
    /// # use blockwire_core::XferState;
    /// assert!(XferState::Done.is_terminal());
    /// ```
    pub fn is_terminal(&self) -> bool {
        !matches!(self, XferState::Running)
    }
}

/// The transfers one `poll` drained, and on a peer-scoped poll the peer's fault, if the
/// transport has judged the peer unusable.
///
/// ```
/// use blockwire_core::{PollResult, TransferId};
/// let r = PollResult::default();
/// assert!(r.is_empty());
/// assert_eq!(r.len(), 0);
/// assert!(r.ids().eq(std::iter::empty::<TransferId>()));
/// assert!(r.peer_fault.is_none());
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct PollResult {
    /// Transfers whose bytes are all at the target, in id order.
    pub done: Vec<TransferId>,
    /// Transfers that stopped with an error, with the reason, in id order.
    pub failed: Vec<(TransferId, FailureReason)>,
    /// Set on a peer-scoped poll once the transport has judged that peer unusable, and on
    /// every such poll after, until the peer is removed (or registered again); posts to it
    /// are refused with the same fault. `None` while the peer is healthy, and on `poll(None)`.
    pub peer_fault: Option<PeerFault>,
    /// With telemetry on (`TransportOptions::telemetry`), a record of each transfer reported
    /// here, done or failed, in id order; empty otherwise.
    pub records: Vec<TransferRecord>,
}

impl PollResult {
    /// No transfer finished (a peer fault may still be reported).
    ///
    /// ```
    /// # use blockwire_core::PollResult;
    /// assert!(PollResult::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.done.is_empty() && self.failed.is_empty()
    }

    /// How many transfers finished (done plus failed).
    ///
    /// ```
    /// # use blockwire_core::{PollResult, TransferId};
    /// let r = PollResult { done: vec![TransferId(1)], ..PollResult::default() };
    /// assert_eq!(r.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.done.len() + self.failed.len()
    }

    /// Every finished id, done first, then failed.
    ///
    /// ```
    /// # use blockwire_core::{FailureReason, PollResult, TransferId};
    /// let r = PollResult {
    ///     done: vec![TransferId(2)],
    ///     failed: vec![(TransferId(1), FailureReason::Aborted)],
    ///     ..PollResult::default()
    /// };
    /// assert_eq!(r.ids().collect::<Vec<_>>(), vec![TransferId(2), TransferId(1)]);
    /// ```
    pub fn ids(&self) -> impl Iterator<Item = TransferId> + '_ {
        self.done
            .iter()
            .copied()
            .chain(self.failed.iter().map(|(id, _)| *id))
    }

    /// Appends another result (the first peer fault seen is kept).
    ///
    /// ```
    /// # use blockwire_core::{PollResult, TransferId};
    /// let mut a = PollResult { done: vec![TransferId(1)], ..PollResult::default() };
    /// a.extend(PollResult { done: vec![TransferId(2)], ..PollResult::default() });
    /// assert_eq!(a.done.len(), 2);
    /// ```
    pub fn extend(&mut self, other: PollResult) {
        self.done.extend(other.done);
        self.failed.extend(other.failed);
        self.records.extend(other.records);
        if self.peer_fault.is_none() {
            self.peer_fault = other.peer_fault;
        }
    }
}

/// Why the transport judged a peer unusable (vLLM's "peer fault"): reported by every
/// peer-scoped `poll` of it and by every post to it (`Error::PeerFaulted`) until the peer is
/// removed or registered again. The transport never recovers a peer itself: the caller tears
/// the session down and registers the peer anew.
///
/// ```
/// use blockwire_core::{FailureReason, PeerFault};
/// let f = PeerFault::ConsecutiveFailures { count: 3, last: FailureReason::Backend("EIO".into()) };
/// assert_eq!(f.to_string(), "3 consecutive transfer failures (last: backend error: EIO)");
/// assert!(PeerFault::RemoteDisconnect("reset".into()).to_string().contains("reset"));
/// ```
#[non_exhaustive]
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum PeerFault {
    /// A transfer to it failed, or a post to it was refused, as a remote disconnect.
    RemoteDisconnect(String),
    /// The stall watchdog cut it: transfers were in flight and none completed for this long.
    Stalled(Duration),
    /// Checking the state of one of its transfers failed ([`FailureReason::StateCheck`]).
    StateCheck(String),
    /// This many transfers to it failed (or were refused at submission) in a row, with no
    /// success between (`TransportOptions::max_consecutive_failures`).
    ConsecutiveFailures {
        /// Failures in a row.
        count: u32,
        /// The last one.
        last: FailureReason,
    },
}

impl fmt::Display for PeerFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerFault::RemoteDisconnect(m) => write!(f, "remote disconnect: {m}"),
            PeerFault::Stalled(d) => write!(
                f,
                "stalled: transfers in flight and none completed for {d:?}; its connection was cut"
            ),
            PeerFault::StateCheck(m) => write!(f, "a transfer's state check failed: {m}"),
            PeerFault::ConsecutiveFailures { count, last } => {
                write!(f, "{count} consecutive transfer failures (last: {last})")
            }
        }
    }
}
