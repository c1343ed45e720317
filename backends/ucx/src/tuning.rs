//! UCX settings this backend applies beyond `tls` and `net_devices`: the TCP send segment.
//!
//! UCX 1.13 has no get over TCP: a READ is a request the target's worker answers with active
//! messages, each at most `UCX_TCP_TX_SEG_SIZE` (8 KiB by default) long. A 1 MiB block then
//! comes back as 128 messages, each a send and a receive through the kernel, and the copies
//! out of UCX's bounce buffers. With 64 KiB segments, measured on the development machine
//! (2-core AMD EPYC VM, loopback, 16 scattered blocks per transfer, 4 in flight, two runs each,
//! alternated): READ moved 2.5 to 3.3 GB/s from 256 KiB blocks against 1.1 to 1.2 with UCX's
//! default, and WRITE 1.3 to 2.9 against 0.7 to 1.2; 4 KiB blocks moved about the same.
//! 64 KiB is UCX's default receive segment (`UCX_TCP_RX_SEG_SIZE`), the most a peer with
//! UCX's defaults can receive in one message, so it is also the largest value this backend
//! accepts.

use blockwire_core::{BackendError, BackendErrorKind};

/// The TCP send segment this backend asks UCX for (option `tcp_seg_bytes`), unless
/// `UCX_TCP_TX_SEG_SIZE` is set in the environment (see [`tcp_tuning`]).
///
/// ```
/// assert_eq!(blockwire_ucx::DEFAULT_TCP_SEG_BYTES, 64 * 1024);
/// ```
pub const DEFAULT_TCP_SEG_BYTES: u64 = 64 * 1024;

/// The smallest `tcp_seg_bytes` accepted: UCX's own default.
const MIN_TCP_SEG_BYTES: u64 = 8 * 1024;

/// The name UCX 1.13 gives the TCP send segment in `ucp_config_modify`: the TCP transport's
/// own field name, without the `TCP_` of its environment variable (`TCP_TX_SEG_SIZE` is taken
/// but matches no transport's field: UCX warns at worker creation and leaves 8 KiB).
const TCP_SEG_KEY: &str = "TX_SEG_SIZE";

/// Whether a context with this `tls` (as `UCX_TLS`; `None`: UCX's default, every transport)
/// may open the TCP transport. UCX warns about a setting no transport used, so the segment is
/// set only where TCP may be used.
fn may_use_tcp(tls: Option<&str>) -> bool {
    let Some(tls) = tls else {
        return true;
    };
    match tls.strip_prefix('^') {
        // An exclusion list: every transport but those named.
        Some(excluded) => !excluded.split(',').any(|t| t.trim() == "tcp"),
        None => tls.split(',').any(|t| matches!(t.trim(), "tcp" | "all")),
    }
}

/// The `(key, value)` pairs for `ucp_config_modify` that this backend applies to a context
/// with transports `tls` and option `tcp_seg_bytes`: the TCP send segment, where TCP may be
/// used. With no option it is [`DEFAULT_TCP_SEG_BYTES`], unless `UCX_TCP_TX_SEG_SIZE` is set
/// in the environment, which then stands. For a program that drives UCX itself next to the
/// backend (the bench's raw baseline) and wants it configured alike.
///
/// ```
/// use blockwire_ucx::tcp_tuning;
/// let pairs = tcp_tuning(Some("tcp"), Some(32 * 1024))?;
/// assert_eq!(pairs, vec![("TX_SEG_SIZE", "32768".to_string())]);
/// assert!(tcp_tuning(Some("posix,cma,self"), None)?.is_empty());
/// assert!(tcp_tuning(Some("tcp"), Some(1 << 20)).is_err()); // above what peers receive
/// # Ok::<(), blockwire_core::BackendError>(())
/// ```
pub fn tcp_tuning(
    tls: Option<&str>,
    tcp_seg_bytes: Option<u64>,
) -> Result<Vec<(&'static str, String)>, BackendError> {
    if let Some(bytes) = tcp_seg_bytes
        && !(MIN_TCP_SEG_BYTES..=DEFAULT_TCP_SEG_BYTES).contains(&bytes)
    {
        return Err(BackendError::new(
            BackendErrorKind::InvalidOption,
            format!(
                "tcp_seg_bytes={bytes}: expected {MIN_TCP_SEG_BYTES} to {DEFAULT_TCP_SEG_BYTES} \
                 (a peer with UCX's defaults receives at most {DEFAULT_TCP_SEG_BYTES} bytes a \
                 message)"
            ),
        ));
    }
    let bytes = match tcp_seg_bytes {
        Some(bytes) => bytes,
        None if std::env::var_os("UCX_TCP_TX_SEG_SIZE").is_some() => return Ok(Vec::new()),
        None => DEFAULT_TCP_SEG_BYTES,
    };
    if !may_use_tcp(tls) {
        return Ok(Vec::new());
    }
    Ok(vec![(TCP_SEG_KEY, bytes.to_string())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_is_recognised_in_every_form_of_tls() {
        for (tls, tcp) in [
            (None, true),
            (Some("tcp"), true),
            (Some("all"), true),
            (Some("sm, tcp"), true),
            (Some("posix,cma,self"), false),
            (Some("^posix"), true),
            (Some("^tcp"), false),
            (Some("^posix,tcp"), false),
        ] {
            assert_eq!(may_use_tcp(tls), tcp, "{tls:?}");
        }
    }

    #[test]
    fn the_segment_is_bounded_and_only_set_for_tcp() {
        assert!(tcp_tuning(Some("tcp"), Some(MIN_TCP_SEG_BYTES - 1)).is_err());
        assert!(tcp_tuning(Some("tcp"), Some(DEFAULT_TCP_SEG_BYTES + 1)).is_err());
        // A bad value is refused even where TCP is not used: the option is wrong either way.
        assert!(tcp_tuning(Some("posix"), Some(1)).is_err());
        assert_eq!(
            tcp_tuning(None, Some(MIN_TCP_SEG_BYTES)).expect("in range"),
            vec![(TCP_SEG_KEY, "8192".to_string())]
        );
        assert!(
            tcp_tuning(Some("^tcp"), Some(16384))
                .expect("in range")
                .is_empty()
        );
    }
}
