//! The cost of a notification: the done-latency of the same transfer (`--batch` blocks of
//! `--notify-kib` KiB, depth 1) without a notification and with one, interleaved in one run
//! so that both see the same machine load, read from telemetry's records
//! ([`blockwire::PollResult::records`]).

use std::time::{Duration, Instant};

use blockwire::{Capabilities, Op, PeerId, Transport};
use serde::{Deserialize, Serialize};

use crate::measure::{Summary, WAIT_SLICE, shape};
use crate::remote::{PEER, Remote, initiator};
use crate::{Args, Backends, Res, Waiting};

/// The message each notified transfer carries.
const MESSAGE: &[u8] = b"blockwire-bench: done with these";

/// What a notification costs one backend and operation: plain against notified transfers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NotifyCost {
    /// Backend name.
    pub backend: String,
    /// `WRITE` or `READ`.
    pub op: String,
    /// Whether the remote transport ran in another process.
    pub cross_process: bool,
    /// Bytes per block.
    pub block_bytes: usize,
    /// Blocks per transfer.
    pub batch: u32,
    /// Bytes of each notification's message.
    pub message_bytes: usize,
    /// Transfers measured of each kind (after a warm-up, left out).
    pub iterations: usize,
    /// Average done-latency (submit to reported done) without a notification, µs.
    pub plain_avg_us: f64,
    /// Its median, µs.
    pub plain_p50_us: f64,
    /// Its 99th percentile, µs.
    pub plain_p99_us: f64,
    /// Average done-latency with a notification, µs.
    pub notified_avg_us: f64,
    /// Its median, µs.
    pub notified_p50_us: f64,
    /// Its 99th percentile, µs.
    pub notified_p99_us: f64,
    /// `notified_avg_us / plain_avg_us`: what a notification costs.
    pub ratio_avg: f64,
    /// `notified_p50_us / plain_p50_us` (the steadiest on a loaded machine).
    pub ratio_p50: f64,
    /// `notified_p99_us / plain_p99_us`.
    pub ratio_p99: f64,
    /// Notifications the target had drained by the end, of every one sent (warm-up
    /// included); `None` across processes, where the peer process drains them.
    pub drained: Option<u64>,
}

/// Why `op` of a backend with `caps` has no notification cost to measure, if it has none.
pub(crate) fn skip_reason(caps: &Capabilities, op: Op, args: &Args) -> Option<String> {
    if !caps.notifications {
        Some("no notifications (Capabilities::notifications is false)".into())
    } else {
        crate::measure::skip_reason(caps, op, args)
    }
}

/// Measures `--notify-iters` pairs of one plain and one notified `op` (the pair's order
/// alternates), after a tenth as many pairs of warm-up.
pub(crate) fn cost(backends: &dyn Backends, args: &Args, backend: &str, op: Op) -> Res<NotifyCost> {
    let iterations = args.notify_iters.unwrap_or(0).max(1);
    let mut shape = shape(args, op, args.notify_kib << 10, Duration::ZERO)?;
    shape.depth = 1;
    let remote = Remote::open(backends, args, backend, shape.blocks, shape.block)?;
    let options = args.options(backend)?.with_telemetry(true);
    let a = initiator(
        backends,
        args,
        backend,
        (shape.blocks, shape.block),
        options,
        &remote,
    )?;
    let peer = PeerId::from(PEER);
    let warm = (iterations / 10).max(3);
    let (mut plain, mut notified) = (Vec::new(), Vec::new());
    let mut drained = 0u64;
    for k in 0..warm + iterations {
        let order = if k % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for (j, notify) in order.into_iter().enumerate() {
            // Both kinds walk the same blocks, over a region larger than the cache.
            let idx = shape
                .layout
                .batch((2 * k + j) as u32, shape.batch, shape.blocks);
            let us = once(&*a, &peer, op, &idx, notify, args.waiting)?;
            if k >= warm {
                if notify { &mut notified } else { &mut plain }.push(us);
            }
            match remote.here() {
                Some(b) if notify => drained += b.notifications(None)?.len() as u64,
                _ => {}
            }
        }
    }
    let drained = match remote.here() {
        Some(b) => Some(drain_rest(b, drained, (warm + iterations) as u64)?),
        None => None,
    };
    a.close()?;
    drop((a, remote));
    let (p, n) = (Summary::of(plain), Summary::of(notified));
    Ok(NotifyCost {
        backend: backend.to_owned(),
        op: op.to_string(),
        cross_process: args.cross_process,
        block_bytes: shape.block,
        batch: shape.batch,
        message_bytes: MESSAGE.len(),
        iterations,
        plain_avg_us: p.avg,
        plain_p50_us: p.p50,
        plain_p99_us: p.p99,
        notified_avg_us: n.avg,
        notified_p50_us: n.p50,
        notified_p99_us: n.p99,
        ratio_avg: n.avg / p.avg,
        ratio_p50: n.p50 / p.p50,
        ratio_p99: n.p99 / p.p99,
        drained,
    })
}

