//! [`Registration`]: the handle `add_remote_peer_async` returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use blockwire_core::{Error, Result};
use parking_lot::{Condvar, Mutex};

struct State {
    result: Option<Result<()>>,
    waker: Option<Waker>,
}

struct Slot {
    state: Mutex<State>,
    cv: Condvar,
}

/// The outcome of an asynchronous peer registration: a [`Future`] that works under any
/// executor (no runtime needed), and a blocking [`Registration::wait`].
///
/// Resolves to `Ok(())` once the peer is published, `Err(Superseded)` when the peer was
/// removed or added again first, `Err(Closed)` when the transport closed first, or the
/// validation or connect error.
///
/// ```
/// use blockwire::{open, Region, Transport, TransportOptions};
/// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
/// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
/// let handle = a.add_remote_peer_async(&"b".into(), &b.descriptor()?);
/// futures::executor::block_on(handle)?; // or: handle.wait()?
/// assert_eq!(a.peers(), vec!["b".into()]);
/// # Ok::<(), blockwire::Error>(())
/// ```
#[must_use = "a registration handle says whether the peer was published"]
pub struct Registration {
    slot: Arc<Slot>,
}

/// The worker's end of a [`Registration`]. Dropping it unresolved resolves the handle with
/// `Err(Closed)`, so a handle never waits forever.
pub(crate) struct Resolver {
    slot: Option<Arc<Slot>>,
}

impl Registration {
    /// A handle and the resolver that completes it.
    pub(crate) fn pending() -> (Registration, Resolver) {
        let slot = Arc::new(Slot {
            state: Mutex::new(State {
                result: None,
                waker: None,
            }),
            cv: Condvar::new(),
        });
        (
            Registration { slot: slot.clone() },
            Resolver { slot: Some(slot) },
        )
    }

    /// An already-resolved handle.
    pub(crate) fn ready(result: Result<()>) -> Registration {
        let (handle, resolver) = Registration::pending();
        resolver.resolve(result);
        handle
    }

    /// Whether the registration has finished (published or failed).
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let mut d = a.descriptor()?;
    /// d.block_len = 1; // rejected at once
    /// let h = a.add_remote_peer_async(&"x".into(), &d);
    /// assert!(h.is_finished());
    /// assert!(h.wait().is_err());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.slot.state.lock().result.is_some()
    }

    /// Blocks until the registration finishes.
    ///
    /// ```
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// a.add_remote_peer_async(&"b".into(), &b.descriptor()?).wait()?;
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn wait(self) -> Result<()> {
        let mut state = self.slot.state.lock();
        loop {
            if let Some(r) = &state.result {
                return r.clone();
            }
            self.slot.cv.wait(&mut state);
        }
    }

    /// Blocks until the registration finishes or `timeout` passes; gives the handle back on
    /// timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use blockwire::{open, Region, Transport, TransportOptions};
    /// let a = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let b = open("shm", Region::new(2, 64)?, TransportOptions::default())?;
    /// let h = a.add_remote_peer_async(&"b".into(), &b.descriptor()?);
    /// let outcome = h.wait_timeout(Duration::from_secs(10)).ok().expect("finished in time");
    /// assert!(outcome.is_ok());
    /// # Ok::<(), blockwire::Error>(())
    /// ```
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Result<()>, Registration> {
        let deadline = Instant::now() + timeout;
        {
            let mut state = self.slot.state.lock();
            loop {
                if let Some(r) = &state.result {
                    return Ok(r.clone());
                }
                if self.slot.cv.wait_until(&mut state, deadline).timed_out() {
                    if let Some(r) = &state.result {
                        return Ok(r.clone());
                    }
                    break;
                }
            }
        }
        Err(self)
    }
}

impl Future for Registration {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut state = self.slot.state.lock();
        match &state.result {
            Some(r) => Poll::Ready(r.clone()),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("result", &self.slot.state.lock().result)
            .finish()
    }
}

impl Resolver {
    pub(crate) fn resolve(mut self, result: Result<()>) {
        if let Some(slot) = self.slot.take() {
            complete(&slot, result);
        }
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            complete(&slot, Err(Error::Closed));
        }
    }
}

fn complete(slot: &Slot, result: Result<()>) {
    let waker = {
        let mut state = slot.state.lock();
        if state.result.is_none() {
            state.result = Some(result);
        }
        state.waker.take()
    };
    slot.cv.notify_all();
    if let Some(w) = waker {
        w.wake();
    }
}
