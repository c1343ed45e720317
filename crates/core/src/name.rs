//! Names unique across hosts, for transports (and NIXL agents) nobody named.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A name no other call returns, on this host or another: `bw-<host>-<pid>-<n>-<random>`. The
/// host name (at most 32 plain bytes of it, for a human reading a log), the pid and a
/// process-wide count make it unique on the host, and 64 random bits (seeded from the OS)
/// unique across hosts, containers that share a pid and host name, and pid reuse. NIXL keys
/// remote agents by name (see the nixl backend), so a fleet of default-named transports never
/// collides.
///
/// ```
/// let (a, b) = (blockwire_core::unique_name(), blockwire_core::unique_name());
/// assert_ne!(a, b);
/// assert!(a.starts_with("bw-"));
/// assert!(blockwire_core::name_problem(&a).is_none());
/// ```
pub fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let random = random_u64();
    format!(
        "bw-{}-{}-{n}-{random:016x}",
        host_label(),
        std::process::id()
    )
}

/// 64 random bits, different at each call (but by chance). Not for secrets: std's
/// `RandomState` is seeded from the OS per process (and varies per instance), and a
/// process-wide count is hashed in, so no two calls of one process share them.
///
/// ```
/// assert_ne!(blockwire_core::kit::random_u64(), blockwire_core::kit::random_u64());
/// ```
pub fn random_u64() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// This host's name, as far as it is plain (`[A-Za-z0-9.-]`, at most 32 bytes); `host` when
/// the system gives none.
fn host_label() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what is passed; gethostname
    // writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let raw = if rc == 0 { &buf[..] } else { &[][..] };
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    let label: String = raw[..end]
        .iter()
        .map(|&b| b as char)
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
        .take(32)
        .collect();
    if label.is_empty() {
        "host".to_owned()
    } else {
        label
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unique_names_are_distinct_and_well_formed() {
        let a = super::unique_name();
        let b = super::unique_name();
        assert_ne!(a, b);
        assert!(a.starts_with("bw-"), "{a}");
        assert!(crate::name_problem(&a).is_none(), "{a}");
        let random = a.rsplit('-').next().unwrap_or_default();
        assert_eq!(random.len(), 16, "{a}");
        assert!(a.len() <= 3 + 32 + 1 + 10 + 1 + 20 + 1 + 16, "{a}");
    }
}
