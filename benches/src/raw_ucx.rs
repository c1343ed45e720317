//! The ucx backend's raw baseline: the same batches of block puts (or gets) between two UCP
//! workers in this process, through ucx-sys directly (`ucp_put_nbx`/`ucp_get_nbx` per block,
//! then `ucp_ep_flush_nbx`), progressed by this thread: UCX with nothing of blockwire in between,
//! configured as the backend configures it (`tls`, and `blockwire::ucx::tcp_tuning`).

use std::ffi::{CString, c_void};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use blockwire::{Op, Region};
use blockwire_bench::{Shape, written_regions};
use ucx_sys::*;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn check(what: &str, status: ucs_status_t) -> Res<()> {
    if status == UCS_OK {
        Ok(())
    } else {
        Err(format!("{what}: {}", status_string(status)).into())
    }
}

/// One UCP context and worker with one registered region.
struct Side {
    context: ucp_context_h,
    worker: ucp_worker_h,
    memh: ucp_mem_h,
}

impl Side {
    fn open(region: &Region, tls: Option<&str>, tuning: &[(&str, String)]) -> Res<Side> {
        let mut side = Side {
            context: ptr::null_mut(),
            worker: ptr::null_mut(),
            memh: ptr::null_mut(),
        };
        // SAFETY: every call gets valid parameters and live handles created just before it;
        // `side`'s Drop releases what was created if a later step fails.
        unsafe {
            let mut config: *mut ucp_config_t = ptr::null_mut();
            check(
                "ucp_config_read",
                ucp_config_read(ptr::null(), ptr::null(), &mut config),
            )?;
            let tls = tls.map(|tls| ("TLS", tls.to_owned()));
            for (key, value) in tls.iter().chain(tuning) {
                let (k, v) = (CString::new(*key)?, CString::new(value.as_str())?);
                check(
                    "ucp_config_modify",
                    ucp_config_modify(config, k.as_ptr(), v.as_ptr()),
                )?;
            }
            let params = ucp_params_t {
                field_mask: UCP_PARAM_FIELD_FEATURES as u64,
                features: UCP_FEATURE_RMA as u64,
                ..Default::default()
            };
            let init = ucp_init(&params, config, &mut side.context);
            ucp_config_release(config);
            check("ucp_init", init)?;
            let wparams = ucp_worker_params_t::default();
            check(
                "ucp_worker_create",
                ucp_worker_create(side.context, &wparams, &mut side.worker),
            )?;
            let mparams = ucp_mem_map_params_t {
                field_mask: (UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH)
                    as u64,
                address: region.span().base().as_ptr().cast(),
                length: region.len(),
                ..Default::default()
            };
            check(
                "ucp_mem_map",
                ucp_mem_map(side.context, &mparams, &mut side.memh),
            )?;
        }
        Ok(side)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        // SAFETY: handles created in `open`, released once, in reverse order.
        unsafe {
            if !self.memh.is_null() {
                ucp_mem_unmap(self.context, self.memh);
            }
            if !self.worker.is_null() {
                ucp_worker_destroy(self.worker);
            }
            if !self.context.is_null() {
                ucp_cleanup(self.context);
            }
        }
    }
}

unsafe extern "C" fn flushed(request: *mut c_void, _status: ucs_status_t, user_data: *mut c_void) {
    // SAFETY: `user_data` is the counter owned by `gbps`, alive until every flush completed.
    unsafe { (*(user_data as *const AtomicUsize)).fetch_add(1, Ordering::Release) };
    // SAFETY: this flush's request, released in its callback.
    unsafe { ucp_request_free(request) };
}

