//! Connecting to a peer's region: one of this process ([`ShmBackend::connect_local`]), or one
//! of another process ([`ShmBackend::connect_remote`]), checked against the [`Identity`]
//! record that process's backend keeps for it.

use std::sync::atomic::AtomicU64;

use blockwire_core::kit::ProcessWatch;
use blockwire_core::{BackendError, BackendErrorKind, PeerDescriptor};

use crate::ShmBackend;
use crate::address::ShmAddress;
use crate::copier::Target;
use crate::lease::PeerLease;
use crate::live::LiveRegion;
use crate::mapping::{NO_FD, PeerMapping};
use crate::notify;
use crate::process::{self, Piece};

/// The record a peer in another process reads at connect: a descriptor names a process and an
/// address, and only a process whose shm backend registered exactly that region holds this
/// record there. So a descriptor cannot point a writer at arbitrary memory of another process
/// of the same user, nor at a region that was closed. It also names the region's lease.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Identity {
    magic: u64,
    token: u64,
    base: u64,
    len: u64,
    /// The lease's file descriptor in the region's process.
    lease_fd: u64,
    /// The memfd the region lives in, in the region's process, or [`NO_FD`].
    region_fd: u64,
    /// The region's offset in that memfd.
    region_offset: u64,
}

/// [`Identity`] as its backend keeps it: the same layout, with a magic that `revoke` wipes
/// while other processes may read it.
#[repr(C)]
pub(crate) struct LiveIdentity {
    pub(crate) magic: AtomicU64,
    pub(crate) token: u64,
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) lease_fd: u64,
    pub(crate) region_fd: u64,
    pub(crate) region_offset: u64,
}

const _: () = assert!(std::mem::size_of::<LiveIdentity>() == std::mem::size_of::<Identity>());

pub(crate) const IDENTITY_MAGIC: u64 = u64::from_le_bytes(*b"BWSHMID3");

impl ShmBackend {
    pub(crate) fn connect_local(
        &self,
        desc: &PeerDescriptor,
        token: u64,
    ) -> Result<Target, BackendError> {
        let live = LiveRegion::lookup(token).ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::RemoteDisconnect,
                format!(
                    "region {token} of this process is no longer registered (its transport closed)"
                ),
            )
        })?;
        blockwire_core::RegisteredRegion::of(&live.span)
            .check(desc)
            .map_err(|e| {
                BackendError::new(e.kind(), format!("region {token} of this process: {e}"))
            })?;
        Ok(Target::Local(live))
    }

    pub(crate) fn connect_remote(
        &self,
        desc: &PeerDescriptor,
        addr: ShmAddress,
        region_len: usize,
    ) -> Result<Target, BackendError> {
        let proc = ProcessWatch::open(addr.pid, Some(addr.start_time))?;
        let context = |e: BackendError| {
            BackendError::new(
                e.kind(),
                format!("connecting to process {}: {}", addr.pid, e.message()),
            )
        };
        // Read the peer's identity record: a permission problem shows here, at connect, and a
        // descriptor that does not name a region registered in that process is refused.
        let mut found = Identity::default();
        let piece = Piece {
            local: &mut found as *mut Identity as usize,
            remote: usize::try_from(addr.identity).map_err(|_| {
                BackendError::new(BackendErrorKind::MalformedAddress, "identity address")
            })?,
            len: std::mem::size_of::<Identity>(),
        };
        // SAFETY: the only local piece is `found`, a live plain-data record on this stack of
        // exactly `len` bytes; any bytes are a valid `Identity`.
        unsafe { process::copy_pieces(&proc, &[piece], false) }.map_err(context)?;
        let expected = Identity {
            magic: IDENTITY_MAGIC,
            token: addr.token,
            base: desc.base_addr,
            len: region_len as u64,
            lease_fd: found.lease_fd,
            region_fd: found.region_fd,
            region_offset: found.region_offset,
        };
        if found != expected {
            return Err(context(BackendError::new(
                BackendErrorKind::MalformedAddress,
                format!(
                    "no registered shm region {} of {region_len} bytes at {:#x} there (closed, or \
                     the descriptor is wrong)",
                    addr.token, desc.base_addr
                ),
            )));
        }
        // And the first and last byte of the region itself.
        let base = usize::try_from(desc.base_addr)
            .map_err(|_| BackendError::new(BackendErrorKind::MalformedAddress, "base address"))?;
        let mut probe = [0u8; 1];
        for at in [base, base + region_len - 1] {
            let piece = Piece {
                local: probe.as_mut_ptr() as usize,
                remote: at,
                len: 1,
            };
            // SAFETY: the only local piece is `probe`, a live 1-byte buffer on this stack.
            unsafe { process::copy_pieces(&proc, &[piece], false) }.map_err(context)?;
        }
        let lease_fd = i32::try_from(found.lease_fd).map_err(|_| {
            context(BackendError::new(
                BackendErrorKind::MalformedAddress,
                "lease descriptor out of range",
            ))
        })?;
        let lease = PeerLease::attach(&proc, lease_fd).map_err(context)?;
        let outlet = notify::Outlet::new(&addr).map_err(context)?;
        let mapping = if self.map_peers && found.region_fd != NO_FD {
            Some(
                PeerMapping::attach(
                    &proc,
                    found.region_fd,
                    found.region_offset,
                    region_len,
                    base,
                )
                .map_err(context)?,
            )
        } else {
            None
        };
        Ok(Target::Remote {
            proc,
            lease,
            outlet,
            mapping,
        })
    }
}
