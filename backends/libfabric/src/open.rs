//! Opening the backend: the provider an option names, the options read into the fabric's
//! settings, and the fabric opened over the region.

use std::time::Duration;

use blockwire_core::kit::LiveCounts;
use blockwire_core::{
    BackendError, BackendErrorKind, BackendOptions, DEFAULT_STALL_TIMEOUT, Error, OpenBackend,
    RegionSpan,
};
use parking_lot::Mutex;

use crate::fabric::{Fabric, Settings};
use crate::link::Links;
use crate::{KIND, OfiBackend, reap};

/// The longest `wait_spin_us`: a second (a spin longer than that is a polling thread; `wait=false`
/// is that).
const MAX_WAIT_SPIN: Duration = Duration::from_secs(1);

/// The provider a `provider` option names: `tcp` (and no option) is `tcp;ofi_rxm`; any other
/// name is itself.
///
/// `net` (libfabric 1.17; 1.18 merged it back into `tcp`) is the TCP provider's own RDM
/// endpoints, without `ofi_rxm`: for many peers. Adding one takes 46 to 214 us where
/// `tcp;ofi_rxm` takes 4 to 15 ms, and 16 peers of 19,599 blocks grew resident memory by 3 MiB
/// where `ofi_rxm` grew it by over 1 GiB (it preposts 4,096 receive buffers of 16 KiB per
/// endpoint, which RMA never uses); GB/s alike within noise at 4 transfers in flight. It is not
/// the default: one transfer at a time it took about 4 ms where `tcp;ofi_rxm` took 0.9 (16 x 64
/// KiB, with telemetry on; cause not found), and libfabric calls it a developmental fork. The
/// two do not interoperate: both sides need the same provider (a descriptor names it, and a
/// peer with another is refused).
///
/// ```
/// assert_eq!(blockwire_libfabric::provider_named(None), "tcp;ofi_rxm");
/// assert_eq!(blockwire_libfabric::provider_named(Some("tcp")), "tcp;ofi_rxm");
/// assert_eq!(blockwire_libfabric::provider_named(Some("net")), "net");
/// ```
pub fn provider_named(option: Option<&str>) -> String {
    match option {
        None | Some("tcp") => "tcp;ofi_rxm".to_owned(),
        Some(other) => other.to_owned(),
    }
}

impl OpenBackend for OfiBackend {
    const KIND: &'static str = KIND;

