//! The copy threads: a transfer is a job; a worker copies it chunk by chunk, checking between
//! chunks whether it was asked to stop and whether the peer is still there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::thread::JoinHandle;

use blockwire_core::{BackendError, BackendErrorKind, FailureReason, Op, XferState};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::lease::Lease;
use crate::live::LiveRegion;
use crate::process::{self, Piece};
use blockwire_core::process::PeerProcess;

/// Where a peer's region is.
pub(crate) enum Target {
    /// In this process: direct copies while the region is pinned registered.
    Local(Arc<LiveRegion>),
    /// In another process: `process_vm_writev`/`readv`, each chunk counted in on the
    /// region's lease.
    Remote {
        /// The peer process.
        proc: PeerProcess,
        /// Its region's lease.
        lease: Lease,
    },
}

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const FAILED: u8 = 3;
/// Stopped before a worker picked it up: no byte moved.
const DROPPED: u8 = 4;

/// The state a transfer handle and its worker share.
pub(crate) struct Progress {
    state: AtomicU8,
    abort: AtomicBool,
    reason: Mutex<Option<FailureReason>>,
}

impl Progress {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Progress {
            state: AtomicU8::new(QUEUED),
            abort: AtomicBool::new(false),
            reason: Mutex::new(None),
        })
    }

    pub(crate) fn state(&self) -> XferState {
        match self.state.load(Ordering::Acquire) {
            QUEUED | RUNNING => XferState::Running,
            DONE => XferState::Done,
            DROPPED => XferState::Failed(FailureReason::Aborted),
            _ => XferState::Failed(
                self.reason
                    .lock()
                    .clone()
                    .unwrap_or_else(|| FailureReason::Backend("unknown failure".into())),
            ),
        }
    }

    /// Asks the worker to stop at the next chunk; a transfer no worker has started yet stops
    /// at once.
    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        let _ = self
            .state
            .compare_exchange(QUEUED, DROPPED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Whether no worker is (or will be) copying for this transfer. A queued transfer is
    /// dropped here, so it will never start.
    pub(crate) fn try_stop(&self) -> bool {
        match self
            .state
            .compare_exchange(QUEUED, DROPPED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(s) => s != RUNNING,
        }
    }
}

/// One transfer for a worker.
pub(crate) struct Job {
    pub(crate) progress: Arc<Progress>,
    pub(crate) op: Op,
    pub(crate) target: Arc<Target>,
    /// Pieces of at most `chunk` bytes, grouped into chunks of at most `chunk` bytes.
    pub(crate) chunks: Vec<Vec<Piece>>,
}

/// The worker threads.
pub(crate) struct CopyPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    shutdown: Arc<AtomicBool>,
}

impl CopyPool {
    pub(crate) fn new(threads: usize) -> Result<Self, BackendError> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let shutdown = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let rx = rx.clone();
            let shutdown = shutdown.clone();
            let handle = std::thread::Builder::new()
                .name(format!("blockwire-shm-copy-{i}"))
                .spawn(move || worker(rx, shutdown))
                .map_err(|e| BackendError::other(format!("spawning a copy thread: {e}")))?;
            handles.push(handle);
        }
        Ok(CopyPool {
            tx: Some(tx),
            threads: handles,
            shutdown,
        })
    }

    pub(crate) fn submit(&self, job: Job) -> Result<(), BackendError> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| BackendError::other("copy threads stopped"))?;
        tx.send(job)
            .map_err(|_| BackendError::other("copy threads stopped"))
    }
}

impl Drop for CopyPool {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        drop(self.tx.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn worker(rx: Receiver<Job>, shutdown: Arc<AtomicBool>) {
    for job in rx {
        let p = &job.progress;
        if p.state
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue; // dropped before it started
        }
        let outcome = run(&job, &shutdown);
        match outcome {
            Ok(()) => p.state.store(DONE, Ordering::Release),
            Err(reason) => {
                *p.reason.lock() = Some(reason);
                p.state.store(FAILED, Ordering::Release);
            }
        }
    }
}

fn run(job: &Job, shutdown: &AtomicBool) -> Result<(), FailureReason> {
    let write = job.op == Op::Write;
    for chunk in &job.chunks {
        if job.progress.abort.load(Ordering::SeqCst) || shutdown.load(Ordering::SeqCst) {
            return Err(FailureReason::Aborted);
        }
        match &*job.target {
            Target::Local(live) => {
                let Some(_pinned) = live.pin() else {
                    return Err(FailureReason::RemoteDisconnect(
                        "the peer's region was deregistered (its transport closed)".into(),
                    ));
                };
                for p in chunk {
                    let (src, dst) = if write {
                        (p.local, p.remote)
                    } else {
                        (p.remote, p.local)
                    };
                    // SAFETY: `local` lies inside this backend's region, valid until the
                    // backend is dropped (after every job has stopped); `remote` lies inside
                    // the peer's region (bounds checked at post against its registered span),
                    // which stays allocated while pinned. `ptr::copy` allows overlap (a
                    // transport may be its own peer) and creates no references.
                    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, p.len) };
                }
            }
            Target::Remote { proc, lease } => {
                let Some(_entered) = lease.enter() else {
                    return Err(FailureReason::RemoteDisconnect(format!(
                        "the peer's region in process {} was revoked (its transport closed)",
                        proc.pid()
                    )));
                };
                if proc.has_exited() {
                    return Err(FailureReason::RemoteDisconnect(format!(
                        "process {} exited",
                        proc.pid()
                    )));
                }
                // SAFETY: every local piece lies inside this backend's region (checked at
                // post), valid until the backend is dropped, after every job has stopped.
                if let Err(e) = unsafe { process::copy_pieces(proc, chunk, write) } {
                    return Err(match e.kind() {
                        BackendErrorKind::RemoteDisconnect => {
                            FailureReason::RemoteDisconnect(e.message().to_owned())
                        }
                        _ => FailureReason::Backend(e.message().to_owned()),
                    });
                }
            }
        }
    }
    Ok(())
}
