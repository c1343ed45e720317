//! [`Clock`]: where the stall watchdog reads the time, so a test can move it by hand.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of the current instant for the transport's stall watchdog
/// ([`TransportOptions::stall_timeout`](crate::TransportOptions::stall_timeout)).
///
/// The watchdog reads it when a peer's first transfer is posted, when one of its transfers
/// completes, and when it checks for a stall. Nothing else in the transport reads it: the
/// close timeout and every backend's own timers keep real time. The default is
/// [`SystemClock`]; [`ManualClock`] lets a test advance time instead of sleeping.
///
/// ```
/// use blockwire::Clock;
/// use std::time::{Duration, Instant};
///
/// /// A clock one hour ahead of the system's.
/// #[derive(Debug)]
/// struct Ahead;
/// impl Clock for Ahead {
///     fn now(&self) -> Instant {
///         Instant::now() + Duration::from_secs(3600)
///     }
/// }
/// assert!(Ahead.now() > Instant::now());
/// let opts = blockwire::TransportOptions::default().with_clock(Ahead);
/// assert!(format!("{opts:?}").contains("Ahead"));
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant. Must never go backwards.
    ///
    /// ```
    /// use blockwire::{Clock, SystemClock};
    /// let (a, b) = (SystemClock.now(), SystemClock.now());
    /// assert!(b >= a);
    /// ```
    fn now(&self) -> Instant;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

/// The real time ([`Instant::now`]): the default clock of every transport.
///
/// ```
/// use blockwire::{Clock, SystemClock};
/// use std::time::Instant;
/// let before = Instant::now();
/// assert!(SystemClock.now() >= before);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it. Clones share one time:
/// give a clone to the transport ([`TransportOptions::with_clock`](crate::TransportOptions::with_clock))
/// and advance the other.
///
/// ```
/// use blockwire::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// let start = clock.now();
/// assert_eq!(clock.now(), start); // no real time passes on it
/// handle.advance(Duration::from_secs(5));
/// assert_eq!(clock.now() - start, Duration::from_secs(5));
/// assert_eq!(clock.elapsed(), Duration::from_secs(5));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    start: Instant,
    /// Nanoseconds advanced since `start`, shared by every clone.
    advanced: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads the real time of its creation until it is advanced.
    ///
    /// ```
    /// use blockwire::{Clock, ManualClock};
    /// let clock = ManualClock::new();
    /// assert!(clock.elapsed().is_zero());
    /// assert!(clock.now() <= std::time::Instant::now());
    /// ```
    pub fn new() -> Self {
        ManualClock {
            start: Instant::now(),
            advanced: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the time forward by `by`, for this clock and every clone of it. It saturates
    /// where [`Instant`] (or 2^64 nanoseconds, about 584 years) ends.
    ///
    /// ```
    /// use blockwire::ManualClock;
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(1500));
    /// clock.clone().advance(Duration::from_millis(500));
    /// assert_eq!(clock.elapsed(), Duration::from_secs(2));
    /// clock.advance(Duration::MAX); // saturates, never wraps
    /// assert!(clock.elapsed() >= Duration::from_secs(2));
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // `fetch_update` with a closure that always returns `Some` cannot fail.
        let _ = self
            .advanced
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |old| {
                let mut new = old.saturating_add(by);
                while new > old && self.start.checked_add(Duration::from_nanos(new)).is_none() {
                    new = old + (new - old) / 2;
                }
                Some(new)
            });
    }

    /// How far the clock was advanced since it was created.
    ///
    /// ```
    /// use blockwire::ManualClock;
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_secs(3));
    /// assert_eq!(clock.elapsed(), Duration::from_secs(3));
    /// ```
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.advanced.load(Ordering::SeqCst))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("elapsed", &self.elapsed())
            .finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        // `advance` keeps `start + elapsed` representable.
        self.start.checked_add(self.elapsed()).unwrap_or(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_time() {
        let a = ManualClock::new();
        let b = a.clone();
        let t0 = a.now();
        b.advance(Duration::from_millis(7));
        assert_eq!(a.now() - t0, Duration::from_millis(7));
        assert_eq!(b.now(), a.now());
    }

    #[test]
    fn a_huge_advance_saturates_and_never_goes_back() {
        let c = ManualClock::new();
        c.advance(Duration::from_secs(1));
        let before = c.now();
        c.advance(Duration::MAX);
        let after = c.now();
        assert!(after >= before);
        c.advance(Duration::MAX);
        assert!(c.now() >= after);
    }

    #[test]
    fn an_arc_of_a_clock_is_a_clock() {
        let c = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(c.clone());
        c.advance(Duration::from_secs(2));
        assert_eq!(shared.now(), c.now());
    }
}
