//! The timing of `poll_wait`: how long it sleeps between two drains.
//!
//! With a backend that rings the doorbell whenever a transfer ends
//! ([`Capabilities::doorbell`](blockwire_core::Capabilities::doorbell)), a waiter sleeps
//! until a ring, drained again only so often for the stall watchdog, which runs inside a
//! drain. Without one (or while a transfer that ended waits for the backend to let it go), it
//! drains again after naps growing from [`FIRST_NAP`] to [`LAST_NAP`]: a caller's loop of
//! `poll` and a short sleep, without the caller writing it.

use std::time::{Duration, Instant};

use blockwire_core::kit::Doorbell;
use blockwire_core::{PollResult, Result};

/// The first nap between two drains when no ring will come.
const FIRST_NAP: Duration = Duration::from_micros(20);

/// The longest nap between two drains when no ring will come.
const LAST_NAP: Duration = Duration::from_millis(1);

/// How long a wait with no deadline (a timeout too large to add to the clock) sleeps before
/// it checks again.
const FOREVER_STEP: Duration = Duration::from_secs(3600);

/// What a waiting transport waits on.
pub(super) struct Waiter<'a> {
    /// The transport's doorbell.
    pub(super) doorbell: &'a Doorbell,
    /// The backend rings it whenever a transfer ends (`Capabilities::doorbell`).
    pub(super) rings: bool,
    /// `TransportOptions::stall_timeout`.
    pub(super) stall_timeout: Option<Duration>,
}

/// `Transport::poll_wait` over a transport's `drain` (what `poll` drains, and whether a
/// transfer that ended could not be released yet) and `in_flight` count: drains until it
/// reports something, nothing of the peer is in flight, or `timeout` has passed, sleeping on
/// the doorbell between drains.
pub(super) fn poll_wait(
    waiter: Waiter<'_>,
    timeout: Duration,
    mut drain: impl FnMut() -> Result<(PollResult, bool)>,
    in_flight: impl Fn() -> usize,
    mut assist: impl FnMut(Duration) -> bool,
) -> Result<PollResult> {
    let deadline = Instant::now().checked_add(timeout);
    let mut nap = FIRST_NAP;
    loop {
        // Read before the drain: a transfer that ends after it rings past this.
        let seen = waiter.doorbell.rung();
        let (result, unreleased) = drain()?;
        if !result.is_empty() || result.peer_fault.is_some() {
            return Ok(result);
        }
        let now = Instant::now();
        if in_flight() == 0 || deadline.is_some_and(|d| now >= d) {
            return Ok(result);
        }
        // Before sleeping, the waiting thread lends a hand with the backend's queued work (the
        // caller's core is otherwise idle, or taken from the backend's threads by the wake).
        if assist(deadline.map_or(Duration::MAX, |d| d - now)) {
            nap = FIRST_NAP;
            continue;
        }
        let wake = if waiter.rings && !unreleased {
            // Only the stall watchdog, which runs inside a drain, needs a drain without a
            // ring.
            recheck(waiter.stall_timeout).and_then(|r| now.checked_add(r))
        } else {
            // No ring to wait for: poll again after a nap that grows while nothing ends.
            let at = now.checked_add(nap);
            nap = (nap * 2).min(LAST_NAP);
            at
        };
        let wake = match (wake, deadline) {
            (Some(w), Some(d)) => w.min(d),
            (w, d) => w.or(d).unwrap_or_else(|| now + FOREVER_STEP),
        };
        waiter.doorbell.wait_past(seen, wake);
    }
}

/// How long a waiter on a ringing backend may sleep without a ring before it drains again:
/// a quarter of the stall timeout, so a stalled peer is cut at most that late; with no stall
/// timeout, no bound (`None`).
fn recheck(stall_timeout: Option<Duration>) -> Option<Duration> {
    stall_timeout.map(|t| (t / 4).max(Duration::from_millis(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::cell::Cell;

    use blockwire_core::TransferId;

    /// `poll_wait` over a transfer that ends only when `assist` runs (no ring ever comes),
    /// with `timeout`; what it returned, how long it took, and the budgets `assist` was given.
    fn wait_on_assist(timeout: Duration, assists: bool) -> (PollResult, Duration, Vec<Duration>) {
        let doorbell = Doorbell::new();
        let waiter = Waiter {
            doorbell: &doorbell,
            rings: true,
            stall_timeout: None,
        };
        let copied = Cell::new(false);
        let budgets = std::cell::RefCell::new(Vec::new());
        let start = Instant::now();
        let result = poll_wait(
            waiter,
            timeout,
            || {
                let mut r = PollResult::default();
                if copied.get() {
                    r.done.push(TransferId(7));
                }
                Ok((r, false))
            },
            || 1,
            |budget| {
                budgets.borrow_mut().push(budget);
                copied.set(assists);
                assists
            },
        )
        .expect("poll_wait");
        (result, start.elapsed(), budgets.into_inner())
    }

    #[test]
    fn a_waiter_lends_its_thread_before_it_sleeps_and_reports_what_that_ended() {
        let (result, took, budgets) = wait_on_assist(Duration::from_secs(10), true);
        assert_eq!(result.done, vec![TransferId(7)]);
        assert!(took < Duration::from_secs(5), "slept for a ring: {took:?}");
        assert_eq!(budgets.len(), 1, "assisted again after the transfer ended");
        assert!(
            budgets[0] <= Duration::from_secs(10),
            "budget past the deadline"
        );
    }

    #[test]
    fn a_waiter_with_nothing_to_assist_sleeps_until_its_deadline() {
        let (result, took, budgets) = wait_on_assist(Duration::from_millis(30), false);
        assert!(result.is_empty());
        assert!(took >= Duration::from_millis(30));
        assert!(!budgets.is_empty());
        assert!(budgets.iter().all(|b| *b <= Duration::from_millis(30)));
    }

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
