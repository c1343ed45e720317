//! libfabric error numbers as blockwire errors and failure reasons.

use blockwire_core::{BackendError, BackendErrorKind, FailureReason};
use libfabric_sys::*;

/// Whether `errnum` (positive) means the peer is gone.
pub(crate) fn is_disconnect(errnum: i32) -> bool {
    [
        libc::ECONNREFUSED,
        libc::ECONNRESET,
        libc::ECONNABORTED,
        libc::ENOTCONN,
        libc::EHOSTUNREACH,
        libc::ENETUNREACH,
        libc::ETIMEDOUT,
        libc::EPIPE,
        libc::ESHUTDOWN,
        libc::EIO,
    ]
    .contains(&errnum)
}

/// A failed call returning `-errnum`.
pub(crate) fn error(context: &str, ret: isize) -> BackendError {
    let errnum = i32::try_from(-ret).unwrap_or(i32::MAX);
    let kind = if is_disconnect(errnum) {
        BackendErrorKind::RemoteDisconnect
    } else {
        BackendErrorKind::Other
    };
    BackendError::new(kind, format!("{context}: {}", strerror(errnum)))
}

/// `Ok` for 0, the error otherwise.
pub(crate) fn check(context: &str, ret: i32) -> Result<(), BackendError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(error(context, ret as isize))
    }
}

/// A failed completion's reason, with the provider's own words. An operation the provider
/// cancelled (`FI_ECANCELED`) is a remote disconnect: blockwire never cancels operations
/// itself, and `ofi_rxm` cancels those of a connection that went away, with the provider's
/// error saying how (`ENOTCONN`, `ECONNRESET`, and `ENOENT` when a killed peer's connection
/// could not be set up again).
pub(crate) fn reason(errnum: i32, provider_message: &str) -> FailureReason {
    let message = format!("{} ({provider_message})", strerror(errnum));
    if is_disconnect(errnum) || errnum == libc::ECANCELED {
        FailureReason::RemoteDisconnect(message)
    } else {
        FailureReason::Backend(message)
    }
}

/// `FI_EAGAIN`, as the negative value calls return.
pub(crate) const EAGAIN: isize = -(FI_EAGAIN as isize);
/// `FI_EAVAIL`, as the negative value `fi_cq_read` returns.
pub(crate) const EAVAIL: isize = -(FI_EAVAIL as isize);
