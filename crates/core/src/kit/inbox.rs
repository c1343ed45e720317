//! [`Inbox`]: the notifications that reached a transport and wait to be drained, by sender.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{Notification, decode_frame};

/// What the inbox did with a notification handed to it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for its sender's drain.
    Queued,
    /// The inbox holds its capacity: the notification was dropped, and counted.
    Full,
    /// The transport is closed: the notification was discarded, and counted.
    Closed,
    /// The frame was malformed: dropped, and counted.
    Malformed,
}

/// The inbox's counters (since the transport opened).
///
/// ```
/// let s = blockwire_core::kit::InboxStats::default();
/// assert_eq!((s.received, s.drained, s.queued), (0, 0, 0));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InboxStats {
    /// Notifications queued.
    pub received: u64,
    /// Notifications drained by the caller.
    pub drained: u64,
    /// Notifications waiting to be drained now.
    pub queued: usize,
    /// Dropped on arrival because the inbox held its capacity.
    pub dropped_full: u64,
    /// Discarded by close (queued ones) or arriving after it.
    pub discarded_closed: u64,
    /// Frames that could not be decoded.
    pub malformed: u64,
}

struct State {
    /// Per sender, in arrival order, each with its arrival number (to merge an unscoped
    /// drain back into arrival order).
    by_sender: HashMap<String, VecDeque<(u64, Vec<u8>)>>,
    next: u64,
    closed: bool,
    stats: InboxStats,
}

/// The notifications that reached a transport and wait to be drained, by sender.
///
/// A backend's receive path (a progress thread, an active-message handler, the same-process
/// sender itself) hands each one over with [`Inbox::deliver`] or [`Inbox::deliver_frame`];
/// the transport drains them with [`Inbox::drain`], per sender the way `poll` drains per peer.
/// Each queued notification is drained exactly once.
///
/// It is bounded: when it holds `capacity` notifications nobody drained, one more is dropped on
/// arrival (the oldest stay), counted in [`InboxStats::dropped_full`] and logged at `warn`;
/// nothing is dropped silently. [`Inbox::close`] discards what is queued (counted too) and
/// refuses what arrives later.
///
/// ```
/// use blockwire_core::kit::{Delivery, Inbox};
/// let inbox = Inbox::new(2);
/// assert_eq!(inbox.deliver("a", b"1".to_vec()), Delivery::Queued);
/// assert_eq!(inbox.deliver("b", b"2".to_vec()), Delivery::Queued);
/// assert_eq!(inbox.deliver("a", b"3".to_vec()), Delivery::Full);
/// let from_b = inbox.drain(Some("b"));
/// assert_eq!(from_b.len(), 1);
/// assert_eq!(inbox.drain(None)[0].message, b"1"); // a's stayed for its own drain
/// assert_eq!(inbox.stats().dropped_full, 1);
/// ```
#[derive(Clone)]
pub struct Inbox {
    state: Arc<Mutex<State>>,
    capacity: usize,
}

impl Inbox {
    /// The default capacity: notifications waiting to be drained, all senders together.
    pub const DEFAULT_CAPACITY: usize = 16_384;

    /// An empty inbox holding at most `capacity` notifications (at least one).
    ///
    /// ```
    /// assert_eq!(blockwire_core::kit::Inbox::new(0).capacity(), 1);
    /// ```
    pub fn new(capacity: usize) -> Self {
        Inbox {
            state: Arc::new(Mutex::new(State {
                by_sender: HashMap::new(),
                next: 0,
                closed: false,
                stats: InboxStats::default(),
            })),
            capacity: capacity.max(1),
        }
    }

