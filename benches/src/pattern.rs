//! The bytes a measurement's regions hold before it starts.

use blockwire::Region;

/// The role a region plays in a measurement, which picks the pattern its blocks hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The side that submits: its region is a WRITE's source and a READ's destination.
    Initiator,
    /// The peer's region.
    Remote,
}

impl Role {
    /// Block `i` holds the byte `i % modulus`.
    fn modulus(self) -> u32 {
        match self {
            Role::Initiator => 251,
            Role::Remote => 241,
        }
    }
}

/// Writes every block of `region` with `role`'s pattern, as every measurement does before
/// it starts: the transports' regions, and each raw baseline's ([`written_regions`]).
/// A region's pages are mapped lazily, and a copy out of pages never written reads one shared
/// zero page, which stays in the cache: a baseline that skipped this would copy from the
/// cache, not from memory, and flatter the library against blockwire.
///
/// ```
/// use blockwire_bench::{Role, write_pattern};
/// let region = blockwire::Region::new(4, 4096)?;
/// write_pattern(&region, Role::Remote)?;
/// let mut block = vec![0u8; 4096];
/// region.read_block(3, &mut block)?;
/// assert!(block.iter().all(|&b| b == 3));
/// # Ok::<(), blockwire::Error>(())
/// ```
pub fn write_pattern(region: &Region, role: Role) -> blockwire::Result<()> {
    let modulus = role.modulus();
    for i in 0..region.num_blocks() {
        // Below 251: fits a byte.
        region.fill_block(i, (i % modulus) as u8)?;
    }
    Ok(())
}

/// A raw baseline's two regions of `blocks` blocks of `block` bytes, made by `make`
/// ([`Region::new`], or [`Region::new_shared`] where the transports' are) and written as the
/// transports' are ([`write_pattern`]): the initiator's, then the remote side's.
///
/// ```
/// let (a, b) = blockwire_bench::written_regions(2, 4096, blockwire::Region::new)?;
/// assert_eq!((a.block(1)?[0], b.block(1)?[0]), (1, 1));
/// # Ok::<(), blockwire::Error>(())
/// ```
pub fn written_regions(
    blocks: u32,
    block: usize,
    make: fn(u32, usize) -> blockwire::Result<Region>,
) -> blockwire::Result<(Region, Region)> {
    let (initiator, remote) = (make(blocks, block)?, make(blocks, block)?);
    write_pattern(&initiator, Role::Initiator)?;
    write_pattern(&remote, Role::Remote)?;
    Ok((initiator, remote))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_holds_its_roles_byte() {
        let region = Region::new(300, 64).expect("region");
        for (role, modulus) in [(Role::Initiator, 251), (Role::Remote, 241)] {
            write_pattern(&region, role).expect("written");
            for i in [0, 1, 240, 241, 250, 251, 299] {
                let want = (i % modulus) as u8;
                let got = region.block(i).expect("block");
                assert!(got.iter().all(|&b| b == want), "{role:?} block {i}");
            }
        }
    }
}
