//! The model's input: [`Action`]s, and a [`Sequence`] of them as JSON lines (what a failure
//! report prints, `BLOCKWIRE_MODEL_SAVE` writes and `BLOCKWIRE_MODEL_REPLAY` reads).

use std::fmt;

use blockwire_core::{CancelMode, Op};
use serde::{Deserialize, Serialize};

/// The one thing wrong with an [`Action::Invalid`] transfer.
///
/// ```
/// use blockwire_conformance::model::Defect;
/// assert_ne!(Defect::Empty, Defect::LengthMismatch);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// [`Op`] as serde writes it (`"Write"`, `"Read"`): core's types carry no serde.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Op")]
enum OpDef {
    Write,
    Read,
}

/// [`CancelMode`] as serde writes it (`"Immediate"`, `"Wait"`).
#[derive(Serialize, Deserialize)]
#[serde(remote = "CancelMode")]
enum CancelModeDef {
    Immediate,
    Wait,
}

/// Whose notifications an [`Action::Notifications`] drains.
///
/// ```
/// use blockwire_conformance::model::Sender;
/// assert_ne!(Sender::Any, Sender::Initiator);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Sender {
    /// `notifications(None)`.
    Any,
    /// `notifications(Some(<the local transport's name>))`: the only sender of a run.
    Initiator,
    /// `notifications(Some("stranger"))`: a name nobody sends as; drains nothing and leaves
    /// the initiator's queued.
    Stranger,
}

/// One step of a sequence. Peer and remote numbers are taken modulo the counts of the
/// [`Setup`](super::Setup), so every value is valid input.
///
/// ```
/// use blockwire::{CancelMode, Op};
/// use blockwire_conformance::model::Action;
/// let actions = vec![
///     Action::AddAsync { peer: 1, remote: 2 },
///     Action::Transfer { op: Op::Read, peer: 1, blocks: 2, pick: 99 },
///     Action::Cancel { mode: CancelMode::Wait, picks: vec![0, 4] },
///     Action::Remove { peer: 1 },
///     Action::Drain,
/// ];
/// assert_eq!(actions.len(), 5);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
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
        #[serde(with = "OpDef")]
        op: Op,
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
        #[serde(with = "OpDef")]
        op: Op,
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
        #[serde(with = "CancelModeDef")]
        mode: CancelMode,
        /// One id per pick.
        picks: Vec<u32>,
    },
    /// [`Transfer`](Action::Transfer), carrying a notification: `write_blocks_notify` or
    /// `read_blocks_notify`, with a message unique to this action (`pick` also chooses its
    /// length, up to the 4 KiB limit). It goes to the transfer's target (the remote whose
    /// blocks are written or read).
    Notified {
        /// WRITE or READ.
        #[serde(with = "OpDef")]
        op: Op,
        /// Peer name number.
        peer: u8,
        /// Most blocks to move (at least one is tried).
        blocks: u8,
        /// Chooses the blocks and the message.
        pick: u64,
    },
    /// `notify(p<peer>, message)`: a standalone notification, unique to this action (`pick`
    /// chooses its length). Expects `UnknownPeer` when the peer is not published.
    Notify {
        /// Peer name number.
        peer: u8,
        /// Chooses the message.
        pick: u64,
    },
    /// `notifications(from)` at remote `r<target>`, or at the local transport when `target`
    /// (modulo one more than the remotes) names none: every notification drained must be one
    /// the model knows was sent there, drained once, from the local transport's name; a
    /// notified transfer's destination blocks must already hold its bytes.
    Notifications {
        /// Remote transport number (one past the last: the local transport).
        target: u8,
        /// Whose notifications to drain.
        from: Sender,
    },
    /// A drain point: settle every registration, poll every peer until nothing is in flight
    /// (bounded by [`Setup::timeout`](super::Setup::timeout)), then compare every block of
    /// every transport and the peer table with the model.
    Drain,
    /// `close()` of the local transport (again: still `Ok`). Every later call must be
    /// `Err(Closed)`.
    Close,
}

impl Action {
    /// The action as one line of JSON (what [`Sequence`] writes per action).
    ///
    /// ```
    /// use blockwire_conformance::model::Action;
    /// assert_eq!(Action::Drain.to_json(), r#""Drain""#);
    /// assert_eq!(Action::Remove { peer: 2 }.to_json(), r#"{"Remove":{"peer":2}}"#);
    /// ```
    pub fn to_json(&self) -> String {
        // An enum of integers, strings and lists: serializing it cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("\"unserializable: {e}\""))
    }
}

