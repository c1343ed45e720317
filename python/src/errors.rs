//! Rust errors as the Python exception classes of `blockwire/errors.py`.
//!
//! Every class derives from `blockwire.Error`; each instance carries `kind` (a snake_case
//! name of what went wrong, one per Rust error variant) and the whole chain of causes in its
//! message (`Error::report`).

use blockwire::{BackendErrorKind, Error};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The Python class and `kind` of a Rust error.
fn class_and_kind(e: &Error) -> (&'static str, &'static str) {
    match e {
        Error::Closed => ("ClosedError", "closed"),
        Error::UnknownPeer(_) => ("UnknownPeerError", "unknown_peer"),
        Error::Superseded { .. } => ("SupersededError", "superseded"),
        Error::LengthMismatch { .. } => ("InvalidTransferError", "length_mismatch"),
        Error::EmptyTransfer => ("InvalidTransferError", "empty_transfer"),
        Error::LocalIndexOutOfRange { .. } => ("InvalidTransferError", "local_index_out_of_range"),
        Error::RemoteIndexOutOfRange { .. } => {
            ("InvalidTransferError", "remote_index_out_of_range")
        }
        Error::DuplicateDestination { .. } => ("InvalidTransferError", "duplicate_destination"),
        Error::NotificationTooLong { .. } => ("InvalidTransferError", "notification_too_long"),
        Error::Descriptor(_) => ("DescriptorError", "descriptor"),
        Error::BackendMismatch { .. } => ("BackendMismatchError", "backend_mismatch"),
        Error::BlockLenMismatch { .. } => ("BlockLenMismatchError", "block_len_mismatch"),
        Error::FingerprintMismatch { .. } => ("FingerprintMismatchError", "fingerprint_mismatch"),
        Error::Connect { source, .. } if source.kind() == BackendErrorKind::NameInUse => {
            ("NameInUseError", "name_in_use")
        }
        Error::Connect { .. } => ("ConnectError", "connect"),
        Error::PeerFaulted { .. } => ("PeerFaultedError", "peer_faulted"),
        Error::Submit { .. } => ("SubmitError", "submit"),
        Error::Notify { .. } => ("NotifyError", "notify"),
        Error::Unsupported { .. } => ("UnsupportedError", "unsupported"),
        Error::BadName(_) => ("BadNameError", "bad_name"),
        Error::UnknownBackend { .. } => ("UnknownBackendError", "unknown_backend"),
        Error::Open { .. } => ("OpenError", "open"),
        Error::Region(_) => ("RegionError", "region"),
        Error::Os { .. } => ("ResourceError", "os"),
        // A variant added later: still a `blockwire.Error`.
        _ => ("Error", "other"),
    }
}

/// An instance of `blockwire.errors.<class>(message, kind)`, as a `PyErr`.
pub(crate) fn raise(py: Python<'_>, class: &str, kind: &str, message: String) -> PyErr {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let built = MODULE
        .get_or_try_init(py, || py.import("blockwire.errors").map(Bound::unbind))
        .and_then(|m| m.bind(py).getattr(class))
        .and_then(|cls| cls.call1((message.clone(), kind)));
    match built {
        Ok(instance) => PyErr::from_value(instance),
        // The package's Python half is missing (the extension imported on its own).
        Err(e) => pyo3::exceptions::PyRuntimeError::new_err(format!(
            "{message} (and blockwire.errors.{class} is not importable: {e})"
        )),
    }
}

/// A Rust error as its Python exception.
pub(crate) fn to_py(e: Error) -> PyErr {
    let (class, kind) = class_and_kind(&e);
    Python::attach(|py| raise(py, class, kind, e.report()))
}

/// `Result<T, blockwire::Error>` to `PyResult<T>`.
pub(crate) trait IntoPy<T> {
    /// Maps the error to its Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for blockwire::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