    /// Opens the backend over `span` with the options in the crate docs.
    ///
    /// # Safety
    ///
    /// The memory `span` describes must stay allocated until this backend, and every peer and
    /// transfer it made, has been dropped: the provider reads and writes it (and peers write
    /// into it) until then.
    ///
    /// ```
    /// use blockwire_core::{Backend, OpenBackend, BackendOptions, RegionSpan};
    /// let mut mem = vec![0u8; 2 * 512];
    /// let span = RegionSpan::new(std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap(), 2, 512).unwrap();
    /// // SAFETY: `mem` outlives the backend.
    /// let b = unsafe { blockwire_libfabric::OfiBackend::open(span, BackendOptions::new().with("provider", "shm"))? };
    /// assert_eq!(b.kind(), "libfabric");
    /// # Ok::<(), blockwire_core::Error>(())
    /// ```
    unsafe fn open(span: RegionSpan, mut options: BackendOptions) -> Result<Self, Error> {
        let open_err = Error::opening(KIND);
        let provider = provider_named(
            options
                .take::<String>("provider")
                .map_err(open_err)?
                .as_deref(),
        );
        let domain = options.take::<String>("domain").map_err(open_err)?;
        let idle_sleep = Duration::from_micros(
            options
                .take::<u64>("idle_sleep_us")
                .map_err(open_err)?
                .unwrap_or(0),
        );
        let wait = options
            .take::<bool>("wait")
            .map_err(open_err)?
            // shm: waiting slowed posts (submit 0.2 to 3 ms against 15 to 140 us polling)
            // for no gain in GB/s; tcp: waiting is what lets a passive target keep up.
            .unwrap_or(provider != "shm");
        let wait_spin = options
            .take_micros("wait_spin_us", MAX_WAIT_SPIN)
            .map_err(open_err)?
            .unwrap_or(Duration::ZERO);
        let endpoint_per_peer = options
            .take::<bool>("endpoint_per_peer")
            .map_err(open_err)?;
        let runs_per_op = options.take::<usize>("runs_per_op").map_err(open_err)?;
        if runs_per_op == Some(0) {
            return Err(open_err(BackendError::new(
                BackendErrorKind::InvalidOption,
                "runs_per_op must be at least 1",
            )));
        }
        let reap_stale_files = options
            .take::<bool>("reap_stale_files")
            .map_err(open_err)?
            .unwrap_or(true);
        // Half the stall timeout: a peer that refuses every post fails as a remote disconnect
        // (what it is) before the stall watchdog would cut it as merely stalled.
        // With no stall timeout, half the default one: such a peer is gone, and
        // `Capabilities::remote_disconnect` promises its transfers fail in bounded time.
        let give_up_after = options.stall_timeout().unwrap_or(DEFAULT_STALL_TIMEOUT) / 2;
        let inbox = options.inbox();
        let doorbell = options.doorbell();
        options.finish(KIND).map_err(open_err)?;
        let settings = Settings {
            give_up_after,
            provider,
            domain,
            idle_sleep,
            wait,
            wait_spin,
            endpoint_per_peer,
            inbox,
            runs_per_op,
        };
        if reap_stale_files && settings.provider == "shm" {
            // Files of processes that died without closing their endpoints (and one left by
            // an earlier process with this pid would make the provider refuse this endpoint).
            reap::at_open();
        }
        let fabric = Fabric::open(span, &settings).map_err(open_err)?;
        tracing::info!(attributes = %fabric.attributes, "libfabric backend opened");
        Ok(OfiBackend {
            opener: Mutex::new(None),
            span,
            fabric,
            counts: LiveCounts::default(),
            links: Links::default(),
            doorbell,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwire_core::BackendErrorKind;
    use std::ptr::NonNull;

    /// Two transports opened one after the other, over regions alike, register with keys of
    /// their own: a descriptor of the first names nothing in the second (`fresh_key`).
    #[test]
    fn each_registration_has_a_key_of_its_own() {
        for provider in ["tcp", "shm"] {
            let keys: Vec<(u64, bool)> = (0..3)
                .map(|_| {
                    let mut mem = vec![0u8; 2 * 512];
                    let span =
                        RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("mem"), 2, 512)
                            .expect("span");
                    let mut options = BackendOptions::new().with("provider", provider);
                    if provider == "tcp" {
                        options = options.with("domain", "lo");
                    }
                    // SAFETY: `mem` outlives the backend, dropped before it.
                    let b = unsafe { OfiBackend::open(span, options) }.expect("open");
                    let key = (b.fabric.key, b.attributes().contains("FI_MR_PROV_KEY"));
                    drop(b);
                    drop(mem);
                    key
                })
                .collect();
            assert!(
                keys.iter().all(|(_, prov)| !prov),
                "{provider}: the provider chose the keys: {keys:?}"
            );
            assert!(
                keys[0].0 != keys[1].0 && keys[1].0 != keys[2].0 && keys[0].0 != keys[2].0,
                "{provider}: keys {keys:?}"
            );
        }
    }

    /// Opens with `options` plus `key=ok` (accepted), then with `key=bad`: refused as an
    /// invalid option that names the key.
    fn accepts_then_refuses(options: BackendOptions, key: &str, ok: &str, bad: &str) {
        let mut mem = vec![0u8; 2 * 512];
        let span =
            RegionSpan::new(NonNull::new(mem.as_mut_ptr()).expect("mem"), 2, 512).expect("span");
        let open = |value: &str| {
            let options = options.clone().with(key, value);
            // SAFETY: `mem` outlives every backend opened here (each is dropped at once).
            unsafe { OfiBackend::open(span, options) }.map(drop)
        };
        assert!(open(ok).is_ok(), "{key}={ok}");
        let refused = open(bad).expect_err(bad);
        assert!(
            matches!(&refused, Error::Open { source, .. }
                if source.kind() == BackendErrorKind::InvalidOption
                    && source.message().contains(key)),
            "{}",
            refused.report()
        );
        drop(mem);
    }

    #[test]
    fn runs_per_op_of_zero_is_refused() {
        // More than the provider takes is its limit.
        let shm = BackendOptions::new().with("provider", "shm");
        accepts_then_refuses(shm, "runs_per_op", "1000", "0");
    }

    #[test]
    fn a_wait_spin_over_a_second_is_refused() {
        let tcp = BackendOptions::new()
            .with("provider", "tcp")
            .with("domain", "lo");
        accepts_then_refuses(tcp, "wait_spin_us", "1000000", "1000001");
    }
}