/// A sequence to replay: the fixture it ran against, its block length and its actions.
///
/// Written as JSON lines: a header line `{"fixture":...,"block_len":...}`, then one
/// [`Action`] per line. Reading skips blank lines and lines starting with `//`, so a
/// listing can be annotated.
///
/// ```
/// use blockwire::Op;
/// use blockwire_conformance::model::{Action, Sequence};
/// let seq = Sequence {
///     fixture: "model::shm".into(),
///     block_len: 4096,
///     actions: vec![
///         Action::Add { peer: 0, remote: 1 },
///         Action::Transfer { op: Op::Write, peer: 0, blocks: 3, pick: u64::MAX },
///         Action::Poll { peer: None },
///         Action::Drain,
///     ],
/// };
/// let text = seq.to_json_lines();
/// assert!(text.starts_with("{\"fixture\":\"model::shm\",\"block_len\":4096}\n"));
/// assert_eq!(Sequence::from_json_lines(&text)?, seq);
/// let annotated = format!("// found by seed 7\n\n{text}");
/// assert_eq!(Sequence::from_json_lines(&annotated)?, seq);
/// assert!(Sequence::from_json_lines("{\"Jump\":{\"peer\":1}}").is_err());
/// # Ok::<(), blockwire_conformance::model::ReplayError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequence {
    /// The fixture's trial name (`model::shm`); informative only.
    pub fixture: String,
    /// Bytes per block of the run.
    pub block_len: usize,
    /// The actions, in order.
    pub actions: Vec<Action>,
}

/// The header line of a [`Sequence`].
#[derive(Serialize, Deserialize)]
struct Header {
    fixture: String,
    block_len: usize,
}

/// Why a [`Sequence`] could not be read.
///
/// ```
/// use blockwire_conformance::model::{ReplayError, Sequence};
/// let err = Sequence::from_json_lines("").expect_err("no header");
/// assert!(matches!(err, ReplayError::NoHeader));
/// ```
#[derive(Debug)]
pub enum ReplayError {
    /// The text has no header line.
    NoHeader,
    /// Line `line` (1-based) is not what it should be.
    Line {
        /// Its number, from 1.
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::NoHeader => {
                f.write_str("no header line {\"fixture\":...,\"block_len\":...}")
            }
            ReplayError::Line { line, .. } => write!(f, "line {line}"),
        }
    }
}

impl std::error::Error for ReplayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayError::NoHeader => None,
            ReplayError::Line { source, .. } => Some(source),
        }
    }
}

impl Sequence {
    /// The sequence as JSON lines (see [`Sequence`]).
    ///
    /// ```
    /// use blockwire_conformance::model::{Action, Sequence};
    /// let seq = Sequence { fixture: "model::shm".into(), block_len: 64, actions: vec![Action::Close] };
    /// assert_eq!(seq.to_json_lines(), "{\"fixture\":\"model::shm\",\"block_len\":64}\n\"Close\"\n");
    /// ```
    pub fn to_json_lines(&self) -> String {
        let header = Header {
            fixture: self.fixture.clone(),
            block_len: self.block_len,
        };
        let mut text = serde_json::to_string(&header)
            .unwrap_or_else(|e| format!("// unserializable header: {e}"));
        text.push('\n');
        for action in &self.actions {
            text.push_str(&action.to_json());
            text.push('\n');
        }
        text
    }

    /// Reads what [`to_json_lines`](Sequence::to_json_lines) wrote (blank lines and `//`
    /// comments skipped).
    ///
    /// ```
    /// use blockwire_conformance::model::{Action, Sequence};
    /// let text = "{\"fixture\":\"model::ucx-tcp\",\"block_len\":4096}\n\"Drain\"\n";
    /// let seq = Sequence::from_json_lines(text)?;
    /// assert_eq!((seq.block_len, seq.actions), (4096, vec![Action::Drain]));
    /// # Ok::<(), blockwire_conformance::model::ReplayError>(())
    /// ```
    pub fn from_json_lines(text: &str) -> Result<Sequence, ReplayError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with("//"));
        let (at, first) = lines.next().ok_or(ReplayError::NoHeader)?;
        let header: Header =
            serde_json::from_str(first).map_err(|source| ReplayError::Line { line: at, source })?;
        let actions = lines
            .map(|(line, l)| {
                serde_json::from_str(l).map_err(|source| ReplayError::Line { line, source })
            })
            .collect::<Result<_, _>>()?;
        Ok(Sequence {
            fixture: header.fixture,
            block_len: header.block_len,
            actions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::{Strategy, ValueTree};

    #[test]
    fn every_generated_sequence_round_trips_through_json_lines() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..200 {
            let actions = super::super::random::sequence()
                .new_tree(&mut runner)
                .expect("a value")
                .current();
            let seq = Sequence {
                fixture: "model::test".into(),
                block_len: 1 << 20,
                actions,
            };
            let text = seq.to_json_lines();
            assert_eq!(text.lines().count(), 1 + seq.actions.len());
            assert_eq!(Sequence::from_json_lines(&text).expect("read back"), seq);
        }
    }

    #[test]
    fn a_bad_line_is_named() {
        let text = "{\"fixture\":\"x\",\"block_len\":64}\n\"Drain\"\n{\"Add\":{\"peer\":300}}\n";
        match Sequence::from_json_lines(text) {
            Err(ReplayError::Line { line: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
