//! [`HandOff`]: the queue from a transport's callers to its worker threads (shm's copy
//! threads), where a worker that finished an item spins a while for the next before it
//! sleeps, and a caller wakes a sleeping worker only when no spinning one will take its item.
//!
//! Waking a sleeping thread is a system call, and on a virtual machine whose idle CPUs halt
//! (no guest halt polling) it is an interrupt through the hypervisor: 35 to 60 µs on the
//! machine the bench runs on, in the caller's `write_blocks`. A caller that submits soon after
//! its last transfer ended (one or two transfers in flight, each submitted when the previous
//! one is polled done) finds the worker that copied it still spinning, and pays no wake.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Spin-loop hints between two looks at the queue while spinning.
const SPINS_PER_LOOK: usize = 64;

struct Shared<T> {
    items: Mutex<VecDeque<T>>,
    /// `items.len()`, written under the lock, read without it (a spinning worker's look).
    queued: AtomicUsize,
    /// Workers spinning for an item.
    spinning: AtomicUsize,
    /// Workers asleep (counted under the lock, before they wait).
    sleeping: AtomicUsize,
    closed: AtomicBool,
    wake: Condvar,
    spin: Duration,
}

/// A multi-producer, multi-consumer queue for handing work to threads that spin for `spin`
/// after each item before they sleep (see the module docs). Clones share the queue.
///
/// ```
/// use std::time::Duration;
/// use blockwire_core::kit::HandOff;
/// let queue = HandOff::new(Duration::from_micros(50));
/// let worker = {
///     let queue = queue.clone();
///     std::thread::spawn(move || {
///         let mut sum = 0;
///         while let Some(n) = queue.next() {
///             sum += n;
///         }
///         sum
///     })
/// };
/// for n in 1..=10 {
///     queue.push(n).expect("open");
/// }
/// queue.close(); // the worker takes what is queued, then `next` returns None
/// assert_eq!(worker.join().unwrap(), 55);
/// assert_eq!(queue.push(11), Err(11), "closed");
/// ```
pub struct HandOff<T>(Arc<Shared<T>>);

impl<T> Clone for HandOff<T> {
    fn clone(&self) -> Self {
        HandOff(self.0.clone())
    }
}

impl<T> HandOff<T> {
    /// An open, empty queue whose workers spin for `spin` after each item (zero: they sleep
    /// at once when there is nothing to take).
    pub fn new(spin: Duration) -> Self {
        HandOff(Arc::new(Shared {
            items: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            spinning: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            wake: Condvar::new(),
            spin,
        }))
    }

    /// Queues `item`, waking a sleeping worker unless enough workers spin to take every item
    /// queued; `Err(item)` once closed.
    pub fn push(&self, item: T) -> Result<(), T> {
        let s = &*self.0;
        {
            let mut items = s.items.lock();
            if s.closed.load(Ordering::SeqCst) {
                return Err(item);
            }
            items.push_back(item);
            s.queued.store(items.len(), Ordering::SeqCst);
        }
        // A worker counts itself asleep under the lock before it waits, and a spinning one
        // stops counting itself before it takes the lock to sleep: read after the push, the
        // counts either show it, or it will find the item (see `next`).
        let sleeping = s.sleeping.load(Ordering::SeqCst);
        if sleeping > 0 && s.queued.load(Ordering::SeqCst) > s.spinning.load(Ordering::SeqCst) {
            s.wake.notify_one();
        }
        Ok(())
    }

    /// The next item, waiting for one (spinning for the queue's `spin`, then asleep); `None`
    /// once the queue is closed and empty.
    pub fn next(&self) -> Option<T> {
        let s = &*self.0;
        loop {
            if let Some(item) = self.take() {
                return Some(item);
            }
            if !s.spin.is_zero() {
                s.spinning.fetch_add(1, Ordering::SeqCst);
                let item = self.spin_for_one();
                s.spinning.fetch_sub(1, Ordering::SeqCst);
                if item.is_some() {
                    return item;
                }
            }
            let mut items = s.items.lock();
            if let Some(item) = items.pop_front() {
                s.queued.store(items.len(), Ordering::SeqCst);
                return Some(item);
            }
            if s.closed.load(Ordering::SeqCst) {
                return None;
            }
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            s.wake.wait(&mut items);
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
            if let Some(item) = items.pop_front() {
                s.queued.store(items.len(), Ordering::SeqCst);
                return Some(item);
            }
        }
    }

    /// Closes the queue: later pushes are refused, and workers take what is queued, then
    /// get `None`.
    pub fn close(&self) {
        let s = &*self.0;
        let _items = s.items.lock();
        s.closed.store(true, Ordering::SeqCst);
        s.wake.notify_all();
    }

    /// The first queued item, taken without waiting, if there is one and `wanted` accepts
    /// it (a thread that is not one of the workers lending a hand: shm's waiting caller).
    pub fn take_if(&self, wanted: impl FnOnce(&T) -> bool) -> Option<T> {
        let s = &*self.0;
        if s.queued.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut items = s.items.lock();
        if !items.front().is_some_and(wanted) {
            return None;
        }
        let item = items.pop_front();
        s.queued.store(items.len(), Ordering::SeqCst);
        item
    }

    /// How many items are queued.
    pub fn len(&self) -> usize {
        self.0.queued.load(Ordering::SeqCst)
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An item, if one is queued (the lock is taken only when one seems to be).
    fn take(&self) -> Option<T> {
        let s = &*self.0;
        if s.queued.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut items = s.items.lock();
        let item = items.pop_front();
        s.queued.store(items.len(), Ordering::SeqCst);
        item
    }

    /// Spins until an item is taken, the queue closes, or `spin` has passed.
    fn spin_for_one(&self) -> Option<T> {
        let s = &*self.0;
        // A spin too long for the clock to add has no deadline (it ends with an item or the
        // close).
        let deadline = Instant::now().checked_add(s.spin);
        loop {
            for _ in 0..SPINS_PER_LOOK {
                std::hint::spin_loop();
            }
            if let Some(item) = self.take() {
                return Some(item);
            }
            if s.closed.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
