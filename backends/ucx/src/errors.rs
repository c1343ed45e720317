//! UCS status codes as blockwire errors and failure reasons.

use blockwire_core::{BackendError, BackendErrorKind, FailureReason};
use ucx_sys::*;

/// Whether `status` means the peer is gone (link or endpoint failure, reset, unreachable).
pub(crate) fn is_disconnect(status: ucs_status_t) -> bool {
    matches!(
        status,
        UCS_ERR_UNREACHABLE
            | UCS_ERR_CONNECTION_RESET
            | UCS_ERR_NOT_CONNECTED
            | UCS_ERR_REJECTED
            | UCS_ERR_ENDPOINT_TIMEOUT
            | UCS_ERR_CANCELED
    ) || (UCS_ERR_LAST_ENDPOINT_FAILURE..=UCS_ERR_FIRST_LINK_FAILURE).contains(&status)
}

/// A failed UCX call as a backend error.
pub(crate) fn error(context: &str, status: ucs_status_t) -> BackendError {
    let kind = if is_disconnect(status) {
        BackendErrorKind::RemoteDisconnect
    } else {
        BackendErrorKind::Other
    };
    BackendError::new(kind, format!("{context}: {}", status_string(status)))
}

/// A failed transfer's reason.
pub(crate) fn reason(context: &str, status: ucs_status_t) -> FailureReason {
    let message = format!("{context}: {}", status_string(status));
    if is_disconnect(status) {
        FailureReason::RemoteDisconnect(message)
    } else {
        FailureReason::Backend(message)
    }
}

/// `Ok` for `UCS_OK`, the error otherwise.
pub(crate) fn check(context: &str, status: ucs_status_t) -> Result<(), BackendError> {
    if status == UCS_OK {
        Ok(())
    } else {
        Err(error(context, status))
    }
}
