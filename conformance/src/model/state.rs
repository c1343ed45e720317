//! The reference model's state: what each block holds, each peer, each transfer.

use blockwire_core::BlockIndex;

use super::expected::HandleId;

/// Content of one block: known (`0` is zeros, any other stamp a pattern), or unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Content {
    Known(u64),
    Unknown,
}

pub(super) const MAGIC: u64 = 0x626c_6f63_6b77_6972; // "blockwir"

/// The bytes of stamp `stamp`: zeros for 0; otherwise the stamp (xor a constant) in the first
/// eight bytes, so a block's content can be named in a report, then pseudo-random words.
pub(super) fn stamp_bytes(stamp: u64, out: &mut [u8]) {
    if stamp == 0 {
        out.fill(0);
        return;
    }
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let word = if i == 0 {
            stamp ^ MAGIC
        } else {
            splitmix(stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64)
        };
        let bytes = word.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Makes `dst[1]` repeat `dst[0]` (appending to both lists when they are shorter than two);
/// returns the repeated index.
pub(super) fn repeat_first(dst: &mut Vec<BlockIndex>, src: &mut Vec<BlockIndex>) -> BlockIndex {
    let first = dst.first().copied().unwrap_or(0);
    if dst.len() >= 2 {
        dst[1] = first;
    } else {
        dst.resize(2, first);
        let other = src.first().copied().unwrap_or(0);
        src.resize(2, other);
    }
    first
}

/// Picks `n` of `from` (distinct entries), driven by `state`.
pub(super) fn choose(from: &[BlockIndex], n: usize, state: &mut u64) -> Vec<BlockIndex> {
    let mut pool = from.to_vec();
    let mut out = Vec::with_capacity(n);
    while out.len() < n && !pool.is_empty() {
        *state = splitmix(*state);
        let i = (*state % pool.len() as u64) as usize;
        out.push(pool.swap_remove(i));
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Published; its transfers end done.
    Live,
    /// An asynchronous registration that will replace it is unresolved: its transfers end
    /// done (reported before the replacement published) or failed with `PeerRemoved`.
    MaybeRetired,
    /// Removed, replaced or closed: its transfers end done (completed before) or failed
    /// with `PeerRemoved`.
    Retired,
}

/// One connection the model knows was published.
pub(super) struct Conn {
    pub(super) remote: usize,
    pub(super) state: ConnState,
}

/// The registration operation of a peer that unresolved handles still hide the effect of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pending {
    /// The last was an asynchronous add of this remote.
    Add(usize),
    /// The last was a remove.
    Removed,
}

#[derive(Default)]
pub(super) struct PeerModel {
    /// The last connection the model knows is (or was, until `pending` resolves) published.
    pub(super) published: Option<usize>,
    /// `Some` while handles of this peer are unresolved.
    pub(super) pending: Option<Pending>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RegOutcome {
    Ok,
    Superseded,
    Closed,
}

/// An unresolved registration handle: whose, and what it may still resolve to.
pub(super) struct HandleModel {
    pub(super) id: HandleId,
    pub(super) peer: usize,
    pub(super) what: String,
    pub(super) allowed: Vec<RegOutcome>,
}

/// One transfer in flight.
pub(super) struct Xfer {
    pub(super) peer: usize,
    pub(super) conn: usize,
    /// Destination (space, block) and the content it gets when done.
    pub(super) lands: Vec<(usize, BlockIndex, Content)>,
    /// Every (space, block) it reads or writes.
    pub(super) touches: Vec<(usize, BlockIndex)>,
    /// A `cancel(Wait)` returned it: it may now end failed too.
    pub(super) aborted: bool,
    pub(super) what: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gone {
    Reported,
    TakenByWait,
    Forgotten,
    Closed,
}

/// A block a notified transfer lands, and the write that put it there: while no later write
/// was planned on the block, it holds `stamp` from the moment the notification can arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Landing {
    pub(super) space: usize,
    pub(super) block: BlockIndex,
    pub(super) stamp: u64,
    /// The block's write number (see `Model::writes`) once this transfer was planned.
    pub(super) write: u64,
}

/// Where a notification stands, as far as the model knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// Its transfer is in flight: it may arrive now, later, or never (if the transfer fails).
    Open,
    /// Its transfer was reported done: it must arrive, exactly once.
    Owed,
    /// Its transfer left with no verdict (why): it may arrive once, or never.
    Undetermined(&'static str),
    /// Its transfer was reported failed (how): it must never arrive.
    Barred(String),
}

/// A notification a transfer (or a standalone `notify`) carries.
pub(super) struct Note {
    /// The remote it goes to.
    pub(super) target: usize,
    pub(super) what: String,
    /// What the destination blocks hold once it can arrive (none for a standalone one).
    pub(super) lands: Vec<Landing>,
    pub(super) fate: Fate,
    pub(super) drained: bool,
}
