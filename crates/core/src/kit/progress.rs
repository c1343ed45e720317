//! [`ProgressThread`]: the thread a backend runs when its library needs someone to make
//! progress (a passive target that never polls must still receive writes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Default bound on how long an idle progress thread sleeps between two checks.
pub const DEFAULT_IDLE_SLEEP: Duration = Duration::from_micros(100);

/// Runs a progress function in a loop: again at once while it reports events, yielding a few
/// times when it reports none (so posting threads get the library's locks), then sleeping with
/// a backoff from 10 µs up to the idle bound. [`ProgressThread::kick`] wakes it (after a post);
/// dropping it stops and joins it.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// let calls = Arc::new(AtomicUsize::new(0));
/// let c = calls.clone();
/// let t = blockwire_core::kit::ProgressThread::spawn("doc", Default::default(), move || {
///     c.fetch_add(1, Ordering::Relaxed);
///     0
/// })?;
/// t.kick();
/// std::thread::sleep(std::time::Duration::from_millis(5));
/// drop(t);
/// assert!(calls.load(Ordering::Relaxed) > 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Makes a blocked [`ProgressThread::spawn_waiting`] call return (none for polling threads).
    wake: Option<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for ProgressThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressThread")
            .field("running", &self.handle.is_some())
            .field("waiting", &self.wake.is_some())
            .finish()
    }
}

