//! The copy threads: a transfer is a job; a worker cuts its runs into chunks ([`Chunks`]) and
//! copies them one by one, checking between chunks whether it was asked to stop and whether
//! the peer is still there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use blockwire_core::kit::{Doorbell, HandOff, TransferCell};
use blockwire_core::{BackendError, BackendErrorKind, FailureReason, Op};
use parking_lot::RwLockReadGuard;

use crate::chunks::Chunks;
use crate::lease::PeerLease;
use crate::live::LiveRegion;
use crate::mapping::PeerMapping;
use crate::memcopy::CopyKernel;
use crate::notify::{self, Outlet};
use crate::process::{self, Piece};
use blockwire_core::kit::ProcessWatch;

/// Where a peer's region is.
pub(crate) enum Target {
    /// In this process: direct copies while the region is pinned registered.
    Local(Arc<LiveRegion>),
    /// In another process: copies into its region mapped here when it lives in shared
    /// memory, else `process_vm_writev`/`readv`; each chunk counted in on the region's lease.
    Remote {
        /// The peer process.
        proc: ProcessWatch,
        /// Its region's lease.
        lease: PeerLease,
        /// Its notification socket.
        outlet: Outlet,
        /// Its region mapped into this process, when it lives in shared memory (and the
        /// backend maps peers).
        mapping: Option<PeerMapping>,
    },
}

/// A transfer a handle and its worker share: its outcome, and whether it was asked to stop.
pub(crate) struct CopyTransfer {
    pub(crate) cell: TransferCell,
    abort: AtomicBool,
}

impl CopyTransfer {
    /// A transfer ringing `doorbell` when it ends.
    pub(crate) fn new(doorbell: Doorbell) -> Arc<Self> {
        Arc::new(CopyTransfer {
            cell: TransferCell::queued().with_doorbell(doorbell),
            abort: AtomicBool::new(false),
        })
    }

    /// Asks the worker to stop at the next chunk; a transfer no worker has started yet stops
    /// at once.
    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        self.cell.stop_if_queued(FailureReason::Aborted);
    }

    /// Whether no worker is (or will be) copying for this transfer. A queued transfer is
    /// stopped here, so it will never start.
    pub(crate) fn try_stop(&self) -> bool {
        self.cell.stop_if_queued(FailureReason::Aborted) || self.cell.is_ended()
    }
}

/// One transfer for a worker.
pub(crate) struct Job {
    pub(crate) transfer: Arc<CopyTransfer>,
    pub(crate) op: Op,
    pub(crate) target: Arc<Target>,
    pub(crate) work: Work,
    /// `work.bytes()`, counted once at submit (not under the queue's lock).
    pub(crate) bytes: usize,
}

impl Work {
    /// The bytes it copies (a notification's frame for a notification).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Work::Copy(runs) => runs.iter().map(|p| p.len).sum(),
            Work::Notify(frame) => frame.len(),
        }
    }
}

/// What a job does.
pub(crate) enum Work {
    /// Copies these runs (blocks adjacent on both sides, one piece each), in order.
    Copy(Vec<Piece>),
    /// Delivers a notification frame.
    Notify(Arc<[u8]>),
}

/// The worker threads.
pub(crate) struct CopyPool {
    jobs: HandOff<Job>,
    threads: Vec<JoinHandle<()>>,
    shutdown: Arc<AtomicBool>,
    kernel: CopyKernel,
    chunk_bytes: usize,
}

impl CopyPool {
    /// `threads` workers, copying at most `chunk_bytes` between two checks, each spinning
    /// for `idle_spin` after a job before it sleeps (so that a submit soon after needs no
    /// wake: [`HandOff`]).
    pub(crate) fn new(
        threads: usize,
        kernel: CopyKernel,
        chunk_bytes: usize,
        idle_spin: std::time::Duration,
    ) -> Result<Self, BackendError> {
        let jobs = HandOff::new(idle_spin);
        let shutdown = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let (mine, stop) = (jobs.clone(), shutdown.clone());
            let handle = blockwire_core::kit::spawn(format!("blockwire-shm-copy-{i}"), move || {
                worker(&mine, stop, kernel, chunk_bytes)
            });
            match handle {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    // The threads started so far stop (the queue closes) and are joined.
                    drop(CopyPool {
                        jobs,
                        threads: handles,
                        shutdown,
                        kernel,
                        chunk_bytes,
                    });
                    return Err(BackendError::other(format!("spawning a copy thread: {e}")));
                }
            }
        }
        Ok(CopyPool {
            jobs,
            threads: handles,
            shutdown,
            kernel,
            chunk_bytes,
        })
    }

    /// Runs the first queued job in the calling thread, if it copies at most `max_bytes`
    /// (a waiting caller lending a hand); whether it ran one.
    pub(crate) fn assist(&self, max_bytes: usize) -> bool {
        let Some(job) = self.jobs.take_if(|job| job.bytes <= max_bytes) else {
            return false;
        };
        let how = Copying {
            shutdown: &self.shutdown,
            kernel: self.kernel,
            chunk_bytes: self.chunk_bytes,
        };
        run_job(&job, &how, &mut Vec::new());
        true
    }

    pub(crate) fn submit(&self, job: Job) -> Result<(), BackendError> {
        self.jobs
            .push(job)
            .map_err(|_| BackendError::other("copy threads stopped"))
    }
}

