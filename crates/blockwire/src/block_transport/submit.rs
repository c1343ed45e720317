//! Submitting a transfer or a standalone notification: checked and tracked in the caller's
//! thread, then posted there or handed to the posting thread (`posting`).

use std::sync::atomic::Ordering;

use blockwire_core::{Backend, BlockIndex, Error, Op, PeerId, Result, TransferId, TransferKind};

use super::posting::{self, Handle, Work};
use super::tracked::Tracked;
use super::{BlockTransport, validate};
use crate::telemetry::Telemetry;

impl<B: Backend> BlockTransport<B> {
    pub(super) fn submit(
        &self,
        op: Op,
        peer: &PeerId,
        local: &[BlockIndex],
        remote: &[BlockIndex],
        message: Option<&[u8]>,
    ) -> Result<TransferId> {
        let s = &*self.shared;
        let started = s.telemetry.as_ref().map(|_| Telemetry::start());
        let _gate = s.open()?;
        let frame = message.map(|m| s.frame(m)).transpose()?;
        if op == Op::Read && !s.backend.capabilities().read {
            return Err(Error::Unsupported {
                backend: s.backend.kind(),
                what: "READ".into(),
            });
        }
        let conn = s.usable(peer)?;
        validate::check_indices(
            op,
            peer,
            local,
            remote,
            s.region.num_blocks(),
            conn.num_blocks,
        )?;
        let (handle, job, id) = match &self.posts {
            Some(_) => {
                let id = TransferId(s.next_id.fetch_add(1, Ordering::Relaxed));
                let work = Work::Transfer {
                    op,
                    local: local.to_vec(),
                    remote: remote.to_vec(),
                };
                let (handle, job) = posting::queue(id, conn.clone(), work);
                (handle, Some(job), id)
            }
            None => {
                let backend_peer = conn
                    .peer()
                    .ok_or_else(|| Error::UnknownPeer(peer.clone()))?;
                let xfer = s
                    .backend
                    .post(backend_peer, op, local, remote)
                    .map_err(|source| {
                        conn.refused(&source);
                        Error::Submit {
                            peer: peer.clone(),
                            op,
                            source,
                        }
                    })?;
                let id = TransferId(s.next_id.fetch_add(1, Ordering::Relaxed));
                (Handle::Posted(xfer), None, id)
            }
        };
        let notified = frame.is_some();
        let tracked = match frame {
            Some(frame) => Tracked::notified(handle, conn.clone(), frame),
            None => Tracked::new(handle, conn.clone()),
        };
        let probe = s.telemetry.as_ref().zip(started).map(|(tel, started)| {
            let blocks = u32::try_from(local.len()).unwrap_or(u32::MAX);
            let bytes = (local.len() as u64).saturating_mul(s.region.block_len() as u64);
            tel.posted(started, id, peer, op.into(), notified, blocks, bytes)
        });
        s.inflight.insert(peer, id, tracked.with_probe(probe));
        self.enqueue(job);
        if conn.is_retired() {
            // Removed while we posted: stop it like the transfers remove already saw.
            s.inflight.abort_peer(&s.backend, &conn);
        }
        // A transfer the backend finished inside the post rang before it was tracked: a
        // `poll_wait` in another thread that drained in between is woken to see it.
        s.doorbell.ring();
        tracing::trace!(
            transfer = %id,
            %peer,
            %op,
            blocks = local.len(),
            queued = self.posts.is_some(),
            "transfer submitted"
        );
        Ok(id)
    }

    /// A standalone notification: posted at once, tracked like a transfer.
    pub(super) fn submit_notification(&self, peer: &PeerId, message: &[u8]) -> Result<TransferId> {
        let s = &*self.shared;
        let started = s.telemetry.as_ref().map(|_| Telemetry::start());
        let _gate = s.open()?;
        let frame = s.frame(message)?;
        let conn = s.usable(peer)?;
        let (handle, job, id) = match &self.posts {
            Some(_) => {
                let id = TransferId(s.next_id.fetch_add(1, Ordering::Relaxed));
                let (handle, job) =
                    posting::queue(id, conn.clone(), Work::Notification(frame.clone()));
                (handle, Some(job), id)
            }
            None => {
                let backend_peer = conn
                    .peer()
                    .ok_or_else(|| Error::UnknownPeer(peer.clone()))?;
                let xfer = s.backend.notify(backend_peer, &frame).map_err(|source| {
                    conn.refused(&source);
                    Error::Notify {
                        peer: peer.clone(),
                        source,
                    }
                })?;
                let id = TransferId(s.next_id.fetch_add(1, Ordering::Relaxed));
                (Handle::Posted(xfer), None, id)
            }
        };
        let probe = s.telemetry.as_ref().zip(started).map(|(tel, started)| {
            tel.posted(started, id, peer, TransferKind::Notification, true, 0, 0)
        });
        s.inflight.insert(
            peer,
            id,
            Tracked::notification(handle, conn.clone()).with_probe(probe),
        );
        self.enqueue(job);
        if conn.is_retired() {
            s.inflight.abort_peer(&s.backend, &conn);
        }
        s.doorbell.ring();
        tracing::trace!(transfer = %id, %peer, len = message.len(), "notification submitted");
        Ok(id)
    }

    /// Hands a queued transfer (already tracked) to the posting thread.
    fn enqueue(&self, job: Option<posting::Job<B>>) {
        let (Some(job), Some(posts)) = (job, &self.posts) else {
            return;
        };
        if let Err(unsent) = posts.send(posting::Msg::Post(job)) {
            // The posting thread is gone (it only goes at close, which the gate excludes).
            if let posting::Msg::Post(job) = unsent.into_inner() {
                job.abandon("the posting thread is gone");
            }
        }
    }
}