impl ProgressThread {
    /// Spawns the thread (named `blockwire-<name>-progress`). `idle_sleep` bounds the sleep
    /// when idle (zero: [`DEFAULT_IDLE_SLEEP`]); `progress` returns how many events it handled.
    ///
    /// ```
    /// let t = blockwire_core::kit::ProgressThread::spawn("x", std::time::Duration::from_millis(1), || 0)?;
    /// drop(t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn(
        name: &str,
        idle_sleep: Duration,
        progress: impl FnMut() -> usize + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::spawn_with(name, idle_sleep, progress, || true)
    }

    /// Like [`ProgressThread::spawn`], for work that only comes when someone brings it (and
    /// [`ProgressThread::kick`]s the thread after): while `pending` says there is none, the
    /// thread sleeps until kicked instead of waking every `idle_sleep` to find nothing. A
    /// kick between `pending`'s answer and the sleep is not lost.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let queued = Arc::new(AtomicUsize::new(0));
    /// let (q, p) = (queued.clone(), queued.clone());
    /// let t = blockwire_core::kit::ProgressThread::spawn_on_demand(
    ///     "doc",
    ///     Default::default(),
    ///     move || q.swap(0, Ordering::AcqRel), // handles what was queued
    ///     move || p.load(Ordering::Acquire) > 0,
    /// )?;
    /// queued.fetch_add(3, Ordering::AcqRel);
    /// t.kick();
    /// while queued.load(Ordering::Acquire) > 0 {
    ///     std::thread::yield_now();
    /// }
    /// drop(t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn_on_demand(
        name: &str,
        idle_sleep: Duration,
        progress: impl FnMut() -> usize + Send + 'static,
        pending: impl Fn() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::spawn_with(name, idle_sleep, progress, pending)
    }

    fn spawn_with(
        name: &str,
        idle_sleep: Duration,
        mut progress: impl FnMut() -> usize + Send + 'static,
        pending: impl Fn() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let idle_sleep = if idle_sleep.is_zero() {
            DEFAULT_IDLE_SLEEP
        } else {
            idle_sleep
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = super::spawn(format!("blockwire-{name}-progress"), move || {
            let mut idle: u32 = 0;
            while !flag.load(Ordering::Acquire) {
                if progress() > 0 {
                    idle = 0;
                    continue;
                }
                if !pending() {
                    // Until kicked (or stopped): an unpark since `pending` answered makes
                    // this return at once.
                    std::thread::park();
                    idle = 0;
                    continue;
                }
                idle = idle.saturating_add(1);
                if idle < 8 {
                    std::thread::yield_now();
                    continue;
                }
                let shift = (idle - 8).min(10);
                std::thread::park_timeout(Duration::from_micros(10 << shift).min(idle_sleep));
            }
        })?;
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
            wake: None,
        })
    }

    /// Runs `wait` in a loop, for a library that can block until there is work (a completion
    /// queue with a wait object that wakes when data arrives): `wait` progresses, blocking for
    /// a bounded time when there is nothing to do, so a passive target is served as soon as
    /// bytes arrive without a thread spinning. `wake` makes a blocked `wait` return; stopping
    /// calls it.
    ///
    /// ```
    /// use std::sync::{Arc, Condvar, Mutex};
    /// let pair = Arc::new((Mutex::new(false), Condvar::new()));
    /// let (p, w) = (pair.clone(), pair.clone());
    /// let t = blockwire_core::kit::ProgressThread::spawn_waiting(
    ///     "doc",
    ///     move || {
    ///         let (m, c) = &*p;
    ///         let mut woken = m.lock().unwrap();
    ///         while !*woken {
    ///             woken = c.wait_timeout(woken, std::time::Duration::from_secs(1)).unwrap().0;
    ///         }
    ///         *woken = false;
    ///     },
    ///     move || {
    ///         *w.0.lock().unwrap() = true;
    ///         w.1.notify_all();
    ///     },
    /// )?;
    /// drop(t); // returns promptly: `wake` ends the blocked wait
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn_waiting(
        name: &str,
        mut wait: impl FnMut() + Send + 'static,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = super::spawn(format!("blockwire-{name}-progress"), move || {
            while !flag.load(Ordering::Acquire) {
                wait();
            }
        })?;
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
            wake: Some(Box::new(wake)),
        })
    }

    /// Wakes the thread if it sleeps: a polling one from its nap, a waiting one
    /// ([`ProgressThread::spawn_waiting`]) from its blocked `wait`, through its `wake`.
    ///
    /// ```
    /// let t = blockwire_core::kit::ProgressThread::spawn("k", Default::default(), || 0)?;
    /// t.kick();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn kick(&self) {
        if let Some(h) = &self.handle {
            if let Some(wake) = &self.wake {
                wake();
            }
            h.thread().unpark();
        }
    }

    /// Stops and joins the thread (also done on drop).
    ///
    /// ```
    /// let mut t = blockwire_core::kit::ProgressThread::spawn("s", Default::default(), || 0)?;
    /// t.stop();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stop(&mut self) {
        if let Some(h) = self.signal_stop() {
            let _ = h.join();
        }
    }

    /// Sets the stop flag and wakes the thread; its handle, if it was still running.
    fn signal_stop(&mut self) -> Option<JoinHandle<()>> {
        self.stop.store(true, Ordering::Release);
        let h = self.handle.take()?;
        if let Some(wake) = &self.wake {
            wake();
        }
        h.thread().unpark();
        Some(h)
    }

    /// Stops the thread and joins it if it ends within `bound`; otherwise leaves it running,
    /// detached, and returns `false`: for a thread that may be stuck inside a library call
    /// that never returns (whatever that call uses must then never be freed).
    ///
    /// ```
    /// let mut t = blockwire_core::kit::ProgressThread::spawn("w", Default::default(), || 0)?;
    /// assert!(t.stop_within(std::time::Duration::from_secs(5)));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stop_within(&mut self, bound: Duration) -> bool {
        let Some(h) = self.signal_stop() else {
            return true;
        };
        let start = std::time::Instant::now();
        while !h.is_finished() {
            if start.elapsed() >= bound {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = h.join();
        true
    }

    /// Asks the thread to stop and lets it go without waiting: for one stuck inside a call
    /// that may never return (it ends after that call, if it ever returns).
    ///
    /// ```
    /// let t = blockwire_core::kit::ProgressThread::spawn("d", Default::default(), || 0)?;
    /// t.detach();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn detach(mut self) {
        drop(self.signal_stop());
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_within_leaves_a_stuck_thread_and_joins_a_free_one() {
        let release = Arc::new(AtomicBool::new(false));
        let entered = Arc::new(AtomicBool::new(false));
        let (r, e) = (release.clone(), entered.clone());
        let mut stuck = ProgressThread::spawn("stuck", Duration::from_millis(1), move || {
            e.store(true, Ordering::Release);
            while !r.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            0
        })
        .expect("spawn");
        while !entered.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        assert!(!stuck.stop_within(Duration::from_millis(20)));
        release.store(true, Ordering::Release);
        let mut free =
            ProgressThread::spawn("free", Duration::from_millis(1), || 0).expect("spawn");
        assert!(free.stop_within(Duration::from_secs(5)));
    }
}
