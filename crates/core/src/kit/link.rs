//! [`CuttableLink`]: a connection that posts hold and a cut takes.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{PostedTransfers, TransferCell};
use crate::FailureReason;

/// A connection to one peer that a backend can cut: posts hold it shared for their whole
/// duration ([`CuttableLink::hold`]), a cut marks it (later holds are refused, with the
/// reason) and may then take its state exclusively to close what the library holds, and the
/// transfers posted through it are failed ([`CuttableLink::fail_posted`]), since a library
/// that loses an endpoint seldom completes what was posted on it.
///
/// `S` is what posts use and a cut closes (an endpoint, or nothing); `T` is a posted
/// transfer, which holds a [`TransferCell`].
///
/// The mark and the state are apart, so a cut that closes nothing never waits for a post (one
/// stuck in the library) to return.
///
/// ```
/// use std::sync::Arc;
/// use blockwire_core::{FailureReason, XferState, kit::{CuttableLink, TransferCell}};
/// let link: CuttableLink<&str, TransferCell> = CuttableLink::new("endpoint");
/// let transfer = Arc::new(TransferCell::running());
/// {
///     let held = link.hold().expect("not cut");
///     assert_eq!(*held, "endpoint");
///     held.track(&transfer);
/// }
/// assert!(link.mark_cut("the peer stopped answering"));
/// *link.write() = "closed";
/// link.fail_posted(FailureReason::RemoteDisconnect("cut".into()));
/// assert!(matches!(transfer.state(), XferState::Failed(FailureReason::RemoteDisconnect(_))));
/// assert_eq!(link.hold().err().as_deref(), Some("the peer stopped answering"));
/// ```
pub struct CuttableLink<S, T> {
    cut: Mutex<Option<String>>,
    state: RwLock<S>,
    posted: PostedTransfers<T>,
}

/// A post's hold on a link that was not cut: the link's state, shared.
pub struct LinkHold<'a, S, T> {
    link: &'a CuttableLink<S, T>,
    guard: RwLockReadGuard<'a, S>,
}

impl<S, T> std::ops::Deref for LinkHold<'_, S, T> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.guard
    }
}

impl<S, T> LinkHold<'_, S, T> {
    /// Records a transfer posted through the link, for a later cut.
    ///
    /// ```
    /// use blockwire_core::kit::{CuttableLink, TransferCell};
    /// let link: CuttableLink<(), TransferCell> = CuttableLink::new(());
    /// let t = std::sync::Arc::new(TransferCell::running());
    /// link.hold().expect("not cut").track(&t);
    /// ```
    pub fn track(&self, transfer: &Arc<T>) {
        self.link.posted.push(transfer);
    }
}

impl<S, T: AsRef<TransferCell>> CuttableLink<S, T> {
    /// A link that is not cut, with its state.
    ///
    /// ```
    /// let link = blockwire_core::kit::CuttableLink::<u8, blockwire_core::kit::TransferCell>::new(3);
    /// assert!(link.why_cut().is_none());
    /// ```
    pub fn new(state: S) -> Self {
        CuttableLink {
            cut: Mutex::new(None),
            state: RwLock::new(state),
            posted: PostedTransfers::default(),
        }
    }

    /// Holds the link for a post: its state, shared, or why it was cut.
    ///
    /// ```
    /// let link = blockwire_core::kit::CuttableLink::<(), blockwire_core::kit::TransferCell>::new(());
    /// assert!(link.hold().is_ok());
    /// link.mark_cut("gone");
    /// assert_eq!(link.hold().err().as_deref(), Some("gone"));
    /// ```
    pub fn hold(&self) -> Result<LinkHold<'_, S, T>, String> {
        let guard = self.state.read();
        match &*self.cut.lock() {
            Some(why) => Err(why.clone()),
            None => Ok(LinkHold { link: self, guard }),
        }
    }

    /// Why the link was cut, if it was.
    ///
    /// ```
    /// let link = blockwire_core::kit::CuttableLink::<(), blockwire_core::kit::TransferCell>::new(());
    /// link.mark_cut("stalled");
    /// assert_eq!(link.why_cut().as_deref(), Some("stalled"));
    /// ```
    pub fn why_cut(&self) -> Option<String> {
        self.cut.lock().clone()
    }

    /// Marks the link cut (later holds are refused); true for the first cut only. A hold
    /// already granted goes on: take [`CuttableLink::write`] to wait for it.
    ///
    /// ```
    /// let link = blockwire_core::kit::CuttableLink::<(), blockwire_core::kit::TransferCell>::new(());
    /// assert!(link.mark_cut("first"));
    /// assert!(!link.mark_cut("second"));
    /// assert_eq!(link.why_cut().as_deref(), Some("first"));
    /// ```
    pub fn mark_cut(&self, why: &str) -> bool {
        let mut cut = self.cut.lock();
        if cut.is_some() {
            return false;
        }
        tracing::warn!(reason = why, "link cut");
        *cut = Some(why.to_owned());
        true
    }

    /// The link's state, exclusively: waits for every post holding it.
    ///
    /// ```
    /// let link = blockwire_core::kit::CuttableLink::<u8, blockwire_core::kit::TransferCell>::new(1);
    /// *link.write() = 2;
    /// assert_eq!(*link.hold().expect("not cut"), 2);
    /// ```
    pub fn write(&self) -> RwLockWriteGuard<'_, S> {
        self.state.write()
    }

    /// Fails every transfer posted through the link that has not ended, with `why`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use blockwire_core::{FailureReason, XferState, kit::{CuttableLink, TransferCell}};
    /// let link: CuttableLink<(), TransferCell> = CuttableLink::new(());
    /// let (done, running) = (Arc::new(TransferCell::running()), Arc::new(TransferCell::running()));
    /// let held = link.hold().expect("not cut");
    /// held.track(&done);
    /// held.track(&running);
    /// drop(held);
    /// done.finish();
    /// link.fail_posted(FailureReason::Aborted);
    /// assert_eq!((done.state(), running.state()), (XferState::Done, XferState::Failed(FailureReason::Aborted)));
    /// ```
    pub fn fail_posted(&self, why: FailureReason) {
        for t in self.posted.take() {
            t.as_ref().as_ref().fail(why.clone());
        }
    }
}
