//! Errors: what a caller gets back, and what a backend reports.

use std::fmt;

use crate::{BlockIndex, DescriptorError, Op, PeerFault, PeerId};

/// Result with blockwire's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error a transport returns. `PartialEq` so tests can `assert_eq!` them.
///
/// An error that wraps another (a backend's, the OS's) says what was being done and keeps the
/// other as its [`source`](std::error::Error::source), never repeating it in its own message:
/// [`Error::report`] gives the whole chain in one line.
///
/// ```
/// use blockwire_core::{BackendError, BackendErrorKind, Error, Op, PeerId};
/// let e = Error::UnknownPeer(PeerId::from("p"));
/// assert_eq!(e.to_string(), "unknown peer \"p\"");
/// assert_eq!(Error::Closed, Error::Closed);
/// let refused = BackendError::new(BackendErrorKind::RemoteDisconnect, "the peer is gone");
/// let e = Error::Submit { peer: "p".into(), op: Op::Write, source: refused };
/// assert_eq!(e.to_string(), "submitting WRITE to peer \"p\"");
/// assert_eq!(e.report(), "submitting WRITE to peer \"p\": the peer is gone");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The transport was closed; every call after `close` returns this.
    #[error("transport is closed")]
    Closed,
    /// No peer of that id is published (never added, removed, or its registration failed).
    #[error("unknown peer {0:?}")]
    UnknownPeer(PeerId),
    /// An asynchronous registration lost the race: the peer was removed or registered again
    /// before this registration could publish. Its backend resources were released.
    #[error(
        "registration of peer {peer:?} was superseded (the peer was removed or registered again while connecting)"
    )]
    Superseded {
        /// The peer whose registration was discarded.
        peer: PeerId,
    },
    /// The local and remote index lists differ in length.
    #[error("index lists differ in length: {local} local, {remote} remote")]
    LengthMismatch {
        /// Length of the local list.
        local: usize,
        /// Length of the remote list.
        remote: usize,
    },
    /// Both index lists are empty. A transfer of no blocks is refused rather than given an id
    /// that would complete without moving anything.
    #[error("empty transfer: no block indices given")]
    EmptyTransfer,
    /// A local block index is not inside the local region.
    #[error("local block index {index} out of range: the local region has {num_blocks} blocks")]
    LocalIndexOutOfRange {
        /// The offending index.
        index: BlockIndex,
        /// Blocks in the local region.
        num_blocks: u32,
    },
    /// A remote block index is not inside the peer's region.
    #[error("remote block index {index} out of range: peer {peer:?} has {num_blocks} blocks")]
    RemoteIndexOutOfRange {
        /// The peer.
        peer: PeerId,
        /// The offending index.
        index: BlockIndex,
        /// Blocks in the peer's region.
        num_blocks: u32,
    },
    /// The same destination block appears twice in one transfer (remote for a WRITE, local for
    /// a READ): the result would depend on the order the backend happens to copy in.
    #[error("{op} names destination block {index} twice")]
    DuplicateDestination {
        /// The operation.
        op: Op,
        /// The repeated destination index.
        index: BlockIndex,
    },
    /// The peer's descriptor could not be decoded or is inconsistent.
    #[error("invalid peer descriptor")]
    Descriptor(#[from] DescriptorError),
    /// The peer's descriptor belongs to another backend.
    #[error("peer {peer:?} speaks backend {remote:?}, this transport speaks {local:?}")]
    BackendMismatch {
        /// The peer.
        peer: PeerId,
        /// This transport's backend kind.
        local: String,
        /// The descriptor's backend kind.
        remote: String,
    },
    /// The peer's blocks have another size.
    #[error("peer {peer:?} has blocks of {remote} bytes, this transport {local} bytes")]
    BlockLenMismatch {
        /// The peer.
        peer: PeerId,
        /// Local block length.
        local: u64,
        /// The peer's block length.
        remote: u64,
    },
    /// Both sides have a config fingerprint and they differ: their blocks do not mean the same.
    #[error("peer {peer:?} has config fingerprint {remote:?}, this transport {local:?}")]
    FingerprintMismatch {
        /// The peer.
        peer: PeerId,
        /// Local fingerprint.
        local: String,
        /// The peer's fingerprint.
        remote: String,
    },
    /// The backend could not connect to the peer.
    #[error("connecting to peer {peer:?}")]
    Connect {
        /// The peer.
        peer: PeerId,
        /// What the backend said.
        source: BackendError,
    },
    /// The transport judged the peer unusable (see [`PeerFault`]): posts to it are refused
    /// until it is removed or registered again. Nothing is tracked.
    #[error("peer {peer:?} is faulted: {fault}")]
    PeerFaulted {
        /// The peer.
        peer: PeerId,
        /// Why.
        fault: PeerFault,
    },
    /// The backend refused to post the transfer; nothing is tracked.
    #[error("submitting {op} to peer {peer:?}")]
    Submit {
        /// The peer.
        peer: PeerId,
        /// The operation.
        op: Op,
        /// What the backend said.
        source: BackendError,
    },
    /// The backend refused to post a standalone notification; nothing is tracked.
    #[error("notifying peer {peer:?}")]
    Notify {
        /// The peer.
        peer: PeerId,
        /// What the backend said.
        source: BackendError,
    },
    /// The backend does not support this operation (see its capabilities).
    #[error("backend {backend} does not support {what}")]
    Unsupported {
        /// Backend kind.
        backend: &'static str,
        /// What was asked for.
        what: String,
    },
    /// A notification's message is longer than [`crate::MAX_NOTIFICATION_LEN`]; nothing moved.
    #[error("a notification message of {len} bytes exceeds the limit of {max}")]
    NotificationTooLong {
        /// The message's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The transport name given is not acceptable (see [`crate::name_problem`]).
    #[error("transport name: {0}")]
    BadName(String),
    /// No backend of that name exists.
    #[error("unknown backend {name:?}; compiled in: {available}")]
    UnknownBackend {
        /// The name asked for.
        name: String,
        /// The backends this build has.
        available: String,
    },
    /// Opening the backend failed.
    #[error("opening backend {kind}")]
    Open {
        /// Backend kind.
        kind: String,
        /// What the backend said.
        source: BackendError,
    },
    /// A region could not be made or accessed as asked.
    #[error("region: {0}")]
    Region(String),
    /// The operating system refused a resource the transport needs (a thread).
    #[error("{what}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The system's error.
        source: OsError,
    },
}

