//! Notifications with NIXL's own mechanism (see the crate docs, "Notifications").
//!
//! - Sending: `genNotif` (nixl-sys `send_notification`) with the message alone (NIXL carries
//!   the sender's agent name, which is the transport's name), then a one-byte READ of the
//!   peer's block 0 into a scratch byte of this agent, the *probe*: the notification's
//!   transfer is done when the probe is.
//! - Receiving: `getNotifs` (nixl-sys `get_notifications`), by a thread of the backend and by
//!   [`blockwire_core::Backend::poll_notifications`], hands each (agent name, message) to the
//!   inbox, in NIXL's order.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use blockwire_core::kit::{Delivery, Inbox, ProgressThread};
use blockwire_core::{BackendError, BackendErrorKind, MAX_NOTIFICATION_LEN, name_problem};
use nixl_sys::{Agent, MemType, NotificationMap, XferDescList, XferOp, XferRequest};
use parking_lot::Mutex;

use crate::lock::AgentLock;
use crate::{Dram, Inner};

/// How long the receiving thread sleeps at most when nothing arrives.
const RECEIVE_IDLE: Duration = Duration::from_millis(2);

/// Bytes of the scratch buffer probes read into (one is used).
const SCRATCH_LEN: usize = 64;

/// Host memory, registered with the agent, that probes read into; nothing reads it. Freed
/// only after the agent is destroyed (see `NixlBackend::revoke`).
pub(crate) struct Scratch {
    ptr: NonNull<[u8]>,
}

impl Scratch {
    pub(crate) fn new() -> Self {
        let boxed: Box<[u8]> = vec![0u8; SCRATCH_LEN].into_boxed_slice();
        // Owned as a raw pointer from here on: NIXL writes into it behind Rust's back, so no
        // Rust reference to it may live while it is registered.
        Scratch {
            ptr: NonNull::from(Box::leak(boxed)),
        }
    }

    /// The memory, as NIXL registers it.
    pub(crate) fn dram(&self) -> Dram {
        Dram::new(self.ptr.cast::<u8>().as_ptr() as usize, SCRATCH_LEN)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Box::leak` of a boxed slice in `new` and is freed only
        // here, once; the owner drops the scratch only after the agent (and so every transfer
        // that could write into it) is gone.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

/// Sends `message` to the agent `remote` and posts the probe that tells it arrived: a READ of
/// the byte at `remote_addr` (the peer's block 0) into the scratch. `Ok((request, running))`.
pub(crate) fn send(
    inner: &Inner,
    remote: &str,
    remote_addr: usize,
    message: &[u8],
) -> Result<(XferRequest, bool), BackendError> {
    inner
        .agent
        .send_notification(remote, message, None)
        .map_err(|e| send_error(remote, "genNotif", e))?;
    let probe_err = |e| send_error(remote, "the probe after genNotif", e);
    let mut local = XferDescList::new(MemType::Dram).map_err(probe_err)?;
    local.add_desc(inner.scratch.dram().addr, 1, 0);
    let mut far = XferDescList::new(MemType::Dram).map_err(probe_err)?;
    far.add_desc(remote_addr, 1, 0);
    let request = inner
        .agent
        .create_xfer_req(XferOp::Read, &local, &far, remote, None)
        .map_err(probe_err)?;
    let running = inner
        .agent
        .post_xfer_req(&request, None)
        .map_err(probe_err)?;
    Ok((request, running))
}

/// A failed send: nixl-sys reports NIXL's `NIXL_ERR_REMOTE_DISCONNECT` (what NIXL returns,
/// and logs, for a peer whose agent is gone) as its generic backend error, like every other
/// code; for a connected peer that is what it means (measured: a destroyed agent, in this
/// process or a killed one, fails both calls at once), so it is a remote disconnect.
fn send_error(remote: &str, what: &str, e: nixl_sys::NixlError) -> BackendError {
    let kind = match e {
        nixl_sys::NixlError::BackendError | nixl_sys::NixlError::NotFound => {
            BackendErrorKind::RemoteDisconnect
        }
        _ => BackendErrorKind::Other,
    };
    BackendError::new(
        kind,
        format!("{what} to NIXL agent {remote:?} failed: {e} (NIXL logs its status)"),
    )
}

/// The receive side: hands what NIXL received to the inbox, one drain at a time (so two
/// drains cannot reorder one sender's notifications).
pub(crate) struct Receiver {
    inbox: Inbox,
    order: Mutex<()>,
    /// Notifications dropped as invalid (a name or length no blockwire sender produces).
    dropped: AtomicU64,
}

impl Receiver {
    pub(crate) fn new(inbox: Inbox) -> Self {
        Receiver {
            inbox,
            order: Mutex::new(()),
            dropped: AtomicU64::new(0),
        }
    }

    /// Starts the thread that drains NIXL into the inbox while nobody polls.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        inner: Arc<AgentLock>,
    ) -> std::io::Result<ProgressThread> {
        let me = self.clone();
        ProgressThread::spawn("nixl-notify", RECEIVE_IDLE, move || me.drain(&inner))
    }

    /// Takes what NIXL received (nothing once the agent is gone) and hands it to the inbox;
    /// returns how many notifications it handled.
    pub(crate) fn drain(&self, inner: &AgentLock) -> usize {
        let _order = self.order.lock();
        let map = {
            let guard = inner.lock();
            let Some(inner) = guard.as_ref() else {
                return 0;
            };
            match take(&inner.agent) {
                Ok(Some(map)) => map,
                Ok(None) => return 0,
                Err(e) => {
                    tracing::debug!(error = %e, "nixl get_notifications failed");
                    return 0;
                }
            }
        };
        self.deliver(&map)
    }

    fn deliver(&self, map: &NotificationMap) -> usize {
        let mut handled = 0;
        for agent in map.agents() {
            let sender = match agent {
                Ok(name) => name,
                Err(e) => {
                    self.drop_one("?", &format!("unreadable sender name ({e})"));
                    continue;
                }
            };
            let messages = match map.get_notifications(sender) {
                Ok(m) => m,
                Err(e) => {
                    self.drop_one(sender, &format!("unreadable notifications ({e})"));
                    continue;
                }
            };
            for message in messages {
                handled += 1;
                let message = match message {
                    Ok(m) => m,
                    Err(e) => {
                        self.drop_one(sender, &format!("unreadable message ({e})"));
                        continue;
                    }
                };
                if let Some(problem) = name_problem(sender) {
                    self.drop_one(sender, &problem);
                } else if message.len() > MAX_NOTIFICATION_LEN {
                    let why = format!("message of {} bytes", message.len());
                    self.drop_one(sender, &why);
                } else if self.inbox.deliver(sender, message) == Delivery::Closed {
                    tracing::trace!(sender, "notification after close discarded");
                }
            }
        }
        handled
    }

    /// Logs a dropped notification: the first, then every thousandth (a peer can send any
    /// name and length; the log must not flood).
    fn drop_one(&self, sender: &str, why: &str) {
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n % 1000 == 0 {
            tracing::warn!(
                sender,
                why,
                dropped = n,
                "invalid NIXL notification dropped"
            );
        }
    }
}

/// `getNotifs` into a fresh map (NIXL appends to the map it is given); `None` when empty.
fn take(agent: &Agent) -> Result<Option<NotificationMap>, nixl_sys::NixlError> {
    let mut map = NotificationMap::new()?;
    agent.get_notifications(&mut map, None)?;
    Ok((!map.is_empty()?).then_some(map))
}