impl Drop for CopyPool {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.jobs.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn worker(jobs: &HandOff<Job>, shutdown: Arc<AtomicBool>, kernel: CopyKernel, chunk_bytes: usize) {
    let how = Copying {
        shutdown: &shutdown,
        kernel,
        chunk_bytes,
    };
    // The chunk being copied, reused by every job of this thread.
    let mut chunk = Vec::new();
    while let Some(job) = jobs.next() {
        run_job(&job, &how, &mut chunk);
    }
}

/// Starts, runs and ends one job (nothing when it was stopped before it started).
fn run_job(job: &Job, how: &Copying<'_>, chunk: &mut Vec<Piece>) {
    let cell = &job.transfer.cell;
    if !cell.start() {
        return;
    }
    match run(job, how, chunk) {
        Ok(()) => cell.finish(),
        Err(reason) => cell.fail(reason),
    }
}

/// How a worker copies.
struct Copying<'a> {
    shutdown: &'a AtomicBool,
    kernel: CopyKernel,
    chunk_bytes: usize,
}

fn run(job: &Job, how: &Copying<'_>, chunk: &mut Vec<Piece>) -> Result<(), FailureReason> {
    match &job.work {
        Work::Copy(runs) => copy(job, runs, how, chunk),
        Work::Notify(frame) => notify(job, frame, how.shutdown),
    }
}

/// Holds a same-process peer's region registered (for one chunk or one notification), or the
/// failure a deregistered one means.
fn pinned(live: &LiveRegion) -> Result<RwLockReadGuard<'_, bool>, FailureReason> {
    live.pin().ok_or_else(|| {
        FailureReason::RemoteDisconnect(
            "the peer's region was deregistered (its transport closed)".into(),
        )
    })
}

fn notify(job: &Job, frame: &[u8], shutdown: &AtomicBool) -> Result<(), FailureReason> {
    if job.transfer.abort.load(Ordering::SeqCst) || shutdown.load(Ordering::SeqCst) {
        return Err(FailureReason::Aborted);
    }
    match &*job.target {
        Target::Local(live) => {
            let _pinned = pinned(live)?;
            notify::delivered(live.inbox.deliver_frame(frame))
        }
        Target::Remote { proc, outlet, .. } => outlet.send(proc, frame),
    }
}

fn copy(
    job: &Job,
    runs: &[Piece],
    how: &Copying<'_>,
    chunk: &mut Vec<Piece>,
) -> Result<(), FailureReason> {
    let write = job.op == Op::Write;
    let (shutdown, kernel) = (how.shutdown, how.kernel);
    let mut chunks = Chunks::new(runs, how.chunk_bytes);
    while chunks.next_into(chunk) {
        let chunk: &[Piece] = chunk;
        if job.transfer.abort.load(Ordering::SeqCst) || shutdown.load(Ordering::SeqCst) {
            return Err(FailureReason::Aborted);
        }
        match &*job.target {
            Target::Local(live) => {
                let pinned = pinned(live)?;
                let mut copying = kernel.chunk();
                for p in chunk {
                    let (src, dst) = if write {
                        (p.local, p.remote)
                    } else {
                        (p.remote, p.local)
                    };
                    // SAFETY: `local` lies inside this backend's region, valid until the
                    // backend is dropped (after every job has stopped); `remote` lies inside
                    // the peer's region (bounds checked at post against its registered span),
                    // which stays allocated while pinned. The kernel allows overlap (a
                    // transport may be its own peer) and creates no references.
                    unsafe { copying.copy(src as *const u8, dst as *mut u8, p.len) };
                }
                // Fences the chunk's streaming stores before the pin is released: a close
                // waiting on the pin then finds every byte landed (see `memcopy`).
                drop(copying);
                drop(pinned);
            }
            Target::Remote {
                proc,
                lease,
                mapping,
                ..
            } => {
                let Some(entered) = lease.enter() else {
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
                match mapping {
                    Some(mapping) => {
                        let mut copying = kernel.chunk();
                        for p in chunk {
                            let mapped = mapping.at(p.remote);
                            let (src, dst) = if write {
                                (p.local as *const u8, mapped)
                            } else {
                                (mapped as *const u8, p.local as *mut u8)
                            };
                            // SAFETY: `local` lies inside this backend's region, valid until
                            // the backend is dropped (after every job has stopped); `mapped`
                            // inside the peer's region mapped here (bounds checked at post),
                            // which the target holds mapped, with a size sealed so no access
                            // faults. The two are distinct mappings; no reference is made.
                            unsafe { copying.copy(src, dst, p.len) };
                        }
                        // Fences the chunk's streaming stores before counting out of the
                        // lease: a close waiting on it then finds every byte landed.
                        drop(copying);
                    }
                    None => {
                        // SAFETY: every local piece lies inside this backend's region
                        // (checked at post), valid until the backend is dropped, after every
                        // job has stopped.
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
                drop(entered);
            }
        }
    }
    Ok(())
}
