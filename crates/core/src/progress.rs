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
/// let t = blockwire_core::ProgressThread::spawn("doc", Default::default(), move || {
///     c.fetch_add(1, Ordering::Relaxed);
///     0
/// })?;
/// t.kick();
/// std::thread::sleep(std::time::Duration::from_millis(5));
/// drop(t);
/// assert!(calls.load(Ordering::Relaxed) > 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ProgressThread {
    /// Spawns the thread (named `blockwire-<name>-progress`). `idle_sleep` bounds the sleep
    /// when idle (zero: [`DEFAULT_IDLE_SLEEP`]); `progress` returns how many events it handled.
    ///
    /// ```
    /// let t = blockwire_core::ProgressThread::spawn("x", std::time::Duration::from_millis(1), || 0)?;
    /// drop(t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn(
        name: &str,
        idle_sleep: Duration,
        mut progress: impl FnMut() -> usize + Send + 'static,
    ) -> std::io::Result<Self> {
        let idle_sleep = if idle_sleep.is_zero() {
            DEFAULT_IDLE_SLEEP
        } else {
            idle_sleep
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("blockwire-{name}-progress"))
            .spawn(move || {
                let mut idle: u32 = 0;
                while !flag.load(Ordering::Acquire) {
                    if progress() > 0 {
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
        })
    }

    /// Wakes the thread if it sleeps.
    ///
    /// ```
    /// let t = blockwire_core::ProgressThread::spawn("k", Default::default(), || 0)?;
    /// t.kick();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn kick(&self) {
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }

    /// Stops and joins the thread (also done on drop).
    ///
    /// ```
    /// let mut t = blockwire_core::ProgressThread::spawn("s", Default::default(), || 0)?;
    /// t.stop();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop();
    }
}