    /// How many notifications it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queues a notification from `sender`.
    ///
    /// ```
    /// use blockwire_core::kit::{Delivery, Inbox};
    /// let inbox = Inbox::new(8);
    /// inbox.close();
    /// assert_eq!(inbox.deliver("a", vec![]), Delivery::Closed);
    /// ```
    pub fn deliver(&self, sender: &str, message: Vec<u8>) -> Delivery {
        let mut s = self.state.lock();
        if s.closed {
            s.stats.discarded_closed += 1;
            return Delivery::Closed;
        }
        if s.stats.queued >= self.capacity {
            s.stats.dropped_full += 1;
            let dropped = s.stats.dropped_full;
            drop(s);
            // The first drop of a run, then every thousandth: loud, but not a flood.
            if dropped == 1 || dropped % 1000 == 0 {
                tracing::warn!(
                    sender,
                    capacity = self.capacity,
                    dropped,
                    "notification inbox full (nobody drains it): notification dropped"
                );
            }
            return Delivery::Full;
        }
        let seq = s.next;
        s.next += 1;
        s.stats.received += 1;
        s.stats.queued += 1;
        s.by_sender
            .entry(sender.to_owned())
            .or_default()
            .push_back((seq, message));
        drop(s);
        tracing::trace!(sender, "notification queued");
        Delivery::Queued
    }

    /// Decodes a frame a peer sent ([`crate::encode_frame`]) and queues it.
    ///
    /// ```
    /// use blockwire_core::{encode_frame, kit::{Delivery, Inbox}};
    /// let inbox = Inbox::new(8);
    /// assert_eq!(inbox.deliver_frame(&encode_frame("a", b"hi")), Delivery::Queued);
    /// assert_eq!(inbox.deliver_frame(b"garbage"), Delivery::Malformed);
    /// assert_eq!(inbox.stats().malformed, 1);
    /// ```
    pub fn deliver_frame(&self, frame: &[u8]) -> Delivery {
        match decode_frame(frame) {
            Ok(n) => self.deliver(&n.sender, n.message),
            Err(problem) => {
                self.state.lock().stats.malformed += 1;
                tracing::warn!(%problem, len = frame.len(), "malformed notification dropped");
                Delivery::Malformed
            }
        }
    }

    /// Takes the queued notifications of `from` (a sender's name), or of every sender, in
    /// arrival order.
    ///
    /// ```
    /// let inbox = blockwire_core::kit::Inbox::new(8);
    /// inbox.deliver("a", b"1".to_vec());
    /// assert!(inbox.drain(Some("b")).is_empty());
    /// assert_eq!(inbox.drain(Some("a")).len(), 1);
    /// assert!(inbox.drain(None).is_empty()); // each once
    /// ```
    pub fn drain(&self, from: Option<&str>) -> Vec<Notification> {
        let mut s = self.state.lock();
        let mut taken: Vec<(u64, Notification)> = Vec::new();
        match from {
            Some(sender) => {
                if let Some(queue) = s.by_sender.remove(sender) {
                    taken.extend(
                        queue
                            .into_iter()
                            .map(|(seq, m)| (seq, Notification::new(sender, m))),
                    );
                }
            }
            None => {
                for (sender, queue) in s.by_sender.drain() {
                    taken.extend(
                        queue
                            .into_iter()
                            .map(|(seq, m)| (seq, Notification::new(sender.clone(), m))),
                    );
                }
                taken.sort_unstable_by_key(|(seq, _)| *seq);
            }
        }
        s.stats.queued -= taken.len();
        s.stats.drained += taken.len() as u64;
        taken.into_iter().map(|(_, n)| n).collect()
    }

    /// Discards what is queued and refuses what arrives later (both counted).
    ///
    /// ```
    /// let inbox = blockwire_core::kit::Inbox::new(8);
    /// inbox.deliver("a", vec![]);
    /// inbox.close();
    /// assert!(inbox.drain(None).is_empty());
    /// assert_eq!(inbox.stats().discarded_closed, 1);
    /// ```
    pub fn close(&self) {
        let mut s = self.state.lock();
        s.closed = true;
        let queued = s.stats.queued;
        s.by_sender.clear();
        s.stats.queued = 0;
        s.stats.discarded_closed += queued as u64;
        if queued > 0 {
            tracing::debug!(
                discarded = queued,
                "close discarded undrained notifications"
            );
        }
    }

    /// Whether [`Inbox::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// The counters.
    pub fn stats(&self) -> InboxStats {
        self.state.lock().stats
    }
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox::new(Self::DEFAULT_CAPACITY)
    }
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

impl PartialEq for Inbox {
    /// The same inbox (shared), not equal contents.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl Eq for Inbox {}