impl Error {
    /// Wraps a backend's error while opening backend `kind` ([`Error::Open`]): for
    /// `map_err` in an `OpenBackend::open`.
    ///
    /// ```
    /// use blockwire_core::{BackendError, Error};
    /// let e = Err::<(), _>(BackendError::other("no device")).map_err(Error::opening("ucx"));
    /// assert_eq!(e.unwrap_err().report(), "opening backend ucx: no device");
    /// ```
    pub fn opening(kind: &str) -> impl Fn(BackendError) -> Error + Copy + '_ {
        move |source| Error::Open {
            kind: kind.to_owned(),
            source,
        }
    }

    /// The error and each of its sources, joined by `": "`: one line for a log or a message.
    ///
    /// ```
    /// use blockwire_core::{BackendError, Error};
    /// let e = Error::Open { kind: "ucx".into(), source: BackendError::other("no such device") };
    /// assert_eq!(e.report(), "opening backend ucx: no such device");
    /// ```
    pub fn report(&self) -> String {
        report_chain(self)
    }
}

/// Any error and each of its sources, joined by `": "` (what [`Error::report`] gives for the
/// library's own errors).
///
/// ```
/// let e = std::io::Error::other("disk gone");
/// assert_eq!(blockwire_core::report_chain(&e), "disk gone");
/// ```
pub fn report_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        line.push_str(": ");
        line.push_str(&e.to_string());
        source = e.source();
    }
    line
}

/// An [`std::io::Error`] the operating system returned, kept whole (its kind and errno), and
/// cheap to clone so that [`Error`] stays `Clone`. Two are equal when their kind and errno
/// are.
///
/// ```
/// use blockwire_core::{Error, OsError};
/// let e = Error::Os { what: "spawning a thread", source: std::io::Error::from_raw_os_error(libc::EAGAIN).into() };
/// assert_eq!(e.to_string(), "spawning a thread");
/// let Error::Os { source, .. } = &e else { unreachable!() };
/// assert_eq!(source.io().raw_os_error(), Some(libc::EAGAIN));
/// # let _: &OsError = source;
/// ```
#[derive(Debug, Clone)]
pub struct OsError(std::sync::Arc<std::io::Error>);

impl OsError {
    /// The error itself.
    ///
    /// ```
    /// let e = blockwire_core::OsError::from(std::io::Error::other("x"));
    /// assert_eq!(e.io().kind(), std::io::ErrorKind::Other);
    /// ```
    pub fn io(&self) -> &std::io::Error {
        &self.0
    }
}

