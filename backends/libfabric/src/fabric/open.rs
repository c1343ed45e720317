//! Opening a [`Fabric`], in named steps: the provider's info, the domain, the endpoint with
//! its queue and address vector, the region's registration, and the threads.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::Arc;

use blockwire_core::kit::{self, ProgressThread};
use blockwire_core::{BackendError, BackendErrorKind, RegionSpan};
use libfabric_sys::*;
use parking_lot::Mutex;

use super::{Fabric, RawFabric, Settings};
use crate::completion::Outstanding;
use crate::cq::{PeerQueues, Raw, poll_main};
use crate::errors::{check, error};
use crate::local;
use crate::notify::Carrier;
use crate::op::MAX_PARTS;
use crate::recv::RecvPool;
use crate::retry::{MainPost, Retries};

impl Fabric {
    /// Opens every resource and registers `span` once, in named steps; on an error, `Drop`
    /// closes what was opened.
    pub(crate) fn open(span: RegionSpan, settings: &Settings) -> Result<Arc<Fabric>, BackendError> {
        let mut f = Fabric::unopened(settings);
        // With messages (notifications) where the provider has them, else RMA alone.
        let (provider, domain) = (&settings.provider, settings.domain.as_deref());
        f.info = get_info(provider, domain, true).or_else(|with_msg| {
            tracing::debug!(error = %with_msg, "no FI_MSG: notifications are not carried");
            get_info(provider, domain, false)
        })?;
        // SAFETY: `f.info` is the list `fi_getinfo` returned, freed by `f`'s Drop; each step
        // gets the live objects the steps before it opened and stores what it opens in `f`.
        unsafe {
            f.chosen = choose_domain(f.info, settings)?;
            f.describe(settings);
            f.open_endpoint(settings)?;
            f.register(span)?;
            f.post_receives(settings);
            if let Some(recv) = &f.recv {
                recv.post_all()?;
            }
        }
        f.endpoint_per_peer = f.choose_endpoint_per_peer(settings)?;
        f.start_threads(settings)?;
        let f = Arc::new(f);
        if f.provider == "shm" {
            local::register(&f.name, &f);
        }
        Ok(f)
    }

    /// A fabric with nothing opened yet.
    fn unopened(settings: &Settings) -> Fabric {
        Fabric {
            info: ptr::null_mut(),
            chosen: ptr::null_mut(),
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            ep: ptr::null_mut(),
            outstanding: Arc::new(Outstanding::default()),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            mr: ptr::null_mut(),
            desc: ptr::null_mut(),
            key: 0,
            virt: false,
            max_run_bytes: kit::DEFAULT_MAX_RUN_BYTES,
            runs_per_write: 1,
            runs_per_read: 1,
            name: Vec::new(),
            provider: String::new(),
            attributes: String::new(),
            progress: Mutex::new(None),
            retries: Retries::new(settings.idle_sleep, settings.give_up_after),
            revoked: Mutex::new(None),
            waitable: false,
            mr_endpoint: false,
            endpoint_per_peer: false,
            peer_queues: Arc::new(PeerQueues::empty()),
            carrier: None,
            recv: None,
        }
    }

