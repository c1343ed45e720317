//! The timing of `poll_wait`: how long it sleeps between two drains.
//!
//! With a backend that rings the doorbell whenever a transfer ends
//! ([`Capabilities::doorbell`](blockwire_core::Capabilities::doorbell)), a waiter sleeps
//! until a ring, drained again only so often for the stall watchdog, which runs inside a
//! drain. Without one (or while a transfer that ended waits for the backend to let it go), it
//! drains again after naps growing from [`FIRST_NAP`] to [`LAST_NAP`]: a caller's loop of
//! `poll` and a short sleep, without the caller writing it.

use std::time::Duration;

/// The first nap between two drains when no ring will come.
pub(super) const FIRST_NAP: Duration = Duration::from_micros(20);

/// The longest nap between two drains when no ring will come.
pub(super) const LAST_NAP: Duration = Duration::from_millis(1);

/// How long a wait with no deadline (a timeout too large to add to the clock) sleeps before
/// it checks again.
pub(super) const FOREVER_STEP: Duration = Duration::from_secs(3600);

/// How long a waiter on a ringing backend may sleep without a ring before it drains again:
/// a quarter of the stall timeout, so a stalled peer is cut at most that late; with no stall
/// timeout, no bound (`None`).
pub(super) fn recheck(stall_timeout: Option<Duration>) -> Option<Duration> {
    stall_timeout.map(|t| (t / 4).max(Duration::from_millis(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_peer_is_checked_four_times_per_timeout() {
        assert_eq!(
            recheck(Some(Duration::from_secs(4))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            recheck(Some(Duration::ZERO)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(recheck(None), None);
    }
}
