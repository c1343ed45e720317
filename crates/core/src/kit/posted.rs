//! The transfers a backend has posted to one peer, for a backend that ends them itself when
//! it cuts the peer ([`crate::Backend::fail_peer`]).

use std::sync::{Arc, Mutex, Weak};

/// Weak references to the transfers posted to one peer, pruned at each push: a transfer
/// released (its last `Arc` dropped) is forgotten.
///
/// ```
/// use std::sync::Arc;
/// let posted = blockwire_core::kit::PostedTransfers::default();
/// let (a, b) = (Arc::new(1), Arc::new(2));
/// posted.push(&a);
/// posted.push(&b);
/// drop(a);
/// assert_eq!(posted.take(), vec![Arc::new(2)]);
/// assert!(posted.take().is_empty());
/// ```
#[derive(Debug)]
pub struct PostedTransfers<T> {
    list: Mutex<Vec<Weak<T>>>,
}

impl<T> Default for PostedTransfers<T> {
    fn default() -> Self {
        PostedTransfers {
            list: Mutex::new(Vec::new()),
        }
    }
}

impl<T> PostedTransfers<T> {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Weak<T>>> {
        // The list holds no invariant a panic could break.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a posted transfer (and forgets those already released).
    ///
    /// ```
    /// let posted = blockwire_core::kit::PostedTransfers::default();
    /// posted.push(&std::sync::Arc::new("transfer"));
    /// assert!(posted.take().is_empty(), "released before the take");
    /// ```
    pub fn push(&self, transfer: &Arc<T>) {
        let mut list = self.list();
        list.retain(|t| t.strong_count() > 0);
        list.push(Arc::downgrade(transfer));
    }

    /// The transfers still alive, emptying the list.
    ///
    /// ```
    /// let posted = blockwire_core::kit::PostedTransfers::default();
    /// let t = std::sync::Arc::new(7);
    /// posted.push(&t);
    /// assert_eq!(posted.take(), vec![t]);
    /// ```
    pub fn take(&self) -> Vec<Arc<T>> {
        self.list().drain(..).filter_map(|t| t.upgrade()).collect()
    }
}
