//! Close: no more registrations, every peer unpublished, every transfer stopped and released
//! within the close timeout (or handed to a reaper thread), then remote access revoked.

use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use blockwire_core::{Backend, Error, Result};
use parking_lot::Mutex;

use super::inflight;
use super::tracked::{Released, Tracked};
use super::{BlockTransport, posting};

impl<B: Backend> BlockTransport<B> {
    /// `Transport::close`: the steps below, once; a second call returns `Ok` at once.
    pub(super) fn close_now(&self) -> Result<()> {
        let s = &*self.shared;
        {
            let _exclusive = s.gate.write();
            if s.closed.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
        }
        let deadline = Instant::now() + s.close_timeout;
        // 1. No more registrations: the worker finishes the one it runs (it will not publish;
        //    a connect waiting for the peer is told to give up), resolves the queued ones as
        //    `Closed`, and exits.
        drop(self.jobs.lock().take());
        s.backend.stop_connecting();
        while let Ok(job) = self.queued.try_recv() {
            s.peers.lock().finish(&job.peer, job.generation, None);
            job.resolver.resolve(Err(Error::Closed));
        }
        if let Some(worker) = self.worker.lock().take() {
            if !join_until(worker, deadline) {
                tracing::warn!(
                    backend = s.backend.kind(),
                    "close: a peer registration is still connecting; leaving it to finish on its own"
                );
            }
        }
        // 2. Unpublish every peer; their transfers report nothing more.
        let conns = s.peers.lock().drain();
        for conn in &conns {
            conn.retire();
        }
        // 3. Stop and release every transfer, bounded.
        //    A transfer still queued is dropped unposted and released at once; one the posting
        //    thread is posting is aborted once its post returns.
        let (released, running): (Vec<Released<B>>, _) =
            s.inflight.drain_for_close(&s.backend, deadline);
        drop(released);
        self.stop_posting(deadline);
        // 4. Disconnect the peers, then revoke remote access to the region (both outside
        //    every lock), or leave both to the reaper.
        drop(conns);
        // 5. Undrained notifications are discarded; later ones are refused.
        s.inbox.close();
        if running.is_empty() {
            s.revoke();
        } else {
            tracing::warn!(
                backend = s.backend.kind(),
                running = running.len(),
                timeout_ms = s.close_timeout.as_millis() as u64,
                "close forced: transfers still running at the deadline; a reaper thread keeps \
                 them, their peers, the backend and the region until they stop, then revokes \
                 remote access: until then peers may still reach the region"
            );
            self.reap_later(running);
        }
        // A `poll_wait` in another thread returns `Closed`.
        s.doorbell.ring();
        tracing::debug!(backend = s.backend.kind(), "transport closed");
        Ok(())
    }

    /// Hands transfers that outlived close to a thread that releases each once it stops. It
    /// holds the shared state, so the backend and the region are freed only after the last
    /// one; if the thread cannot be started, everything is leaked instead of freed.
    fn reap_later(&self, running: Vec<Tracked<B>>) {
        let shared = self.shared.clone();
        let slot = std::sync::Arc::new(Mutex::new(Some(running)));
        let for_thread = slot.clone();
        let spawned = blockwire_core::kit::spawn("blockwire-reaper".into(), move || {
            let mut pending = for_thread.lock().take().unwrap_or_default();
            let mut released = Vec::new();
            while !pending.is_empty() {
                std::thread::sleep(Duration::from_millis(5));
                pending = inflight::release_stopped(&shared.backend, pending, &mut released);
            }
            drop(released);
            shared.revoke();
            tracing::info!(
                backend = shared.backend.kind(),
                "forced close: every transfer stopped and was released; remote access \
                     revoked"
            );
            drop(shared);
        });
        if spawned.is_err() {
            self.shared.region.leak();
            std::mem::forget(slot.lock().take());
        }
    }

    /// Close: stops the posting thread, waiting for it until `deadline` (it finishes the post
    /// it runs, if any, then exits; past the deadline it is left to exit on its own, holding
    /// the shared state until then).
    fn stop_posting(&self, deadline: Instant) {
        let Some(posts) = &self.posts else {
            return;
        };
        // Sent after every queued transfer was dropped: the thread skips them, then stops.
        let _ = posts.send(posting::Msg::Stop);
        let Some(poster) = self.poster.lock().take() else {
            return;
        };
        if !join_until(poster, deadline) {
            tracing::warn!(
                backend = self.shared.backend.kind(),
                "close: the posting thread is still inside a post; leaving it to finish on its own"
            );
        }
    }
}

/// Joins `thread` if it finishes by `deadline`; `false` (and the thread left to finish on its
/// own) if it does not.
fn join_until(thread: JoinHandle<()>, deadline: Instant) -> bool {
    while !thread.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    let finished = thread.is_finished();
    if finished {
        let _ = thread.join();
    }
    finished
}