impl From<std::io::Error> for OsError {
    fn from(e: std::io::Error) -> Self {
        OsError(std::sync::Arc::new(e))
    }
}

impl PartialEq for OsError {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.raw_os_error() == other.0.raw_os_error()
    }
}

impl Eq for OsError {}

impl fmt::Display for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for OsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The class of a [`BackendError`], for callers and the generic layer to act on.
///
/// ```
/// use blockwire_core::BackendErrorKind;
/// assert_ne!(BackendErrorKind::RemoteDisconnect, BackendErrorKind::Other);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendErrorKind {
    /// The backend address in a descriptor could not be parsed or does not resolve.
    MalformedAddress,
    /// The peer is gone (process exited, region deregistered, link down).
    RemoteDisconnect,
    /// The operating system refused access (permissions, ptrace policy).
    PermissionDenied,
    /// An option was invalid.
    InvalidOption,
    /// The backend cannot do this.
    Unsupported,
    /// The peer's name is already taken here: it is this transport's own name, or that of
    /// another connected peer (with other connection data). A backend whose library keys
    /// peers by name (NIXL keys remote agents by agent name) cannot hold both, so the peer
    /// is refused at connect; a peer that restarted under its old name is added again once
    /// its former registration is removed.
    ///
    /// ```
    /// use blockwire_core::{BackendError, BackendErrorKind, Error};
    /// let e = Error::Connect {
    ///     peer: "decode-1".into(),
    ///     source: BackendError::new(BackendErrorKind::NameInUse, "agent \"decode\" is loaded"),
    /// };
    /// assert!(matches!(&e, Error::Connect { source, .. } if source.kind() == BackendErrorKind::NameInUse));
    /// ```
    NameInUse,
    /// Anything else the library reported.
    Other,
}

/// An error reported by a backend, with its class and the library's own words.
///
/// ```
/// use blockwire_core::{BackendError, BackendErrorKind};
/// let e = BackendError::new(BackendErrorKind::RemoteDisconnect, "process 42 exited");
/// assert_eq!(e.kind(), BackendErrorKind::RemoteDisconnect);
/// assert_eq!(e.to_string(), "process 42 exited");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    kind: BackendErrorKind,
    message: String,
}

impl BackendError {
    /// A new error of `kind` with a message.
    ///
    /// ```
    /// # use blockwire_core::{BackendError, BackendErrorKind};
    /// let e = BackendError::new(BackendErrorKind::Other, "boom");
    /// assert_eq!(e.message(), "boom");
    /// ```
    pub fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        BackendError {
            kind,
            message: message.into(),
        }
    }

    /// A [`BackendErrorKind::Other`] error.
    ///
    /// ```
    /// # use blockwire_core::{BackendError, BackendErrorKind};
    /// assert_eq!(BackendError::other("x").kind(), BackendErrorKind::Other);
    /// ```
    pub fn other(message: impl Into<String>) -> Self {
        Self::new(BackendErrorKind::Other, message)
    }

    /// An error from an OS call, classed by its errno (`ESRCH` is a remote disconnect,
    /// `EPERM`/`EACCES` a permission error).
    ///
    /// ```
    /// # use blockwire_core::{BackendError, BackendErrorKind};
    /// let io = std::io::Error::from_raw_os_error(libc::EPERM);
    /// let e = BackendError::from_io("reading peer memory", &io);
    /// assert_eq!(e.kind(), BackendErrorKind::PermissionDenied);
    /// assert!(e.message().starts_with("reading peer memory: "));
    /// ```
    pub fn from_io(context: &str, err: &std::io::Error) -> Self {
        let kind = match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => BackendErrorKind::PermissionDenied,
            Some(libc::ESRCH) => BackendErrorKind::RemoteDisconnect,
            _ => BackendErrorKind::Other,
        };
        Self::new(kind, format!("{context}: {err}"))
    }

    /// The class of the error.
    ///
    /// ```
    /// # use blockwire_core::{BackendError, BackendErrorKind};
    /// assert_eq!(BackendError::other("x").kind(), BackendErrorKind::Other);
    /// ```
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }

    /// The message, in the library's own words.
    ///
    /// ```
    /// # use blockwire_core::BackendError;
    /// assert_eq!(BackendError::other("why").message(), "why");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {}