/// GB/s of raw UCX for `op` over two regions of `blocks` blocks of `block` bytes, `batch`
/// blocks per flush, `depth` flushes outstanding, for `run_for`.
pub(crate) fn gbps(
    shape: &Shape,
    tls: Option<&str>,
    tuning: &[(&str, String)],
    peer_errors: bool,
) -> Res<f64> {
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
    let (a, b) = (Side::open(&ra, tls, tuning)?, Side::open(&rb, tls, tuning)?);
    let progress = || {
        // SAFETY: live workers, progressed from this thread only.
        unsafe { ucp_worker_progress(a.worker) + ucp_worker_progress(b.worker) }
    };
    // SAFETY: the calls below use live handles from `a` and `b`; UCX allocates the address and
    // key buffers, which are copied and released right away; the endpoint and key are released
    // before the sides drop.
    unsafe {
        let mut addr: *mut ucp_address_t = ptr::null_mut();
        let mut addr_len = 0usize;
        check(
            "ucp_worker_get_address",
            ucp_worker_get_address(b.worker, &mut addr, &mut addr_len),
        )?;
        // The backend's own endpoint setting: peer error handling (which, in UCX 1.13, rules
        // out the shared-memory transports) unless `peer_errors=false`.
        let eparams = ucp_ep_params_t {
            field_mask: (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE)
                as u64,
            address: addr,
            err_mode: if peer_errors {
                UCP_ERR_HANDLING_MODE_PEER
            } else {
                UCP_ERR_HANDLING_MODE_NONE
            },
            ..Default::default()
        };
        let mut ep: ucp_ep_h = ptr::null_mut();
        let created = ucp_ep_create(a.worker, &eparams, &mut ep);
        ucp_worker_release_address(b.worker, addr);
        check("ucp_ep_create", created)?;
        let mut rkey_buf: *mut c_void = ptr::null_mut();
        let mut rkey_len = 0usize;
        check(
            "ucp_rkey_pack",
            ucp_rkey_pack(b.context, b.memh, &mut rkey_buf, &mut rkey_len),
        )?;
        let mut rkey: ucp_rkey_h = ptr::null_mut();
        let unpacked = ucp_ep_rkey_unpack(ep, rkey_buf, &mut rkey);
        ucp_rkey_buffer_release(rkey_buf);
        check("ucp_ep_rkey_unpack", unpacked)?;
        let done = AtomicUsize::new(0);
        let flush_params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            cb: ucp_request_param_t__bindgen_ty_1 {
                send: Some(flushed),
            },
            user_data: &done as *const AtomicUsize as *mut c_void,
            ..Default::default()
        };
        let plain = ucp_request_param_t::default();
        let (la, lb) = (ra.span().base().as_ptr(), rb.base_addr());
        let (mut posted, mut finished_now, mut next) = (0usize, 0usize, 0u32);
        let start = Instant::now();
        loop {
            let running = start.elapsed() < run_for;
            while running && posted - done.load(Ordering::Acquire) - finished_now < depth {
                let idx = layout.batch(next, batch, blocks);
                next = next.wrapping_add(1);
                for i in idx {
                    let off = i as usize * block;
                    let req = match op {
                        Op::Write => ucp_put_nbx(
                            ep,
                            la.add(off).cast(),
                            block,
                            lb + off as u64,
                            rkey,
                            &plain,
                        ),
                        _ => ucp_get_nbx(
                            ep,
                            la.add(off).cast(),
                            block,
                            lb + off as u64,
                            rkey,
                            &plain,
                        ),
                    };
                    if UCS_PTR_IS_ERR(req) {
                        return Err(
                            format!("raw post: {}", status_string(UCS_PTR_STATUS(req))).into()
                        );
                    }
                    if UCS_PTR_IS_PTR(req) {
                        ucp_request_free(req);
                    }
                }
                let req = ucp_ep_flush_nbx(ep, &flush_params);
                if !UCS_PTR_IS_PTR(req) {
                    check("raw flush", UCS_PTR_STATUS(req))?;
                    finished_now += 1;
                }
                posted += 1;
            }
            if posted == done.load(Ordering::Acquire) + finished_now {
                break;
            }
            progress();
        }
        let secs = start.elapsed().as_secs_f64();
        ucp_rkey_destroy(rkey);
        let close = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
            flags: UCP_EP_CLOSE_FLAG_FORCE,
            ..Default::default()
        };
        let req = ucp_ep_close_nbx(ep, &close);
        if UCS_PTR_IS_PTR(req) {
            while ucp_request_check_status(req) == UCS_INPROGRESS {
                progress();
            }
            ucp_request_free(req);
        }
        Ok(posted as f64 * f64::from(batch) * block as f64 / secs / 1e9)
    }
}
