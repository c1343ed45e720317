//! Checks made before anything connects or moves.

use blockwire_core::{BlockIndex, Error, Op, PeerDescriptor, PeerId, Result};

/// A descriptor a peer sent: well formed, same backend, same block length, compatible
/// fingerprint.
pub(crate) fn check_descriptor(
    peer: &PeerId,
    desc: &PeerDescriptor,
    kind: &str,
    block_len: usize,
    fingerprint: &str,
) -> Result<()> {
    desc.validate()?;
    if desc.backend != kind {
        return Err(Error::BackendMismatch {
            peer: peer.clone(),
            local: kind.to_owned(),
            remote: desc.backend.clone(),
        });
    }
    if desc.block_len != block_len as u64 {
        return Err(Error::BlockLenMismatch {
            peer: peer.clone(),
            local: block_len as u64,
            remote: desc.block_len,
        });
    }
    if !fingerprint.is_empty() && !desc.fingerprint.is_empty() && desc.fingerprint != fingerprint {
        return Err(Error::FingerprintMismatch {
            peer: peer.clone(),
            local: fingerprint.to_owned(),
            remote: desc.fingerprint.clone(),
        });
    }
    Ok(())
}

/// Index lists of one transfer, against the local region and the peer's.
pub(crate) fn check_indices(
    op: Op,
    peer: &PeerId,
    local: &[BlockIndex],
    remote: &[BlockIndex],
    local_blocks: u32,
    remote_blocks: u32,
) -> Result<()> {
    if local.len() != remote.len() {
        return Err(Error::LengthMismatch {
            local: local.len(),
            remote: remote.len(),
        });
    }
    if local.is_empty() {
        return Err(Error::EmptyTransfer);
    }
    if let Some(&index) = local.iter().find(|&&i| i >= local_blocks) {
        return Err(Error::LocalIndexOutOfRange {
            index,
            num_blocks: local_blocks,
        });
    }
    if let Some(&index) = remote.iter().find(|&&i| i >= remote_blocks) {
        return Err(Error::RemoteIndexOutOfRange {
            peer: peer.clone(),
            index,
            num_blocks: remote_blocks,
        });
    }
    let destination = match op {
        Op::Write => remote,
        Op::Read => local,
    };
    if let Some(index) = first_repeat(destination) {
        return Err(Error::DuplicateDestination { op, index });
    }
    Ok(())
}

fn first_repeat(indices: &[BlockIndex]) -> Option<BlockIndex> {
    if indices.len() <= 32 {
        return indices
            .iter()
            .enumerate()
            .find(|(i, x)| indices[..*i].contains(x))
            .map(|(_, &x)| x);
    }
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_found_in_short_and_long_lists() {
        assert_eq!(first_repeat(&[1, 2, 3]), None);
        assert_eq!(first_repeat(&[1, 2, 1]), Some(1));
        let mut long: Vec<u32> = (0..100).collect();
        assert_eq!(first_repeat(&long), None);
        long.push(57);
        assert_eq!(first_repeat(&long), Some(57));
    }

    #[test]
    fn read_checks_local_destination() {
        let p = PeerId::from("p");
        assert!(check_indices(Op::Read, &p, &[0, 1], &[1, 1], 4, 4).is_ok());
        assert_eq!(
            check_indices(Op::Read, &p, &[1, 1], &[0, 1], 4, 4),
            Err(Error::DuplicateDestination {
                op: Op::Read,
                index: 1
            })
        );
        assert!(check_indices(Op::Write, &p, &[1, 1], &[0, 1], 4, 4).is_ok());
    }
}
