//! The scale measurements of one backend (see the module above).

use std::time::{Duration, Instant};

use blockwire::{PeerId, TransferId, Transport};

use super::{CHURN_FULL, Counts, Scale};
use crate::measure::{Summary, avg_p99};
use crate::{Args, Backends, Res};

/// How long to wait for transfers before calling the backend stuck.
const PATIENCE: Duration = Duration::from_secs(60);
/// One-block WRITEs kept in flight per peer during the churn.
const CHURN_DEPTH: usize = 4;

/// Measures `backend` at the scale of `c`.
pub(crate) fn scale(backends: &dyn Backends, args: &Args, backend: &str, c: Counts) -> Res<Scale> {
    let open = || {
        backends.open(
            backend,
            c.blocks,
            c.block,
            args.options(backend)?,
            args.allocate,
        )
    };
    let remotes = (0..c.peers).map(|_| open()).collect::<Res<Vec<_>>>()?;
    let a = open()?;
    for i in 0..c.blocks {
        a.region().fill_block(i, pattern(i))?;
    }
    let descs = remotes
        .iter()
        .map(|r| r.descriptor())
        .collect::<Result<Vec<_>, _>>()?;
    let ids: Vec<PeerId> = (0..c.peers)
        .map(|i| PeerId::from(format!("peer-{i}")))
        .collect();

    let rss_before_peers_mib = rss_mib();
    let mut add_peer_us = Vec::with_capacity(c.peers);
    for (id, desc) in ids.iter().zip(&descs) {
        let t = Instant::now();
        a.add_remote_peer(id, desc)
            .map_err(|e| format!("add_remote_peer {id}: {e}"))?;
        add_peer_us.push(us(t));
    }
    let rss_after_peers_mib = rss_mib();
    for id in &ids {
        let x = a.write_blocks(id, &[0], &[0])?;
        wait(&*a, id, x)?;
    }
    let rss_after_traffic_mib = rss_mib();

    // The poll of the last peer, idle, then with finished transfers of the others tracked.
    let (quiet, others) = ids.split_last().ok_or("no peers")?;
    let poll_idle_ns = poll_ns(&*a, quiet)?;
    let tracked = track(&*a, others, &remotes, c)?;
    let poll_loaded_ns = poll_ns(&*a, quiet)?;
    drain(&*a, others, tracked)?;
    let poll_idle_again_ns = poll_ns(&*a, quiet)?;

    let (submits, completes) = big(&*a, &ids[0], c)?;
    let (big_submit_avg_us, big_submit_p99_us) = avg_p99(submits);
    let (big_complete_avg_us, big_complete_p99_us) = avg_p99(completes);

    churn(&*a, &ids, c.churn / 20)?;
    let rss_before_churn_mib = rss_mib();
    let secs = churn(&*a, &ids, c.churn)?;
    let rss_after_churn_mib = rss_mib();

    a.close()?;
    for r in &remotes {
        r.close()?;
    }
    let mut sorted = add_peer_us.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(Scale {
        backend: backend.to_owned(),
        options: settings(args, backend),
        peers: c.peers,
        blocks_per_peer: c.blocks,
        block_bytes: c.block,
        add_peer_median_us: Summary::of(add_peer_us.clone()).p50,
        add_peer_max_us: sorted.last().copied().unwrap_or(0.0),
        add_peer_us,
        rss_before_peers_mib,
        rss_after_peers_mib,
        rss_after_traffic_mib,
        tracked,
        poll_idle_ns,
        poll_loaded_ns,
        poll_idle_again_ns,
        poll_ratio: poll_loaded_ns / poll_idle_ns,
        big_blocks: c.big,
        big_transfers: c.big_transfers,
        big_submit_avg_us,
        big_submit_p99_us,
        big_complete_avg_us,
        big_complete_p99_us,
        churn_transfers: c.churn,
        churn_reduced: c.churn < CHURN_FULL,
        churn_per_sec: c.churn as f64 / secs,
        rss_before_churn_mib,
        rss_after_churn_mib,
    })
}

/// The byte local block `i` is filled with (never 0, the remote regions' initial byte).
fn pattern(i: u32) -> u8 {
    1 + (i % 251) as u8
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// `--opt` settings given for `backend`.
fn settings(args: &Args, backend: &str) -> Vec<String> {
    args.opts
        .iter()
        .filter_map(|o| o.strip_prefix(backend).and_then(|r| r.strip_prefix(':')))
        .map(str::to_owned)
        .collect()
}

/// Resident memory of this process, MiB (`VmRSS` of `/proc/self/status`).
pub(crate) fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Polls `peer` until `id` is reported done (an error if it fails or takes too long).
fn wait(a: &dyn Transport, peer: &PeerId, id: TransferId) -> Res<()> {
    let start = Instant::now();
    loop {
        let r = a.poll(Some(peer))?;
        if let Some((x, why)) = r.failed.first() {
            return Err(format!("transfer {x} to {peer} failed: {why}").into());
        }
        if r.done.contains(&id) {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("transfer {id} to {peer} not done after {PATIENCE:?}").into());
        }
        std::thread::yield_now();
    }
}

