//! The nixl backend's raw baseline: the same batches between two NIXL agents in this process,
//! through nixl-sys directly (prepared descriptor lists, `make_xfer_req` + `post_xfer_req` per
//! transfer, `get_xfer_status` until done): NIXL with nothing of blockwire in between. Its
//! agents are configured as the backend's (a progress thread that sleeps between events,
//! `blockwire_nixl::DEFAULT_PROGRESS_DELAY_US`): with nixl-sys's `Agent::new` the thread
//! spins, which on this 2-core machine cost NIXL itself most of its throughput.

use std::time::Instant;

use blockwire::{Op, Region};
use blockwire_bench::{Res, Shape, written_regions};
use blockwire_nixl::Dram;
use nixl_sys::{
    Agent, MemType, RegistrationHandle, XferDescList, XferDlistHandle, XferOp, XferRequest,
    XferStatus,
};

/// One agent with one registered region.
struct Side {
    agent: Agent,
    _registration: RegistrationHandle,
}

impl Side {
    fn open(name: &str, plugin: &str, region: &Region) -> Res<Side> {
        let config = blockwire_nixl::agent_config(blockwire_nixl::DEFAULT_PROGRESS_DELAY_US);
        let agent = Agent::new_configured(name, &config)?;
        let (_mems, params) = agent.get_plugin_params(plugin)?;
        agent.create_backend(plugin, &params)?;
        let dram = Dram::new(region.span().base().as_ptr() as usize, region.span().len());
        let registration = agent.register_memory(&dram, None)?;
        Ok(Side {
            agent,
            _registration: registration,
        })
    }
}

/// The blocks of `region`, one descriptor each.
fn blocks(region: &Region) -> Res<XferDescList<'static>> {
    let span = region.span();
    let mut list = XferDescList::new(MemType::Dram)?;
    for i in 0..span.num_blocks() {
        let addr = span.base().as_ptr() as usize + i as usize * span.block_len();
        list.add_desc(addr, span.block_len(), 0);
    }
    Ok(list)
}

/// GB/s of NIXL alone for `shape`, with the plugin `plugin` (`UCX` by default).
pub(crate) fn gbps(shape: &Shape, plugin: &str) -> Res<f64> {
    // Written first, as the transports' regions are.
    let (ra, rb) = written_regions(shape.blocks, shape.block, Region::new)?;
    let pid = std::process::id();
    let a = Side::open(&format!("raw-a-{pid}"), plugin, &ra)?;
    let b = Side::open(&format!("raw-b-{pid}"), plugin, &rb)?;
    let remote = a.agent.load_remote_md(&b.agent.get_local_md()?)?;
    let local: XferDlistHandle = a.agent.prepare_xfer_dlist("", &blocks(&ra)?, None)?;
    let theirs: XferDlistHandle = a.agent.prepare_xfer_dlist(&remote, &blocks(&rb)?, None)?;
    let op = match shape.op {
        Op::Write => XferOp::Write,
        Op::Read => XferOp::Read,
    };
    let batch = shape.batch.min(shape.blocks);
    let mut inflight: Vec<XferRequest> = Vec::new();
    let (mut next, mut done) = (0u32, 0usize);
    let start = Instant::now();
    loop {
        // A post NIXL completes at once leaves nothing in flight: check the clock each time.
        while inflight.len() < shape.depth && start.elapsed() < shape.run_for {
            let idx = shape
                .layout
                .batch(next, batch, shape.blocks)
                .into_iter()
                .map(i32::try_from)
                .collect::<Result<Vec<i32>, _>>()?;
            next = next.wrapping_add(1);
            let req = a
                .agent
                .make_xfer_req(op, &local, &idx, &theirs, &idx, None)?;
            if a.agent.post_xfer_req(&req, None)? {
                inflight.push(req);
            } else {
                done += 1;
            }
        }
        if inflight.is_empty() && start.elapsed() >= shape.run_for {
            break;
        }
        let mut k = 0;
        let mut any = false;
        while k < inflight.len() {
            match a.agent.get_xfer_status(&inflight[k])? {
                XferStatus::Success => {
                    inflight.swap_remove(k);
                    done += 1;
                    any = true;
                }
                XferStatus::InProgress => k += 1,
            }
        }
        if !any {
            std::thread::yield_now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    drop((local, theirs));
    a.agent.invalidate_remote_md(&remote)?;
    Ok(done as f64 * f64::from(batch) * shape.block as f64 / secs / 1e9)
}
