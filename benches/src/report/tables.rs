//! The tables printed at the end of a run: the ceilings, the points, the costs.

use super::Run;
use crate::measure::Point;
use crate::notify;
use crate::overhead;

/// The tables' keys: backend, operation and whether the peer was in another process, in the
/// order first measured.
pub(super) fn series(run: &Run) -> Vec<(String, String, bool)> {
    let mut keys = Vec::new();
    for p in &run.points {
        let k = (p.backend.clone(), p.op.clone(), p.cross_process);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// GB/s by thread count (index 0: one thread), as `1 thread a, 2 threads b`.
fn per_thread(gbps: &[f64]) -> String {
    let each: Vec<String> = gbps
        .iter()
        .enumerate()
        .map(|(i, g)| format!("{} thread{} {g:.2}", i + 1, if i == 0 { "" } else { "s" }))
        .collect();
    each.join(", ")
}

/// Prints the ceilings of the run.
fn print_ceilings(run: &Run) {
    let c = &run.ceilings;
    let by_conns: Vec<String> = c
        .tcp_by_connections
        .iter()
        .map(|(n, g)| format!("{n} connection{} {g:.2}", if *n == 1 { "" } else { "s" }))
        .collect();
    let (lo, hi) = run
        .points
        .iter()
        .filter(|p| !p.peer)
        .fold((f64::MAX, 0f64), |(lo, hi), p| {
            (lo.min(p.memcpy_1thr_gbps), hi.max(p.memcpy_1thr_gbps))
        });
    println!(
        "ceilings, measured before and after the sweep and probed before each point, the best \
         kept (/ceil: the one that bounds the setting):"
    );
    println!(
        "  mem  {:>6.2} GB/s: memcpy or streaming copy over {} MiB, best of 1 to {} threads ({}) and of /1thr",
        c.mem_gbps,
        run.region_mib,
        c.mem_by_threads.len(),
        per_thread(&c.mem_by_threads)
    );
    if c.mem_shared_gbps > 0.0 {
        println!(
            "       {:>6.2} GB/s between two shared-memory mappings ({}): not a ceiling, what \
             a copy into a peer's shared region reaches here at best",
            c.mem_shared_gbps,
            per_thread(&c.mem_shared_by_threads)
        );
    }
    let congestion = c
        .tcp_congestion_control
        .as_deref()
        .map(|cc| format!(" (congestion control {cc})"))
        .unwrap_or_default();
    println!(
        "  tcp  {:>6.2} GB/s: one loopback TCP stream per connection, best of {}{congestion}",
        c.tcp_gbps,
        by_conns.join(", ")
    );
    println!(
        "  /1thr: single-thread memcpy over {} MiB, measured before each point: median {:.2} \
         GB/s, {:.2} to {:.2}\n",
        run.region_mib,
        run.memcpy_gbps,
        lo.min(hi),
        hi
    );
}

/// The Mooncake peer's point at the same operation, block size and process placement as `p`.
fn mooncake_of<'a>(run: &'a Run, p: &Point) -> Option<&'a Point> {
    run.points.iter().find(|q| {
        q.peer
            && q.backend == crate::peers::MOONCAKE.label
            && q.op == p.op
            && q.block_bytes == p.block_bytes
            && q.cross_process == p.cross_process
    })
}

/// Prints one table per backend, operation and placement (the peers' too), then the
/// notification cost, the telemetry overhead and the registration tables.
pub(crate) fn print_tables(run: &Run) {
    if !run.points.is_empty() {
        print_ceilings(run);
        println!(
            "blocks per transfer: {} (--layout)",
            match run.layout {
                crate::Layout::Scattered => "scattered, none adjacent",
                crate::Layout::Contiguous => "one contiguous run",
            }
        );
        if run.slices > 1 {
            println!(
                "each shm point: {} slices of its transfers, each followed by one of the raw \
                 copy (/raw: the two over the same moments; --slices)",
                run.slices
            );
        }
        match run.rounds {
            0 | 1 => println!(),
            n => println!("each point: the round with the median GB/s of {n} (--rounds)\n"),
        }
    }
    let fmt = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"));
    let us = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| format!("{t:.1}us"));
    for (backend, op, xp) in series(run) {
        println!(
            "{backend} {op}{}",
            if xp { " (peer in another process)" } else { "" }
        );
        println!(
            "{:>9} {:>6} {:>6} {:>8} {:>6} {:>5} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>10}",
            "block",
            "batch",
            "depth",
            "GB/s",
            "/ceil",
            "ceil",
            "/1thr",
            "/raw",
            "/mooncake",
            "submit",
            "sub p99",
            "core p99",
            "fill max",
            "spin p99",
            "wake p99",
            "poll p99.9",
            "cpu/xfer",
            "complete",
            "cmp p99"
        );
        for p in run
            .points
            .iter()
            .filter(|p| p.backend == backend && p.op == op && p.cross_process == xp)
        {
            let raw = p.raw_gbps.map(|r| p.gbps / r);
            let peer = mooncake_of(run, p)
                .filter(|q| !p.peer && q.gbps > 0.0)
                .map(|q| p.gbps / q.gbps);
            println!(
                "{:>8}K {:>6} {:>6} {:>8.2} {:>6.2} {:>5} {:>6.2} {:>6} {:>9} {:>7.1}us {:>7.1}us \
                 {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8.1}us {:>8.1}us",
                p.block_bytes >> 10,
                p.batch,
                p.depth,
                p.gbps,
                p.ratio_to_ceiling,
                p.ceiling.as_str(),
                p.ratio_to_memcpy,
                fmt(raw),
                fmt(peer),
                p.submit_avg_us,
                p.submit_p99_us,
                us(p.submit_p99_on_core_us),
                us(p.fill_submit_max_us),
                us(p.spin_p99_us),
                us(p.wake_p99_us),
                us(p.poll_p999_us),
                us(p.caller_cpu_us_per_transfer),
                p.complete_avg_us,
                p.complete_p99_us
            );
        }
        println!();
    }
    notify::print_table(&run.notify);
    overhead::print_table(&run.telemetry);
    if !run.registration.is_empty() {
        println!("add_remote_peer (median of 5)");
        println!("{:>10} {:>12} {:>12}", "backend", "blocks", "time");
        for r in &run.registration {
            println!("{:>10} {:>12} {:>10.1}us", r.backend, r.blocks, r.median_us);
        }
    }
    for s in &run.skipped {
        println!("\nskipped: {s}");
    }
}