    /// Records what the chosen entry grants: the provider, how remote addresses are given,
    /// how many runs an operation carries, and the attributes in words.
    ///
    /// # Safety
    ///
    /// `self.chosen` is a live entry of `self.info`.
    unsafe fn describe(&mut self, settings: &Settings) {
        let info = self.chosen;
        // SAFETY: per this function's contract; the strings are the provider's, NUL-terminated.
        unsafe {
            self.provider = CStr::from_ptr((*(*info).fabric_attr).prov_name)
                .to_string_lossy()
                .into_owned();
            let mr_mode = (*(*info).domain_attr).mr_mode as u32;
            self.virt = mr_mode & FI_MR_VIRT_ADDR != 0 || mr_mode == FI_MR_BASIC;
            self.mr_endpoint = mr_mode & FI_MR_ENDPOINT != 0;
            // 0 where a provider leaves it unset: then only the kit's bound applies.
            let max_msg = (*info).ep_attr.as_ref().map_or(0, |ep| ep.max_msg_size);
            if max_msg > 0 {
                self.max_run_bytes = self.max_run_bytes.min(max_msg);
            }
            // The provider's limits on one operation's local and remote lists (1 where it
            // leaves them unset).
            let limit = (*info).tx_attr.as_ref().map_or(1, |tx| {
                tx.iov_limit.min(tx.rma_iov_limit).clamp(1, MAX_PARTS)
            });
            self.runs_per_write = settings.runs_per_op.map_or(limit, |n| n.clamp(1, limit));
            self.runs_per_read = if self.provider == "shm" {
                1
            } else {
                self.runs_per_write
            };
            self.carrier = Carrier::of(info, &self.provider);
            let named = [
                (FI_MR_LOCAL, "FI_MR_LOCAL"),
                (FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
                (FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
                (FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
                (FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
                (FI_MR_RAW, "FI_MR_RAW"),
            ];
            let flags: Vec<&str> = named
                .iter()
                .filter(|(bit, _)| mr_mode & bit != 0)
                .map(|(_, name)| *name)
                .collect();
            let progress = |p: fi_progress| match p {
                FI_PROGRESS_AUTO => "auto",
                FI_PROGRESS_MANUAL => "manual",
                _ => "unspecified",
            };
            self.attributes = format!(
                "provider {}, domain {}, mr_mode [{}], data progress {}, control progress {}, \
                 max_msg_size {max_msg}, runs per WRITE {} and READ {}, notifications {}",
                self.provider,
                CStr::from_ptr((*(*info).domain_attr).name).to_string_lossy(),
                flags.join(" "),
                progress((*(*info).domain_attr).data_progress),
                progress((*(*info).domain_attr).control_progress),
                self.runs_per_write,
                self.runs_per_read,
                Carrier::describe(self.carrier),
            );
        }
    }

    /// Opens the fabric, domain, endpoint, completion queue and address vector of the chosen
    /// entry, binds and enables the endpoint, and reads its name.
    ///
    /// # Safety
    ///
    /// `self.chosen` is a live entry of `self.info`, and nothing was opened yet.
    unsafe fn open_endpoint(&mut self, settings: &Settings) -> Result<(), BackendError> {
        let info = self.chosen;
        // SAFETY: per this function's contract; every call gets live objects opened just
        // before it, and stores the new handle in `self`, whose Drop closes it.
        unsafe {
            check(
                "fi_fabric",
                fi_fabric((*info).fabric_attr, &mut self.fabric, ptr::null_mut()),
            )?;
            check(
                "fi_domain",
                fi_domain(self.fabric, info, &mut self.domain, ptr::null_mut()),
            )?;
            check(
                "fi_endpoint",
                fi_endpoint(self.domain, info, &mut self.ep, ptr::null_mut()),
            )?;
            self.open_completion_queue(settings.wait)?;
            self.peer_queues = Arc::new(PeerQueues::new(self.cq, self.waitable)?);
            let mut av_attr = fi_av_attr {
                type_: FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                fi_av_open(self.domain, &mut av_attr, &mut self.av, ptr::null_mut()),
            )?;
            check(
                "fi_ep_bind(cq)",
                fi_ep_bind(self.ep, &mut (*self.cq).fid, (FI_TRANSMIT | FI_RECV) as u64),
            )?;
            check(
                "fi_ep_bind(av)",
                fi_ep_bind(self.ep, &mut (*self.av).fid, 0),
            )?;
            check("fi_enable", fi_enable(self.ep))?;
            let mut name = vec![0u8; 1024];
            let mut len = name.len();
            check(
                "fi_getname",
                fi_getname(&mut (*self.ep).fid, name.as_mut_ptr().cast(), &mut len),
            )?;
            name.truncate(len);
            self.name = name;
        }
        Ok(())
    }

    /// Opens the completion queue: with a wait object when `wait` and the provider offers one
    /// (the progress thread then sleeps in the kernel until the provider's sockets or queues
    /// have something, `crate::cq`, so a passive target is progressed as soon as bytes
    /// arrive), else polled.
    ///
    /// # Safety
    ///
    /// `self.domain` is live and no queue is open yet.
    unsafe fn open_completion_queue(&mut self, wait: bool) -> Result<(), BackendError> {
        let mut cq_attr = fi_cq_attr {
            // With the length: a receive's completion says how long its frame is.
            format: FI_CQ_FORMAT_MSG,
            size: 4096,
            // A file descriptor: the progress thread waits on it with those of the peers'
            // own queues (`crate::cq`).
            wait_obj: if wait { FI_WAIT_FD } else { FI_WAIT_NONE },
            ..Default::default()
        };
        // SAFETY: per this function's contract.
        let mut opened =
            unsafe { fi_cq_open(self.domain, &mut cq_attr, &mut self.cq, ptr::null_mut()) };
        self.waitable = opened == 0 && wait;
        if opened != 0 && wait {
            tracing::debug!(
                error = %error("fi_cq_open with a wait object", opened as isize),
                "polling the completion queue instead"
            );
            cq_attr.wait_obj = FI_WAIT_NONE;
            // SAFETY: as above; the failed open left no queue.
            opened =
                unsafe { fi_cq_open(self.domain, &mut cq_attr, &mut self.cq, ptr::null_mut()) };
        }
        check("fi_cq_open", opened)
    }

    /// Registers the region once (bound to the endpoint where the provider wants
    /// `FI_MR_ENDPOINT`), for local and remote reads and writes.
    ///
    /// # Safety
    ///
    /// The domain and endpoint are open (`self.chosen` is the entry they were opened from);
    /// `span` stays valid until `self` is dropped.
    unsafe fn register(&mut self, span: RegionSpan) -> Result<(), BackendError> {
        let access = (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
        // SAFETY: `self.chosen` is a live entry of `self.info` (this function's contract).
        let (mr_mode, key_bytes) = unsafe {
            let domain = &*(*self.chosen).domain_attr;
            (domain.mr_mode as u32, domain.mr_key_size)
        };
        // Where the provider chooses keys it ignores the request.
        let prov_key = mr_mode & FI_MR_PROV_KEY != 0 || mr_mode == FI_MR_BASIC;
        let requested = if prov_key { 0 } else { fresh_key(key_bytes) };
        // SAFETY: per this function's contract; the registration is closed by Drop or revoke.
        unsafe {
            check(
                "fi_mr_reg",
                fi_mr_reg(
                    self.domain,
                    span.base().as_ptr().cast(),
                    span.len(),
                    access,
                    0,
                    requested,
                    0,
                    &mut self.mr,
                    ptr::null_mut(),
                ),
            )?;
            if self.mr_endpoint {
                check("fi_mr_bind", fi_mr_bind(self.mr, &mut (*self.ep).fid, 0))?;
                check("fi_mr_enable", fi_mr_enable(self.mr))?;
            }
            self.key = fi_mr_key(self.mr);
            self.desc = fi_mr_desc(self.mr);
        }
        Ok(())
    }

    /// Allocates the notification receive buffers of the endpoint, where the provider carries
    /// notifications (`crate::recv`); [`RecvPool::post_all`] posts them.
    fn post_receives(&mut self, settings: &Settings) {
        if self.carrier.is_some() {
            self.recv = Some(Arc::new(RecvPool::new(self.ep, settings.inbox.clone())));
        }
    }

    /// Whether each peer gets an endpoint of its own: as asked, where the provider allows it
    /// (not with registrations bound to an endpoint), and by default wherever it does.
    fn choose_endpoint_per_peer(&self, settings: &Settings) -> Result<bool, BackendError> {
        match settings.endpoint_per_peer {
            Some(true) if self.mr_endpoint => Err(BackendError::new(
                BackendErrorKind::InvalidOption,
                format!(
                    "provider {} binds registrations to an endpoint (FI_MR_ENDPOINT): \
                     endpoint_per_peer is not supported",
                    self.provider
                ),
            )),
            Some(per_peer) => Ok(per_peer),
            None => Ok(!self.mr_endpoint),
        }
    }

    /// Starts the progress thread (waiting on the queues' fds where it can, else polling) and
    /// the retry thread.
    fn start_threads(&mut self, settings: &Settings) -> Result<(), BackendError> {
        let cq = Raw(self.cq);
        let recv = self.recv.clone();
        let peers = self.peer_queues.clone();
        let retries = self.retries.clone();
        let thread = if self.waitable {
            let wake = Raw(self.cq);
            let fabric = RawFabric(self.fabric);
            let spin = settings.wait_spin;
            ProgressThread::spawn_waiting(
                "ofi",
                move || {
                    let (cq, fabric) = (&cq, &fabric);
                    let busy = !retries.is_empty();
                    // SAFETY: the fabric, queue and endpoint outlive this thread:
                    // `Fabric::revoke` and `Fabric::drop` stop and join it first; the queues
                    // wait (`waitable`); the backend's queue has the msg format.
                    unsafe { peers.wait(fabric.0, cq.0, recv.as_deref(), busy, spin) };
                    retries.watch();
                },
                move || {
                    let cq = &wake;
                    // SAFETY: called by `stop`, before `Fabric::drop` closes the queue.
                    unsafe { fi_cq_signal(cq.0) };
                },
            )
        } else {
            ProgressThread::spawn("ofi", settings.idle_sleep, move || {
                let cq = &cq;
                // SAFETY: the queue and endpoint outlive this thread: `Fabric::revoke` and
                // `Fabric::drop` stop and join it first; the backend's queue has the msg format.
                let n = unsafe { poll_main(cq.0, recv.as_deref()) + peers.poll() };
                retries.watch();
                n
            })
        }
        .map_err(|e| BackendError::other(format!("spawning the progress thread: {e}")))?;
        *self.progress.get_mut() = Some(thread);
        // The endpoint and descriptor outlive the retry thread: `Fabric::revoke` and
        // `Fabric::drop` stop and join it first, or, when one is stuck in a post, never close
        // them.
        self.retries
            .start(MainPost(self.ep, self.outstanding.clone(), self.desc))
    }
}

fn c_string(s: &str) -> Result<*mut libc::c_char, BackendError> {
    let c = CString::new(s)
        .map_err(|_| BackendError::new(BackendErrorKind::InvalidOption, format!("{s:?}")))?;
    // SAFETY: a valid NUL-terminated string; strdup's copy is freed by fi_freeinfo.
    let dup = unsafe { libc::strdup(c.as_ptr()) };
    if dup.is_null() {
        return Err(BackendError::other("out of memory"));
    }
    Ok(dup)
}

/// A registration key no earlier registration is likely to have had: random bits, as many as
/// the provider's keys hold (`key_bytes`; all 64 where it says 0, or 8 or more). Used wherever the
/// provider lets the application choose keys (no `FI_MR_PROV_KEY`: `tcp;ofi_rxm` and `shm`
/// here).
///
/// With a key every registration shares (0, as this backend asked before) a peer's
/// descriptor of a closed transport names the region of any transport that took its endpoint
/// address since (a TCP port the kernel handed out again, in this process or a new one): its
/// WRITEs land there, at the same offsets, and are reported done. With a key of its own a
/// registration refuses them (the key is unknown there) and the operation fails.
fn fresh_key(key_bytes: usize) -> u64 {
    let bits = kit::random_u64();
    match key_bytes {
        1..=7 => bits & ((1u64 << (8 * key_bytes)) - 1),
        _ => bits,
    }
}

/// Asks `fi_getinfo` for RDM endpoints with RMA (and messages, with `msg`) and delivery
/// completion from `provider` (and `domain`).
fn get_info(provider: &str, domain: Option<&str>, msg: bool) -> Result<*mut fi_info, BackendError> {
    // SAFETY: fi_allocinfo returns a zeroed info with allocated sub-structs, or null.
    let hints = unsafe { fi_allocinfo() };
    if hints.is_null() {
        return Err(BackendError::other("fi_allocinfo failed"));
    }
    let mut info = ptr::null_mut();
    let got = (|| {
        // SAFETY: `hints` and its sub-structs were allocated by fi_allocinfo; the strings
        // are strdup'ed, so fi_freeinfo may free them.
        unsafe {
            (*hints).caps = (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
            if msg {
                (*hints).caps |= (FI_MSG | FI_SEND | FI_RECV) as u64;
            }
            (*hints).mode = FI_CONTEXT | FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode =
                (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)
                    as i32;
            (*(*hints).domain_attr).threading = FI_THREAD_SAFE;
            (*(*hints).tx_attr).op_flags = FI_DELIVERY_COMPLETE as u64;
            (*(*hints).fabric_attr).prov_name = c_string(provider)?;
            if let Some(d) = domain {
                (*(*hints).domain_attr).name = c_string(d)?;
            }
            check(
                "fi_getinfo",
                fi_getinfo(
                    fi_version_of(1, 14),
                    ptr::null(),
                    ptr::null(),
                    0,
                    hints,
                    &mut info,
                ),
            )
        }
    })();
    // SAFETY: allocated by fi_allocinfo, freed once.
    unsafe { fi_freeinfo(hints) };
    got.map_err(|e| {
        BackendError::new(
            e.kind(),
            format!(
                "no libfabric provider {provider:?} offers RDM endpoints with RMA here: {}",
                e.message()
            ),
        )
    })?;
    Ok(info)
}

/// The entry of `info` for the domain the settings name (providers ignore the domain hint),
/// or the first.
///
/// # Safety
///
/// `info` is a live list from `fi_getinfo`.
unsafe fn choose_domain(
    info: *mut fi_info,
    settings: &Settings,
) -> Result<*mut fi_info, BackendError> {
    let Some(wanted) = &settings.domain else {
        return Ok(info);
    };
    let mut entry = info;
    let mut seen = Vec::new();
    // SAFETY: per this function's contract; each entry's domain name is NUL-terminated.
    unsafe {
        while !entry.is_null() {
            let name = CStr::from_ptr((*(*entry).domain_attr).name).to_string_lossy();
            if name == wanted.as_str() {
                return Ok(entry);
            }
            seen.push(name.into_owned());
            entry = (*entry).next;
        }
    }
    Err(BackendError::new(
        BackendErrorKind::InvalidOption,
        format!(
            "provider {:?} has no domain {wanted:?} (it has {})",
            settings.provider,
            seen.join(", ")
        ),
    ))
}
