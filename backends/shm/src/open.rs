//! Opening the backend: its options, the copy threads, the lease, the shared-memory region and
//! the notification listener.

use std::sync::atomic::AtomicU64;

use blockwire_core::kit::LiveCounts;
use blockwire_core::{
    BackendError, BackendErrorKind, BackendOptions, Error, OpenBackend, RegionSpan,
};

use crate::connect::{IDENTITY_MAGIC, LiveIdentity};
use crate::copier::CopyPool;
use crate::lease::Lease;
use crate::live::LiveRegion;
use crate::mapping::{NO_FD, SharedRegion};
use crate::memcopy::CopyKernel;
use crate::{
    DEFAULT_ASSIST_BYTES, DEFAULT_CHUNK_BYTES, DEFAULT_IDLE_SPIN, KIND, ShmBackend,
    address::ShmAddress, notify,
};

/// The longest `idle_spin_us` taken: a second (a copy thread spinning longer is a core taken
/// for nothing).
const MAX_IDLE_SPIN: std::time::Duration = std::time::Duration::from_secs(1);

impl OpenBackend for ShmBackend {
    const KIND: &'static str = KIND;

    /// Opens the backend over `span`, with the options in the crate docs.
    ///
    /// # Safety
    ///
    /// The memory `span` describes must stay allocated, and must not be accessed through
    /// references, until this backend has been dropped: its threads and its peers copy into
    /// and out of it.
    ///
    /// ```
    /// use blockwire_core::{Backend, OpenBackend, BackendOptions, RegionSpan};
    /// let mut mem = vec![0u8; 2 * 512];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 2, 512).unwrap();
    /// // SAFETY: `mem` outlives the backend.
    /// let b = unsafe { blockwire_shm::ShmBackend::open(span, BackendOptions::new().with("copy_threads", "1"))? };
    /// assert_eq!(b.kind(), "shm");
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    unsafe fn open(span: RegionSpan, mut options: BackendOptions) -> Result<Self, Error> {
        let open_err = Error::opening(KIND);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = options
            .take::<usize>("copy_threads")
            .map_err(open_err)?
            .unwrap_or(cores.min(4));
        let chunk_bytes = options
            .take::<usize>("chunk_bytes")
            .map_err(open_err)?
            .unwrap_or(DEFAULT_CHUNK_BYTES);
        let idle_spin = options
            .take_micros("idle_spin_us", MAX_IDLE_SPIN)
            .map_err(open_err)?
            .unwrap_or(DEFAULT_IDLE_SPIN);
        let kernel = options.take::<String>("copy_kernel").map_err(open_err)?;
        let kernel = CopyKernel::from_option(kernel.as_deref()).map_err(open_err)?;
        let map_peers = options
            .take::<bool>("map_peers")
            .map_err(open_err)?
            .unwrap_or(true);
        let assist_bytes = options
            .take::<usize>("assist_bytes")
            .map_err(open_err)?
            .unwrap_or(DEFAULT_ASSIST_BYTES);
        let inbox = options.inbox();
        let doorbell = options.doorbell();
        options.finish(KIND).map_err(open_err)?;
        if threads == 0 || chunk_bytes == 0 {
            return Err(open_err(BackendError::new(
                BackendErrorKind::InvalidOption,
                "copy_threads and chunk_bytes must be at least 1",
            )));
        }
        let (pid, start_time) = blockwire_core::kit::process::current()
            .map_err(|e| open_err(BackendError::from_io("reading /proc/self/stat", &e)))?;
        let pool = CopyPool::new(threads, kernel, chunk_bytes, idle_spin).map_err(open_err)?;
        let lease = Lease::create().map_err(open_err)?;
        let shared = SharedRegion::of(&span).map_err(open_err)?;
        let (region_fd, region_offset) = shared.as_ref().map_or((NO_FD, 0), SharedRegion::named);
        let live = LiveRegion::register(span, inbox.clone());
        let identity = Box::new(LiveIdentity {
            magic: AtomicU64::new(IDENTITY_MAGIC),
            token: live.token,
            base: span.base_addr(),
            len: span.len() as u64,
            lease_fd: lease.fd() as u64,
            region_fd,
            region_offset,
        });
        let address = ShmAddress {
            pid,
            start_time,
            token: live.token,
            identity: &*identity as *const LiveIdentity as usize as u64,
        };
        let listener = notify::Listener::start(&address, inbox).map_err(open_err)?;
        tracing::debug!(
            pid,
            token = live.token,
            threads,
            chunk_bytes,
            idle_spin = ?idle_spin,
            copy_kernel = kernel.name(),
            shared_memory = shared.is_some(),
            map_peers,
            "shm backend opened"
        );
        Ok(ShmBackend {
            assist_bytes,
            span,
            live,
            address,
            counts: LiveCounts::default(),
            identity,
            lease,
            _shared: shared,
            map_peers,
            listener,
            pool,
            doorbell,
        })
    }
}

#[cfg(test)]
mod tests {
    use blockwire_core::{BackendErrorKind, BackendOptions, OpenBackend, RegionSpan};

    use crate::ShmBackend;

    #[test]
    fn idle_spin_is_taken_up_to_a_second() {
        let mut mem = vec![0u8; 2 * 512];
        let span = RegionSpan::new(
            std::ptr::NonNull::new(mem.as_mut_ptr()).expect("mem"),
            2,
            512,
        )
        .expect("span");
        let open = |spin: &str| {
            // SAFETY: `mem` outlives every backend opened here (each is dropped at once).
            unsafe { ShmBackend::open(span, BackendOptions::new().with("idle_spin_us", spin)) }
                .map(drop)
        };
        assert!(open("1000000").is_ok());
        let refused = open("1000001").expect_err("over a second");
        assert!(
            matches!(&refused, blockwire_core::Error::Open { source, .. }
                if source.kind() == BackendErrorKind::InvalidOption
                    && source.message().contains("idle_spin_us")),
            "{}",
            refused.report()
        );
        drop(mem);
    }
}
