//! The machine's price of a hand-over: how long waking a thread blocked on a channel takes,
//! timed beside the submits it bounds.
//!
//! A submit that never waits hands its transfer to another thread (the transport's posting
//! thread, or shm's copy threads) over a crossbeam channel; when that thread sleeps, the send
//! wakes it (`futex_wake`). That wake is the kernel's work in the caller's thread, and under
//! load it costs far more than on a quiet machine: the runqueue of a busy core, an interrupt
//! to an idle one (a VM exit in a virtual machine), and the network's softirq work that the
//! kernel runs on whichever thread is on the core when interrupts come back on. The probe
//! times one such send to a thread of its own, right after a submit, so a submit's tail can be
//! read against it.

use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

/// At most one probe per this interval, so the probe's own wakes stay a small part of the
/// load it measures (at most 1,000 a second).
pub(crate) const MIN_PROBE_GAP: Duration = Duration::from_millis(1);

/// A thread blocked on a channel, and the times its wakes took.
pub(crate) struct WakeProbe {
    tx: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    last: Option<Instant>,
    wakes: Vec<f64>,
}

impl WakeProbe {
    /// Starts the probe's thread, blocked on its channel until the first probe.
    pub(crate) fn start() -> std::io::Result<WakeProbe> {
        let (tx, rx) = crossbeam_channel::unbounded::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-wake-probe".into())
            .spawn(move || while rx.recv().is_ok() {})?;
        Ok(WakeProbe {
            tx: Some(tx),
            thread: Some(thread),
            last: None,
            wakes: Vec::new(),
        })
    }

    /// Times one send to the probe's thread, unless the last probe was under
    /// [`MIN_PROBE_GAP`] ago (by then the thread is blocked again: each send is a wake).
    pub(crate) fn probe(&mut self) {
        if self.last.is_some_and(|t| t.elapsed() < MIN_PROBE_GAP) {
            return;
        }
        let Some(tx) = &self.tx else { return };
        let t = Instant::now();
        let sent = tx.send(());
        let us = t.elapsed().as_secs_f64() * 1e6;
        self.last = Some(Instant::now());
        if sent.is_ok() {
            self.wakes.push(us);
        }
    }

    /// Each probe's time, µs; the thread stops as the probe drops.
    pub(crate) fn finish(mut self) -> Vec<f64> {
        std::mem::take(&mut self.wakes)
    }
}

impl Drop for WakeProbe {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_spaced_and_timed() {
        let mut probe = WakeProbe::start().expect("spawn");
        let start = Instant::now();
        let mut calls = 0;
        while start.elapsed() < Duration::from_millis(20) {
            probe.probe();
            calls += 1;
        }
        let wakes = probe.finish();
        // One per millisecond at most, over 20 ms: 1 to 21 probes, from many more calls.
        assert!((1..=21).contains(&wakes.len()), "{} probes", wakes.len());
        assert!(calls > wakes.len(), "every call probed");
        assert!(wakes.iter().all(|us| (0.0..1e6).contains(us)));
    }
}
