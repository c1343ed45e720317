//! Per-peer figures: what the snapshot reports.

use std::collections::BTreeMap;
use std::time::Duration;

use blockwire_core::{PeerId, TransferRecord};
use hdrhistogram::Histogram;

/// Latency percentiles of a set of transfers (zero when there were none).
///
/// ```
/// let s = blockwire::LatencySummary::default();
/// assert_eq!(s.count, 0);
/// assert_eq!(s.p99, std::time::Duration::ZERO);
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// How many were measured.
    pub count: u64,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

/// One peer's figures since the transport opened (a removed peer's stay, under its id).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTelemetry {
    /// The peer.
    pub peer: PeerId,
    /// Transfers posted (standalone notifications included).
    pub transfers: u64,
    /// Reported done.
    pub done: u64,
    /// Reported failed, by [`FailureReason::label`](blockwire_core::FailureReason::label).
    pub failed: BTreeMap<&'static str, u64>,
    /// Taken by a cancel (never reported).
    pub cancelled: u64,
    /// Bytes of the transfers reported done.
    pub bytes: u64,
    /// Submit to report, of the transfers reported done.
    pub latency: LatencySummary,
    /// Time in the submit call, of every transfer posted.
    pub submit: LatencySummary,
}

impl PeerTelemetry {
    /// Failures of every reason together (see [`TelemetrySnapshot`]'s example).
    pub fn failures(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// Every peer's figures, sorted by peer: [`crate::Transport::telemetry`].
///
/// ```
/// use blockwire::{open, PeerId, Region, Transport, TransportOptions};
/// let a = open("shm", Region::new(4, 4096)?, TransportOptions::default().with_telemetry(true))?;
/// let b = open("shm", Region::new(4, 4096)?, TransportOptions::default())?;
/// let p = PeerId::from("b");
/// a.add_remote_peer(&p, &b.descriptor()?)?;
/// let id = a.write_blocks(&p, &[0, 1], &[2, 3])?;
/// let mut records = Vec::new();
/// while records.is_empty() {
///     records = a.poll(Some(&p))?.records; // with the poll result that reports the id
/// }
/// assert_eq!((records[0].id, records[0].blocks, records[0].bytes), (id, 2, 8192));
/// let snap = a.telemetry().expect("telemetry is on");
/// let peer = snap.peer(&p).expect("b's figures");
/// assert_eq!((peer.transfers, peer.done, peer.bytes), (1, 1, 8192));
/// assert_eq!((peer.latency.count, peer.failures()), (1, 0));
/// assert!(b.telemetry().is_none()); // off by default
/// # Ok::<(), blockwire::Error>(())
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TelemetrySnapshot {
    /// Per peer.
    pub peers: Vec<PeerTelemetry>,
}

impl TelemetrySnapshot {
    /// One peer's figures.
    pub fn peer(&self, peer: &PeerId) -> Option<&PeerTelemetry> {
        self.peers.iter().find(|p| &p.peer == peer)
    }
}

/// Microseconds, from 1 µs to an hour, two significant digits: about 30 KiB a histogram.
fn histogram() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).ok()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

fn summary(h: &Option<Histogram<u64>>) -> LatencySummary {
    let Some(h) = h else {
        return LatencySummary::default();
    };
    if h.is_empty() {
        return LatencySummary::default();
    }
    let at = |q: f64| Duration::from_micros(h.value_at_quantile(q));
    LatencySummary {
        count: h.len(),
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        max: Duration::from_micros(h.max()),
    }
}

/// One peer's running figures.
pub(super) struct PeerStats {
    transfers: u64,
    done: u64,
    failed: BTreeMap<&'static str, u64>,
    cancelled: u64,
    bytes: u64,
    latency: Option<Histogram<u64>>,
    submit: Option<Histogram<u64>>,
}

impl Default for PeerStats {
    fn default() -> Self {
        PeerStats {
            transfers: 0,
            done: 0,
            failed: BTreeMap::new(),
            cancelled: 0,
            bytes: 0,
            latency: histogram(),
            submit: histogram(),
        }
    }
}

impl PeerStats {
    pub(super) fn posted(&mut self, submit: Duration) {
        self.transfers += 1;
        if let Some(h) = self.submit.as_mut() {
            h.saturating_record(micros(submit));
        }
    }

    pub(super) fn reported(&mut self, record: &TransferRecord) {
        match &record.outcome {
            Ok(()) => {
                self.done += 1;
                self.bytes += record.bytes;
                if let Some(h) = self.latency.as_mut() {
                    h.saturating_record(micros(record.latency));
                }
            }
            Err(reason) => *self.failed.entry(reason.label()).or_default() += 1,
        }
    }

    pub(super) fn cancelled(&mut self) {
        self.cancelled += 1;
    }

    pub(super) fn summary(&self, peer: &PeerId) -> PeerTelemetry {
        PeerTelemetry {
            peer: peer.clone(),
            transfers: self.transfers,
            done: self.done,
            failed: self.failed.clone(),
            cancelled: self.cancelled,
            bytes: self.bytes,
            latency: summary(&self.latency),
            submit: summary(&self.submit),
        }
    }
}
