//! [`LiveCounts`]: a backend's live peers and transfers, for `Backend::stats`.

use crate::BackendStats;

/// Counts a backend's live peers and transfers, for [`Backend::stats`](crate::Backend::stats): each connected peer and
/// each posted transfer holds a [`Live`] guard, and dropping the guard uncounts it. Cheap to
/// clone; clones share the counts.
///
/// ```
/// use blockwire_core::kit::LiveCounts;
/// let counts = LiveCounts::default();
/// let peer = counts.peer();
/// let xfer = counts.transfer();
/// assert_eq!((counts.stats().connected_peers, counts.stats().live_transfers), (1, 1));
/// drop((peer, xfer));
/// assert_eq!(counts.stats(), blockwire_core::BackendStats::default());
/// ```
#[derive(Clone, Debug, Default)]
pub struct LiveCounts {
    peers: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    transfers: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// One counted resource; uncounted when dropped.
///
/// ```
/// let counts = blockwire_core::kit::LiveCounts::default();
/// let live: blockwire_core::kit::Live = counts.peer();
/// drop(live);
/// assert_eq!(counts.stats().connected_peers, 0);
/// ```
#[derive(Debug)]
pub struct Live(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl LiveCounts {
    fn count(n: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Live {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Live(n.clone())
    }

    /// Counts one connected peer while the guard lives.
    ///
    /// ```
    /// let c = blockwire_core::kit::LiveCounts::default();
    /// let _p = c.peer();
    /// assert_eq!(c.stats().connected_peers, 1);
    /// ```
    pub fn peer(&self) -> Live {
        Self::count(&self.peers)
    }

    /// Counts one posted, unreleased transfer while the guard lives.
    ///
    /// ```
    /// let c = blockwire_core::kit::LiveCounts::default();
    /// let _x = c.transfer();
    /// assert_eq!(c.stats().live_transfers, 1);
    /// ```
    pub fn transfer(&self) -> Live {
        Self::count(&self.transfers)
    }

    /// The counts now.
    ///
    /// ```
    /// assert_eq!(blockwire_core::kit::LiveCounts::default().stats().live_transfers, 0);
    /// ```
    pub fn stats(&self) -> BackendStats {
        BackendStats::new(
            self.peers.load(std::sync::atomic::Ordering::SeqCst),
            self.transfers.load(std::sync::atomic::Ordering::SeqCst),
        )
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
