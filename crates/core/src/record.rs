//! [`TransferRecord`]: what telemetry noted of one transfer.

use std::time::Duration;

use crate::{FailureReason, Op, PeerId, TransferId};

/// What a transfer moved: blocks one way or the other, or a standalone notification.
///
/// ```
/// use blockwire_core::{Op, TransferKind};
/// assert_eq!(TransferKind::from(Op::Read).as_str(), "read");
/// assert_eq!(TransferKind::Notification.as_str(), "notification");
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransferKind {
    /// A WRITE.
    Write,
    /// A READ.
    Read,
    /// A standalone notification.
    Notification,
}

impl TransferKind {
    /// Its name in metric labels: `write`, `read`, `notification`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransferKind::Write => "write",
            TransferKind::Read => "read",
            TransferKind::Notification => "notification",
        }
    }
}

impl From<Op> for TransferKind {
    fn from(op: Op) -> Self {
        match op {
            Op::Write => TransferKind::Write,
            Op::Read => TransferKind::Read,
        }
    }
}

/// One reported transfer, as telemetry noted it (`TransportOptions::telemetry`): returned with
/// the poll result that reports it ([`crate::PollResult::records`]).
///
/// ```
/// use std::time::Duration;
/// use blockwire_core::{TransferId, TransferKind, TransferRecord};
/// let r = TransferRecord {
///     id: TransferId(1),
///     peer: "decode-0".into(),
///     kind: TransferKind::Write,
///     notified: true,
///     blocks: 16,
///     bytes: 16 << 16,
///     submit: Duration::from_micros(4),
///     latency: Duration::from_micros(180),
///     outcome: Ok(()),
/// };
/// assert_eq!(r.outcome_label(), "done");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferRecord {
    /// The transfer.
    pub id: TransferId,
    /// Its peer.
    pub peer: PeerId,
    /// What it moved.
    pub kind: TransferKind,
    /// It carried a notification.
    pub notified: bool,
    /// Blocks moved (0 for a standalone notification).
    pub blocks: u32,
    /// Bytes moved (blocks times block length; a notification's message is not counted).
    pub bytes: u64,
    /// Time spent in the submit call (`write_blocks` and the like).
    pub submit: Duration,
    /// From the submit call until the poll that reported it.
    pub latency: Duration,
    /// Done, or failed with the reason.
    pub outcome: Result<(), FailureReason>,
}

impl TransferRecord {
    /// The outcome as a metric label: `done`, or the failure's [`FailureReason::label`].
    pub fn outcome_label(&self) -> &'static str {
        match &self.outcome {
            Ok(()) => "done",
            Err(reason) => reason.label(),
        }
    }
}
