//! Notifications across processes: each backend listens on a Unix datagram socket in the
//! abstract namespace, named after its address (pid, start time, region token), and a thread
//! hands what arrives to the transport's inbox. A sender's datagram is delivered once the
//! kernel queued it on that socket; after `revoke` the socket is gone and a send fails.
//!
//! Same-process peers skip the socket: the copy thread hands the frame to the peer's inbox
//! directly (see [`crate::live::LiveRegion`]).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use blockwire_core::kit::{Delivery, Inbox};
use blockwire_core::{BackendError, BackendErrorKind, FailureReason, MAX_NAME_LEN};
use blockwire_core::{MAX_NOTIFICATION_LEN, kit::ProcessWatch};
use parking_lot::Mutex;

use crate::address::ShmAddress;

/// How long the listener waits for a datagram before it checks whether to stop, should the
/// socket's shutdown not wake it (`Listener::stop` shuts it down: on Linux a `recv` waiting
/// on it returns at once).
const LISTEN_TICK: Duration = Duration::from_millis(50);
/// How long a send may wait for room in the peer's socket buffer.
const SEND_WAIT: Duration = Duration::from_secs(1);
/// The largest frame: magic, name, length, message.
const MAX_FRAME: usize = 4 + 1 + MAX_NAME_LEN + 4 + MAX_NOTIFICATION_LEN;

/// The socket name of the backend at `addr`.
pub(crate) fn socket_addr(addr: &ShmAddress) -> io::Result<SocketAddr> {
    let name = format!(
        "blockwire-shm-{}-{}-{}",
        addr.pid, addr.start_time, addr.token
    );
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// This backend's listening socket and the thread that drains it into the inbox.
pub(crate) struct Listener {
    stop: Arc<AtomicBool>,
    /// The thread, and its socket to shut down: a close then waits microseconds for the
    /// thread, not the rest of a tick.
    thread: Mutex<Option<(JoinHandle<()>, UnixDatagram)>>,
}

impl Listener {
    /// Binds the socket for `addr` and starts the thread.
    pub(crate) fn start(addr: &ShmAddress, inbox: Inbox) -> Result<Self, BackendError> {
        let err = |what: &str, e: io::Error| BackendError::from_io(what, &e);
        let socket = socket_addr(addr)
            .and_then(|a| UnixDatagram::bind_addr(&a))
            .map_err(|e| err("binding the shm notification socket", e))?;
        socket
            .set_read_timeout(Some(LISTEN_TICK))
            .map_err(|e| err("setting the notification socket's timeout", e))?;
        let mine = socket
            .try_clone()
            .map_err(|e| err("cloning the notification socket", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = blockwire_core::kit::spawn("blockwire-shm-notify".into(), move || {
            listen(socket, inbox, flag)
        })
        .map_err(|e| err("spawning the notification thread", e))?;
        Ok(Listener {
            stop,
            thread: Mutex::new(Some((thread, mine))),
        })
    }

    /// Stops the thread and closes the socket (idempotent): later sends fail.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some((thread, socket)) = self.thread.lock().take() {
            // Wakes the thread's `recv` (it then sees `stop`); should it fail, the tick does.
            // Meanwhile a sender gets `EPIPE`; once both descriptors are closed, the name is
            // gone and a send is refused.
            if let Err(e) = socket.shutdown(std::net::Shutdown::Read) {
                tracing::debug!(error = %e, "shutting the notification socket down");
            }
            let _ = thread.join();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop();
    }
}

fn listen(socket: UnixDatagram, inbox: Inbox, stop: Arc<AtomicBool>) {
    // One byte more than the largest frame: a longer datagram shows as too long, not cut.
    let mut buf = vec![0u8; MAX_FRAME + 1];
    while !stop.load(Ordering::SeqCst) {
        match socket.recv(&mut buf) {
            // What a shut-down socket returns: `stop` wakes the thread so.
            Ok(0) if stop.load(Ordering::SeqCst) => {}
            Ok(n) => {
                inbox.deliver_frame(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::error!(error = %e, "shm notification socket failed; no more notifications arrive");
                return;
            }
        }
    }
}

/// How a connected peer in another process is notified.
pub(crate) struct Outlet {
    socket: UnixDatagram,
    peer: SocketAddr,
}

impl Outlet {
    pub(crate) fn new(addr: &ShmAddress) -> Result<Self, BackendError> {
        let err = |e: io::Error| BackendError::from_io("opening a notification socket", &e);
        let socket = UnixDatagram::unbound().map_err(err)?;
        socket.set_write_timeout(Some(SEND_WAIT)).map_err(err)?;
        Ok(Outlet {
            socket,
            peer: socket_addr(addr).map_err(err)?,
        })
    }

    /// Sends `frame` to the peer's socket (a copy thread calls this, never the caller's).
    pub(crate) fn send(&self, proc: &ProcessWatch, frame: &[u8]) -> Result<(), FailureReason> {
        if proc.has_exited() {
            return Err(FailureReason::RemoteDisconnect(format!(
                "process {} exited",
                proc.pid()
            )));
        }
        match self.socket.send_to_addr(frame, &self.peer) {
            Ok(n) if n == frame.len() => Ok(()),
            Ok(n) => Err(FailureReason::Backend(format!(
                "notification datagram cut to {n} of {} bytes",
                frame.len()
            ))),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::BrokenPipe
                ) =>
            {
                Err(FailureReason::RemoteDisconnect(format!(
                    "process {}: its notification socket is closed (its transport closed)",
                    proc.pid()
                )))
            }
            Err(e) => {
                let be = BackendError::from_io("sending a notification", &e);
                Err(match be.kind() {
                    BackendErrorKind::RemoteDisconnect => {
                        FailureReason::RemoteDisconnect(be.message().to_owned())
                    }
                    _ => FailureReason::Backend(be.message().to_owned()),
                })
            }
        }
    }
}

/// A same-process delivery's outcome, as a transfer's.
pub(crate) fn delivered(d: Delivery) -> Result<(), FailureReason> {
    match d {
        Delivery::Queued => Ok(()),
        Delivery::Full => Err(FailureReason::Backend(
            "the peer's notification inbox is full (nobody drains it)".into(),
        )),
        Delivery::Closed => Err(FailureReason::RemoteDisconnect(
            "the peer's transport closed".into(),
        )),
        _ => Err(FailureReason::Backend(
            "the peer refused the notification".into(),
        )),
    }
}
