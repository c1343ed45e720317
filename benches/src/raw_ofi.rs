//! The libfabric backend's raw baseline: the same batches of block writes (or reads) between
//! two RDM endpoints in this process, through libfabric-sys directly (`fi_writemsg` with
//! delivery completion / `fi_readmsg`, completions read by this thread): libfabric with
//! nothing of blockwire in between.

use std::ffi::{CString, c_void};
use std::ptr;
use std::time::Instant;

use blockwire::{Op, Region};
use blockwire_bench::{Shape, written_regions};
use libfabric_sys::*;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn check(what: &str, ret: i32) -> Res<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", strerror(-ret)).into())
    }
}

/// One fabric, domain, endpoint, completion queue, address vector and registered region.
struct Side {
    info: *mut fi_info,
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    ep: *mut fid_ep,
    cq: *mut fid_cq,
    av: *mut fid_av,
    mr: *mut fid_mr,
    name: Vec<u8>,
    virt: bool,
}

impl Side {
    fn open(region: &Region, provider: &str, domain: Option<&str>) -> Res<Side> {
        let mut s = Side {
            info: ptr::null_mut(),
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            ep: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            mr: ptr::null_mut(),
            name: Vec::new(),
            virt: false,
        };
        // SAFETY: each call gets live objects created just before it and valid parameters;
        // strings given to the hints are strdup'ed (fi_freeinfo frees them); `s`'s Drop
        // closes whatever was opened if a later step fails.
        unsafe {
            let hints = fi_allocinfo();
            if hints.is_null() {
                return Err("fi_allocinfo".into());
            }
            (*hints).caps = (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
            (*hints).mode = FI_CONTEXT | FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode =
                (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED) as i32;
            (*(*hints).tx_attr).op_flags = FI_DELIVERY_COMPLETE as u64;
            (*(*hints).fabric_attr).prov_name = libc::strdup(CString::new(provider)?.as_ptr());
            let got = fi_getinfo(
                fi_version_of(1, 14),
                ptr::null(),
                ptr::null(),
                0,
                hints,
                &mut s.info,
            );
            fi_freeinfo(hints);
            check("fi_getinfo", got)?;
            let mut info = s.info;
            if let Some(d) = domain {
                while !info.is_null()
                    && std::ffi::CStr::from_ptr((*(*info).domain_attr).name).to_string_lossy() != d
                {
                    info = (*info).next;
                }
                if info.is_null() {
                    return Err(format!("no domain {d}").into());
                }
            }
            s.virt = (*(*info).domain_attr).mr_mode as u32 & FI_MR_VIRT_ADDR != 0;
            check(
                "fi_fabric",
                fi_fabric((*info).fabric_attr, &mut s.fabric, ptr::null_mut()),
            )?;
            check(
                "fi_domain",
                fi_domain(s.fabric, info, &mut s.domain, ptr::null_mut()),
            )?;
            check(
                "fi_endpoint",
                fi_endpoint(s.domain, info, &mut s.ep, ptr::null_mut()),
            )?;
            let mut cq_attr = fi_cq_attr {
                format: FI_CQ_FORMAT_CONTEXT,
                size: 4096,
                ..Default::default()
            };
            check(
                "fi_cq_open",
                fi_cq_open(s.domain, &mut cq_attr, &mut s.cq, ptr::null_mut()),
            )?;
            let mut av_attr = fi_av_attr {
                type_: FI_AV_TABLE,
                ..Default::default()
            };
            check(
                "fi_av_open",
                fi_av_open(s.domain, &mut av_attr, &mut s.av, ptr::null_mut()),
            )?;
            check(
                "bind cq",
                fi_ep_bind(s.ep, &mut (*s.cq).fid, (FI_TRANSMIT | FI_RECV) as u64),
            )?;
            check("bind av", fi_ep_bind(s.ep, &mut (*s.av).fid, 0))?;
            check("fi_enable", fi_enable(s.ep))?;
            let mut name = vec![0u8; 1024];
            let mut len = name.len();
            check(
                "fi_getname",
                fi_getname(&mut (*s.ep).fid, name.as_mut_ptr().cast(), &mut len),
            )?;
            name.truncate(len);
            s.name = name;
            let access = (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
            check(
                "fi_mr_reg",
                fi_mr_reg(
                    s.domain,
                    region.span().base().as_ptr().cast(),
                    region.len(),
                    access,
                    0,
                    0,
                    0,
                    &mut s.mr,
                    ptr::null_mut(),
                ),
            )?;
        }
        Ok(s)
    }

    /// Completions read (none when the queue is empty); an error entry is an error (it would
    /// otherwise stay at the head of the queue and hide every completion behind it).
    fn poll(&self) -> Res<usize> {
        let mut entries = [fi_cq_entry::default(); 64];
        // SAFETY: a live queue and room for 64 context-format entries.
        let n = unsafe { fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len()) };
        if n == -(FI_EAVAIL as isize) {
            let mut err = fi_cq_err_entry::default();
            // SAFETY: a live queue and a writable error entry.
            unsafe { fi_cq_readerr(self.cq, &mut err, 0) };
            return Err(format!("raw completion: {}", strerror(err.err)).into());
        }
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        // SAFETY: objects opened in `open`, closed once, endpoint first; `fid` is the first
        // field of every fid_* struct.
        unsafe {
            for f in [
                self.ep.cast::<fid>(),
                self.mr.cast::<fid>(),
                self.av.cast::<fid>(),
                self.cq.cast::<fid>(),
                self.domain.cast::<fid>(),
                self.fabric.cast::<fid>(),
            ] {
                if !f.is_null() {
                    fi_close(f);
                }
            }
            if !self.info.is_null() {
                fi_freeinfo(self.info);
            }
        }
    }
}

/// GB/s of raw libfabric for `shape` (two regions, `depth` batches of `batch` operations
/// outstanding, for `run_for`) over `provider` and `domain`.
pub(crate) fn gbps(shape: &Shape, provider: &str, domain: Option<&str>) -> Res<f64> {
    let Shape {
        op,
        blocks,
        block,
        batch,
        depth,
        run_for,
        layout,
    } = *shape;
    // Written first, as the transports' regions are.
    let (ra, rb) = written_regions(blocks, block, Region::new)?;
    let (a, b) = (
        Side::open(&ra, provider, domain)?,
        Side::open(&rb, provider, domain)?,
    );
    let mut peer: fi_addr_t = 0;
    // SAFETY: a live address vector and `b`'s endpoint name.
    let n = unsafe {
        fi_av_insert(
            a.av,
            b.name.as_ptr().cast(),
            1,
            &mut peer,
            0,
            ptr::null_mut(),
        )
    };
    if n != 1 {
        return Err("fi_av_insert".into());
    }
    // SAFETY: a live registration of `b`.
    let (key, desc) = unsafe { (fi_mr_key(b.mr), fi_mr_desc(a.mr)) };
    let remote_base = if b.virt { rb.base_addr() } else { 0 };
    let mut contexts = vec![fi_context2::default(); (depth + 1) * batch as usize];
    let per_round = batch as usize;
    let (mut posted, mut completed, mut next) = (0usize, 0usize, 0u32);
    let start = Instant::now();
    loop {
        // The clock is read per batch: a provider whose queue holds fewer than `depth`
        // batches (ofi_rxm over tcp: 2,048 operations) keeps this loop posting as it completes.
        while start.elapsed() < run_for && posted - completed < depth * per_round {
            let idx = layout.batch(next, batch, blocks);
            next = next.wrapping_add(1);
            for i in idx {
                let off = i as usize * block;
                let iov = iovec {
                    // SAFETY: `off` is inside the region (i < blocks).
                    iov_base: unsafe { ra.span().base().as_ptr().add(off) }.cast(),
                    iov_len: block,
                };
                let mut d = [desc];
                let rma = fi_rma_iov {
                    addr: remote_base + off as u64,
                    len: block,
                    key,
                };
                let slot = posted % contexts.len();
                let msg = fi_msg_rma {
                    msg_iov: &iov,
                    desc: d.as_mut_ptr(),
                    iov_count: 1,
                    addr: peer,
                    rma_iov: &rma,
                    rma_iov_count: 1,
                    context: (&mut contexts[slot] as *mut fi_context2).cast::<c_void>(),
                    data: 0,
                };
                loop {
                    // SAFETY: a live endpoint; `msg` and what it points to live through the
                    // call; both ranges lie inside registered regions.
                    let ret = unsafe {
                        match op {
                            Op::Write => fi_writemsg(
                                a.ep,
                                &msg,
                                (FI_DELIVERY_COMPLETE | FI_COMPLETION) as u64,
                            ),
                            _ => fi_readmsg(a.ep, &msg, FI_COMPLETION as u64),
                        }
                    };
                    if ret == 0 {
                        break;
                    }
                    if ret != -(FI_EAGAIN as isize) {
                        return Err(format!("raw post: {}", strerror(-(ret as i32))).into());
                    }
                    completed += a.poll()?;
                    b.poll()?;
                }
                posted += 1;
            }
        }
        if posted == completed {
            break;
        }
        completed += a.poll()?;
        b.poll()?;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(posted as f64 * block as f64 / secs / 1e9)
}