/// One transfer, waited for as `--waiting` says until reported: its done-latency from its
/// telemetry record, µs.
fn once(
    a: &dyn Transport,
    peer: &PeerId,
    op: Op,
    idx: &[u32],
    notify: bool,
    waiting: Waiting,
) -> Res<f64> {
    let id = match (op, notify) {
        (Op::Write, false) => a.write_blocks(peer, idx, idx)?,
        (Op::Write, true) => a.write_blocks_notify(peer, idx, idx, MESSAGE)?,
        (_, false) => a.read_blocks(peer, idx, idx)?,
        (_, true) => a.read_blocks_notify(peer, idx, idx, MESSAGE)?,
    };
    let what = if notify { "notified " } else { "" };
    loop {
        let r = match waiting {
            Waiting::Wait => a.poll_wait(Some(peer), WAIT_SLICE)?,
            Waiting::Sleep => a.poll(Some(peer))?,
        };
        if let Some(record) = r.records.iter().find(|rec| rec.id == id) {
            if let Err(reason) = &record.outcome {
                return Err(format!("{what}{op} {id} failed: {reason}").into());
            }
            return Ok(record.latency.as_secs_f64() * 1e6);
        }
        if r.done.contains(&id) || r.failed.iter().any(|(f, _)| *f == id) {
            return Err(format!("{what}{op} {id} was reported without a telemetry record").into());
        }
        if let Some(fault) = r.peer_fault {
            return Err(format!("{what}{op} {id}: the peer is faulted: {fault:?}").into());
        }
        if waiting == Waiting::Sleep {
            // Leave the cores to the data path (copy and progress threads).
            std::thread::yield_now();
        }
    }
}

/// Drains the target until it has `sent` notifications in all, for up to a second (a backend
/// may report delivery once the notification is in the target's library, before its inbox).
fn drain_rest(b: &dyn Transport, mut drained: u64, sent: u64) -> Res<u64> {
    let deadline = Instant::now() + Duration::from_secs(1);
    while drained < sent && Instant::now() < deadline {
        drained += b.notifications(None)?.len() as u64;
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(drained)
}

/// Prints the notification-cost table.
pub(crate) fn print_table(rows: &[NotifyCost]) {
    if rows.is_empty() {
        return;
    }
    println!(
        "notification cost: done-latency (telemetry's records) of one transfer at depth 1, \
         plain and notified alternated; avg / p50 / p99, µs"
    );
    println!(
        "{:>10} {:>5} {:>4} {:>5} {:>5} {:>5} {:>20} {:>20} {:>17} {:>7}",
        "backend",
        "op",
        "peer",
        "block",
        "batch",
        "pairs",
        "plain",
        "notified",
        "notified/plain",
        "drained"
    );
    for r in rows {
        let drained = r.drained.map_or_else(|| "-".to_owned(), |d| d.to_string());
        println!(
            "{:>10} {:>5} {:>4} {:>4}K {:>5} {:>5} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>6.0} \
             {:>5.2} {:>5.2} {:>5.2} {:>7}",
            r.backend,
            r.op,
            if r.cross_process { "proc" } else { "here" },
            r.block_bytes >> 10,
            r.batch,
            r.iterations,
            r.plain_avg_us,
            r.plain_p50_us,
            r.plain_p99_us,
            r.notified_avg_us,
            r.notified_p50_us,
            r.notified_p99_us,
            r.ratio_avg,
            r.ratio_p50,
            r.ratio_p99,
            drained
        );
    }
    println!();
}

#[cfg(test)]
mod tests {
    use blockwire::{Capabilities, Op};

    use super::{cost, skip_reason};
    use crate::{TestShm, test_args};

    #[test]
    fn measures_plain_and_notified_in_one_process() {
        let args = test_args(&["--notify-iters=4", "--region-mib=2"]);
        for op in [Op::Write, Op::Read] {
            let c = cost(&TestShm, &args, "shm", op).expect("measured");
            assert_eq!((c.iterations, c.batch, c.block_bytes), (4, 16, 64 << 10));
            assert_eq!(
                c.drained,
                Some(3 + 4),
                "warm-up and measured, each drained once"
            );
            assert!(c.plain_avg_us > 0.0 && c.notified_avg_us > 0.0, "{c:?}");
            assert!(c.ratio_avg.is_finite() && c.ratio_p99.is_finite(), "{c:?}");
        }
    }

    #[test]
    fn a_backend_without_notifications_is_skipped_with_the_reason() {
        let args = test_args(&[]);
        let mut caps = Capabilities::default();
        caps.read = true;
        let why = skip_reason(&caps, Op::Write, &args).expect("skipped");
        assert!(why.contains("Capabilities::notifications"), "{why}");
        caps.notifications = true;
        assert_eq!(skip_reason(&caps, Op::Read, &args), None);
        caps.read = false;
        assert!(skip_reason(&caps, Op::Read, &args).is_some());
    }
}
