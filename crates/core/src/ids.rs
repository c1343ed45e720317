//! Identifiers: peers, transfers, blocks.

use std::fmt;
use std::sync::Arc;

/// Index of one block inside a region (block `i` starts at `base + i * block_len`).
pub type BlockIndex = u32;

/// The caller's name for a remote peer (for example a session or host id).
///
/// Cheap to clone (a shared string). Every per-peer rule (generations, scoped polling) is keyed
/// by it.
///
/// ```
/// use blockwire_core::PeerId;
/// let a = PeerId::from("prefill-3");
/// let b: PeerId = String::from("prefill-3").into();
/// assert_eq!(a, b);
/// assert_eq!(a.to_string(), "prefill-3");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(Arc<str>);

impl PeerId {
    /// The id as a string slice.
    ///
    /// ```
    /// # use blockwire_core::PeerId;
    /// assert_eq!(PeerId::from("x").as_str(), "x");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for PeerId {
    fn from(s: &str) -> Self {
        PeerId(Arc::from(s))
    }
}

impl From<String> for PeerId {
    fn from(s: String) -> Self {
        PeerId(Arc::from(s))
    }
}

impl From<&PeerId> for PeerId {
    fn from(p: &PeerId) -> Self {
        p.clone()
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Identifies one transfer; unique and increasing for the lifetime of a transport.
///
/// ```
/// use blockwire_core::TransferId;
/// assert!(TransferId(1) < TransferId(2));
/// assert_eq!(TransferId(5).to_string(), "5");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TransferId(pub u64);

impl TransferId {
    /// The raw number.
    ///
    /// ```
    /// # use blockwire_core::TransferId;
    /// assert_eq!(TransferId(9).get(), 9);
    /// ```
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
