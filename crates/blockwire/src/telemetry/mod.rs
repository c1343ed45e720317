//! Telemetry per transfer and per peer (`TransportOptions::telemetry`): off by default, and
//! then free (no clock read, nothing recorded, no span made).
//!
//! When on, each transfer carries a probe from its submit call to the poll that reports it:
//!
//! - the poll result carries its [`TransferRecord`] (peer, kind, blocks, bytes, time in the
//!   submit call, time until reported, outcome);
//! - [`crate::Transport::telemetry`] gives a [`TelemetrySnapshot`]: per peer, counters
//!   (transfers, done, failed by reason, cancelled, bytes) and latency percentiles;
//! - the same figures go to the [`metrics`] facade, so any exporter (Prometheus, StatsD)
//!   installed by the application shows them (names below);
//! - each transfer has a `tracing` span, `transfer`, at debug level, with events when it is
//!   posted, when its notification is posted, and when it is reported.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `blockwire_transfers_total` | counter | `backend`, `peer`, `kind`, `outcome` | transfers reported (`outcome`: `done`, a failure's label, or `cancelled`) |
//! | `blockwire_transfer_bytes_total` | counter | `backend`, `peer`, `kind` | bytes of transfers reported done |
//! | `blockwire_transfer_seconds` | histogram | `backend`, `peer`, `kind` | submit to report, of transfers reported done |
//! | `blockwire_submit_seconds` | histogram | `backend`, `kind` | time spent in the submit call |
//!
//! `kind` is `write`, `read` or `notification` (standalone); `outcome` labels are
//! [`FailureReason::label`](blockwire_core::FailureReason::label)'s.

mod snapshot;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blockwire_core::{FailureReason, PeerId, TransferId, TransferKind, TransferRecord};
use parking_lot::Mutex;

use snapshot::PeerStats;
pub use snapshot::{LatencySummary, PeerTelemetry, TelemetrySnapshot};

/// The metric names (see the module docs).
pub mod names {
    /// Counter: transfers reported, by backend, peer, kind and outcome.
    pub const TRANSFERS: &str = "blockwire_transfers_total";
    /// Counter: bytes of transfers reported done.
    pub const BYTES: &str = "blockwire_transfer_bytes_total";
    /// Histogram (seconds): submit to report, of transfers reported done.
    pub const LATENCY: &str = "blockwire_transfer_seconds";
    /// Histogram (seconds): time in the submit call.
    pub const SUBMIT: &str = "blockwire_submit_seconds";
}

/// What one transfer carries while telemetry is on.
pub(crate) struct Probe {
    started: Instant,
    submit: Duration,
    kind: TransferKind,
    notified: bool,
    blocks: u32,
    bytes: u64,
    span: tracing::Span,
}

impl Probe {
    /// The span of the transfer (events about it go there).
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }
}

/// A transport's telemetry.
pub(crate) struct Telemetry {
    backend: &'static str,
    peers: Mutex<HashMap<PeerId, PeerStats>>,
}

impl Telemetry {
    pub(crate) fn new(backend: &'static str) -> Self {
        Telemetry {
            backend,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The clock reading at a submit call's entry.
    pub(crate) fn start() -> Instant {
        Instant::now()
    }

    /// A transfer was posted (its submit call began at `started`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn posted(
        &self,
        started: Instant,
        id: TransferId,
        peer: &PeerId,
        kind: TransferKind,
        notified: bool,
        blocks: u32,
        bytes: u64,
    ) -> Probe {
        let submit = started.elapsed();
        let span = tracing::debug_span!(
            "transfer",
            id = id.0,
            %peer,
            kind = kind.as_str(),
            blocks,
            notified
        );
        tracing::debug!(parent: &span, submit_us = submit.as_micros() as u64, "posted");
        metrics::histogram!(names::SUBMIT, "backend" => self.backend, "kind" => kind.as_str())
            .record(submit.as_secs_f64());
        self.peers
            .lock()
            .entry(peer.clone())
            .or_default()
            .posted(submit);
        Probe {
            started,
            submit,
            kind,
            notified,
            blocks,
            bytes,
            span,
        }
    }

    /// A poll reported the transfer: its record.
    pub(crate) fn reported(
        &self,
        id: TransferId,
        peer: &PeerId,
        probe: Probe,
        outcome: Result<(), FailureReason>,
    ) -> TransferRecord {
        let latency = probe.started.elapsed();
        let record = TransferRecord {
            id,
            peer: peer.clone(),
            kind: probe.kind,
            notified: probe.notified,
            blocks: probe.blocks,
            bytes: probe.bytes,
            submit: probe.submit,
            latency,
            outcome,
        };
        let label = record.outcome_label();
        tracing::debug!(
            parent: &probe.span,
            outcome = label,
            latency_us = latency.as_micros() as u64,
            "reported"
        );
        let peer_label = peer.to_string();
        let kind = probe.kind.as_str();
        metrics::counter!(names::TRANSFERS, "backend" => self.backend, "peer" => peer_label.clone(),
            "kind" => kind, "outcome" => label)
        .increment(1);
        if record.outcome.is_ok() {
            metrics::counter!(names::BYTES, "backend" => self.backend, "peer" => peer_label.clone(),
                "kind" => kind)
            .increment(record.bytes);
            metrics::histogram!(names::LATENCY, "backend" => self.backend, "peer" => peer_label,
                "kind" => kind)
            .record(latency.as_secs_f64());
        }
        self.peers
            .lock()
            .entry(peer.clone())
            .or_default()
            .reported(&record);
        record
    }

    /// A cancel took the transfer: it is never reported.
    pub(crate) fn cancelled(&self, peer: &PeerId, probe: Probe) {
        tracing::debug!(parent: &probe.span, "cancelled");
        metrics::counter!(names::TRANSFERS, "backend" => self.backend, "peer" => peer.to_string(),
            "kind" => probe.kind.as_str(), "outcome" => "cancelled")
        .increment(1);
        self.peers
            .lock()
            .entry(peer.clone())
            .or_default()
            .cancelled();
    }

    /// Every peer's figures so far.
    pub(crate) fn snapshot(&self) -> TelemetrySnapshot {
        let peers = self.peers.lock();
        let mut out: Vec<PeerTelemetry> = peers.iter().map(|(p, s)| s.summary(p)).collect();
        out.sort_by(|a, b| a.peer.cmp(&b.peer));
        TelemetrySnapshot { peers: out }
    }
}
