//! [`Doorbell`]: rung whenever a transfer of a backend ends, so that a caller waiting for
//! completions (`Transport::poll_wait`) sleeps until there is something to report instead of
//! polling in a loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

struct Bell {
    /// How many times it was rung.
    rung: AtomicU64,
    /// Threads inside [`Doorbell::wait_past`]: a ring takes the lock and wakes them only
    /// when there is one, so ringing costs two atomic operations while nobody waits.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

/// A transport-wide signal that some transfer may have ended: the code that ends a transfer
/// (a copy thread, a library callback, a completion queue reader) rings it, and a waiter that
/// read [`Doorbell::rung`] before it last looked for completions sleeps in
/// [`Doorbell::wait_past`] until the bell is rung again (or a deadline passes). No ring is
/// lost between the look and the sleep, and ringing is two atomic operations while nobody
/// waits.
///
/// A [`crate::kit::TransferCell`] made [`with_doorbell`](crate::kit::TransferCell::with_doorbell)
/// rings it when it ends; a backend whose every transfer ends through such cells (or that rings
/// wherever else one ends) says [`crate::Capabilities::doorbell`].
///
/// ```
/// use std::time::{Duration, Instant};
/// use blockwire_core::kit::Doorbell;
/// let bell = Doorbell::new();
/// let seen = bell.rung();
/// let ringer = bell.clone();
/// let t = std::thread::spawn(move || ringer.ring());
/// // Returns once the other thread rang (or after the deadline, if it never did).
/// bell.wait_past(seen, Instant::now() + Duration::from_secs(10));
/// t.join().unwrap();
/// assert!(bell.rung() > seen);
/// ```
#[derive(Clone)]
pub struct Doorbell(Arc<Bell>);

impl Doorbell {
    /// A bell nobody has rung.
    ///
    /// ```
    /// assert_eq!(blockwire_core::kit::Doorbell::new().rung(), 0);
    /// ```
    pub fn new() -> Self {
        Doorbell(Arc::new(Bell {
            rung: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }))
    }

    /// Rings: wakes every thread in [`Doorbell::wait_past`].
    ///
    /// ```
    /// let bell = blockwire_core::kit::Doorbell::new();
    /// bell.ring();
    /// assert_eq!(bell.rung(), 1);
    /// ```
    pub fn ring(&self) {
        let bell = &*self.0;
        // SeqCst on both sides (here and in `wait_past`): either this load sees the waiter, or
        // the waiter's later load of `rung` sees this ring.
        bell.rung.fetch_add(1, Ordering::SeqCst);
        if bell.waiters.load(Ordering::SeqCst) > 0 {
            // Under the lock: a waiter between its check of `rung` and its sleep holds it.
            let _held = bell.lock.lock();
            bell.wake.notify_all();
        }
    }

    /// How many times it was rung so far: read it before looking for completions, and hand
    /// it to [`Doorbell::wait_past`].
    ///
    /// ```
    /// let bell = blockwire_core::kit::Doorbell::new();
    /// let before = bell.rung();
    /// bell.ring();
    /// assert_eq!(bell.rung(), before + 1);
    /// ```
    pub fn rung(&self) -> u64 {
        self.0.rung.load(Ordering::SeqCst)
    }

    /// Sleeps until the bell has been rung more than `seen` times, or until `deadline`.
    /// Returns whether it was rung (at once if it already was).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let bell = blockwire_core::kit::Doorbell::new();
    /// assert!(!bell.wait_past(bell.rung(), Instant::now() + Duration::from_millis(1)));
    /// bell.ring();
    /// assert!(bell.wait_past(0, Instant::now() + Duration::from_secs(10))); // at once
    /// ```
    pub fn wait_past(&self, seen: u64, deadline: Instant) -> bool {
        let bell = &*self.0;
        bell.waiters.fetch_add(1, Ordering::SeqCst);
        let mut held = bell.lock.lock();
        let mut rung = bell.rung.load(Ordering::SeqCst) != seen;
        while !rung && !bell.wake.wait_until(&mut held, deadline).timed_out() {
            rung = bell.rung.load(Ordering::SeqCst) != seen;
        }
        drop(held);
        bell.waiters.fetch_sub(1, Ordering::SeqCst);
        rung || bell.rung.load(Ordering::SeqCst) != seen
    }
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell")
            .field("rung", &self.rung())
            .field("waiters", &self.0.waiters.load(Ordering::Relaxed))
            .finish()
    }
}

impl PartialEq for Doorbell {
    /// The same bell (shared), not the same count.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Doorbell {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn no_ring_is_lost_between_the_look_and_the_sleep() {
        // Many rounds of: the waiter reads the count, the ringer rings at any moment, the
        // waiter sleeps with a deadline far away. A lost ring would hang a round for 10 s.
        let bell = Doorbell::new();
        for _ in 0..2_000 {
            let seen = bell.rung();
            let ringer = bell.clone();
            let t = std::thread::spawn(move || ringer.ring());
            let started = Instant::now();
            assert!(bell.wait_past(seen, started + Duration::from_secs(10)));
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "a ring was lost"
            );
            t.join().expect("ringer");
        }
    }

    #[test]
    fn a_deadline_ends_the_wait_unrung() {
        let bell = Doorbell::new();
        let started = Instant::now();
        assert!(!bell.wait_past(bell.rung(), started + Duration::from_millis(20)));
        assert!(started.elapsed() >= Duration::from_millis(20));
    }
}
