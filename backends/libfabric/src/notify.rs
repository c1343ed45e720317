//! Notifications ([`blockwire_core::Backend::notify`]): a libfabric message (`fi_sendmsg`) of
//! the frame to the peer's receiving endpoint, the one its descriptor names, where a pool of
//! posted receive buffers takes it (`crate::recv`) and the progress thread hands it to the
//! inbox. What the sender's completion means depends on the provider ([`Carrier`]).

use blockwire_core::{BackendError, BackendErrorKind};
use libfabric_sys::*;

use crate::fabric::Fabric;
use crate::post::RmaOp;
use crate::recv::MAX_FRAME;

/// How a notification's delivery is known, from what the provider granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// The send's own completion, with `FI_DELIVERY_COMPLETE`: `shm` honours it for messages
    /// (libfabric 1.17 sends them through its segmented or CMA protocol, completed when the
    /// target's progress has placed the bytes in a posted buffer or its unexpected queue).
    Send,
    /// The send, then a zero-length `fi_writemsg` with `FI_DELIVERY_COMPLETE` to the same
    /// peer, which the provider performs after the send (`FI_ORDER_WAS`): its completion means
    /// the target's provider took the message. For `tcp;ofi_rxm`, which drops
    /// `FI_DELIVERY_COMPLETE` from messages (1.17 completes an eager send once it is written
    /// into the socket, before the peer has read it) but honours it for RMA (the peer acks
    /// once the write is placed, and its connection reads in order).
    SendThenProbe,
}

impl Carrier {
    /// The carrier a provider's granted `info` allows, or `None`: no `FI_MSG`, or local
    /// registrations required (`FI_MR_LOCAL`, which the frames and receive buffers do not
    /// have). A provider other than `shm` without write-after-send ordering gets [`Carrier::Send`]
    /// (its completion means what that provider makes of `FI_DELIVERY_COMPLETE`).
    ///
    /// # Safety
    ///
    /// `info` is a live entry of an `fi_getinfo` list.
    pub(crate) unsafe fn of(info: *const fi_info, provider: &str) -> Option<Carrier> {
        // SAFETY: per this function's contract; the attribute structs of a returned entry are
        // allocated.
        let (caps, mr_mode, ordered) = unsafe {
            let info = &*info;
            let order = FI_ORDER_WAS as u64;
            let ordered = (*info.tx_attr).msg_order & order != 0
                && (info.rx_attr.is_null() || (*info.rx_attr).msg_order & order != 0);
            (info.caps, (*info.domain_attr).mr_mode as u32, ordered)
        };
        if caps & FI_MSG as u64 == 0 || mr_mode & FI_MR_LOCAL != 0 {
            return None;
        }
        Some(match (provider, ordered) {
            ("shm", _) | (_, false) => Carrier::Send,
            (_, true) => Carrier::SendThenProbe,
        })
    }

    /// In words, for the backend's attributes.
    pub(crate) fn describe(carrier: Option<Carrier>) -> &'static str {
        match carrier {
            None => "none",
            Some(Carrier::Send) => "send (delivery complete)",
            Some(Carrier::SendThenProbe) => "send, then a delivery-complete probe write",
        }
    }
}

/// The operations that carry `frame`: its send, and the probe where the carrier has one
/// (`probe`, a zero-length write at the start of the peer's region).
pub(crate) fn operations(
    fabric: &Fabric,
    frame: &[u8],
    probe: RmaOp,
) -> Result<Vec<RmaOp>, BackendError> {
    let Some(carrier) = fabric.carrier else {
        return Err(BackendError::new(
            BackendErrorKind::Unsupported,
            format!(
                "provider {} offers no messages this backend can use for notifications \
                 (FI_MSG without FI_MR_LOCAL)",
                fabric.provider
            ),
        ));
    };
    if frame.len() > MAX_FRAME {
        return Err(BackendError::other(format!(
            "a notification frame of {} bytes is longer than the receive buffers ({MAX_FRAME})",
            frame.len()
        )));
    }
    let mut ops = vec![RmaOp::send(frame.len())];
    if carrier == Carrier::SendThenProbe {
        ops.push(probe);
    }
    Ok(ops)
}