/// Median ns of one `poll(Some(peer))`, over rounds of many calls (nothing is in flight
/// to `peer`).
fn poll_ns(a: &dyn Transport, peer: &PeerId) -> Res<f64> {
    const ROUNDS: usize = 21;
    const CALLS: usize = 500;
    let mut per_call = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..CALLS {
            let r = a.poll(Some(peer))?;
            if !r.is_empty() {
                return Err(format!("{peer} was to be idle but reported {r:?}").into());
            }
        }
        per_call.push(t.elapsed().as_secs_f64() * 1e9 / CALLS as f64);
    }
    Ok(Summary::of(per_call).p50)
}

/// Posts `c.tracked` one-block WRITEs across `peers`, round robin, and waits until every
/// one has landed in its remote region (read there) without polling those peers, then a
/// little longer for the completions to reach the transport. Returns how many it posted.
fn track(
    a: &dyn Transport,
    peers: &[PeerId],
    remotes: &[Box<dyn Transport>],
    c: Counts,
) -> Res<usize> {
    if peers.is_empty() {
        return Ok(0);
    }
    let n = peers.len();
    // Transfer k writes local block k % blocks into block k / n of peer k % n.
    let dest = |k: usize| -> Res<(usize, u32, u32)> {
        let local = u32::try_from(k % c.blocks as usize)?;
        let remote = u32::try_from(k / n)?;
        Ok((k % n, local, remote))
    };
    if dest(c.tracked.saturating_sub(1))?.2 >= c.blocks {
        return Err(format!("{} transfers do not fit {n} peers", c.tracked).into());
    }
    for k in 0..c.tracked {
        let (p, local, remote) = dest(k)?;
        a.write_blocks(&peers[p], &[local], &[remote])?;
    }
    let mut block = vec![0u8; c.block];
    let start = Instant::now();
    let mut k = 0;
    while k < c.tracked {
        let (p, local, remote) = dest(k)?;
        remotes[p].region().read_block(remote, &mut block)?;
        if block.iter().all(|&b| b == pattern(local)) {
            k += 1;
        } else if start.elapsed() > PATIENCE {
            return Err(format!("{k} of {} tracked WRITEs landed in time", c.tracked).into());
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Landed is not yet reported: let the backend's completions arrive (acknowledgements
    // over TCP, for one).
    std::thread::sleep(Duration::from_millis(300));
    Ok(c.tracked)
}

/// Polls each of `peers` until `expected` transfers in all are reported done.
fn drain(a: &dyn Transport, peers: &[PeerId], expected: usize) -> Res<()> {
    let (mut done, start) = (0, Instant::now());
    while done < expected {
        let mut got = 0;
        for p in peers {
            let r = a.poll(Some(p))?;
            if let Some((x, why)) = r.failed.first() {
                return Err(format!("tracked transfer {x} to {p} failed: {why}").into());
            }
            got += r.done.len();
        }
        done += got;
        if got == 0 {
            if start.elapsed() > PATIENCE {
                return Err(format!("{done} of {expected} tracked transfers reported").into());
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// `c.big_transfers` WRITEs of `c.big` blocks (scattered over the remote region) to `peer`,
/// one at a time after one untimed: each submit and each completion time, µs.
fn big(a: &dyn Transport, peer: &PeerId, c: Counts) -> Res<(Vec<f64>, Vec<f64>)> {
    let big = c.big.min(c.blocks);
    let local: Vec<u32> = (0..big).collect();
    // A stride coprime with the region's blocks: distinct, scattered destinations.
    let stride = (5..).find(|s| gcd(*s, c.blocks) == 1).unwrap_or(1);
    let remote: Vec<u32> = (0..big)
        .map(|i| ((u64::from(i) * u64::from(stride)) % u64::from(c.blocks)) as u32)
        .collect();
    let (mut submits, mut completes) = (Vec::new(), Vec::new());
    for n in 0..=c.big_transfers {
        let t = Instant::now();
        let id = a.write_blocks(peer, &local, &remote)?;
        let submit = us(t);
        wait(a, peer, id)?;
        if n > 0 {
            submits.push(submit);
            completes.push(us(t));
        }
    }
    Ok((submits, completes))
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `n` one-block WRITEs over every peer, [`CHURN_DEPTH`] in flight to each, each peer
/// polled in turn: the seconds it took.
fn churn(a: &dyn Transport, peers: &[PeerId], n: u64) -> Res<f64> {
    let blocks = u64::from(a.num_blocks());
    let mut inflight = vec![0usize; peers.len()];
    let (mut posted, mut done) = (0u64, 0u64);
    let (start, mut last_progress) = (Instant::now(), Instant::now());
    while done < n {
        let mut got = 0;
        for (p, peer) in peers.iter().enumerate() {
            while inflight[p] < CHURN_DEPTH && posted < n {
                let b = u32::try_from(posted % blocks)?;
                a.write_blocks(peer, &[b], &[b])?;
                posted += 1;
                inflight[p] += 1;
            }
            let r = a.poll(Some(peer))?;
            if let Some((x, why)) = r.failed.first() {
                return Err(format!("churn transfer {x} to {peer} failed: {why}").into());
            }
            inflight[p] = inflight[p].saturating_sub(r.done.len());
            got += r.done.len();
        }
        done += got as u64;
        if got > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > PATIENCE {
            return Err(format!("churn stuck at {done} of {n} transfers").into());
        } else {
            std::thread::yield_now();
        }
    }
    Ok(start.elapsed().as_secs_f64())
}
