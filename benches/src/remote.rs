//! The two sides of a measurement: the initiator, and the remote transport (here, or in a
//! spawned process with `--cross-process`).

use blockwire::{PeerDescriptor, PeerId, Transport, TransportOptions};

use crate::{Args, Backends, Res, Role, peer_process::BenchPeer, write_pattern};

/// The remote side of a measurement: a transport here, or one in a spawned process.
pub(crate) enum Remote {
    Here(Box<dyn Transport>),
    Process(BenchPeer),
}

impl Remote {
    /// Opens the remote side of `backend` (this run's options) over `blocks` blocks of
    /// `block` bytes: in a spawned process with `--cross-process`, else here.
    pub(crate) fn open(
        backends: &dyn Backends,
        args: &Args,
        backend: &str,
        blocks: u32,
        block: usize,
    ) -> Res<Self> {
        if args.cross_process {
            return Ok(Remote::Process(BenchPeer::spawn(
                args, backend, blocks, block,
            )?));
        }
        let b = backends.open(
            backend,
            blocks,
            block,
            args.options(backend)?,
            args.allocate,
        )?;
        write_pattern(b.region(), Role::Remote)?;
        Ok(Remote::Here(b))
    }

    /// Its descriptor, to add as a peer.
    pub(crate) fn descriptor(&self) -> Res<PeerDescriptor> {
        Ok(match self {
            Remote::Here(b) => b.descriptor()?,
            Remote::Process(p) => p.descriptor.clone(),
        })
    }

    /// The transport, when it is in this process.
    pub(crate) fn here(&self) -> Option<&dyn Transport> {
        match self {
            Remote::Here(b) => Some(&**b),
            Remote::Process(_) => None,
        }
    }
}

/// Opens the initiator of `backend` with `options` (filled with a pattern) and adds
/// `remote` as its peer [`PEER`].
pub(crate) fn initiator(
    backends: &dyn Backends,
    args: &Args,
    backend: &str,
    (blocks, block): (u32, usize),
    options: TransportOptions,
    remote: &Remote,
) -> Res<Box<dyn Transport>> {
    let a = backends.open(backend, blocks, block, options, args.allocate)?;
    write_pattern(a.region(), Role::Initiator)?;
    a.add_remote_peer(&PeerId::from(PEER), &remote.descriptor()?)?;
    Ok(a)
}

/// The initiator's id for the remote side.
pub(crate) const PEER: &str = "b";
