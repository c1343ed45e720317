//! Bad input gets a clear error, nothing moves and nothing stays tracked.

use blockwire::{CancelMode, Error, Op, Transport};
use blockwire_core::{PeerId, TransferId};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{check_blocks, connect, fill_all, open, pattern, poll_for, settle};

/// Opens a filled pair, runs `attempt` on `a` with peer `b`, and checks its error, that no
/// byte moved on either side and that nothing is tracked.
fn rejected<F: Fixture>(
    fx: &F,
    local_blocks: u32,
    remote_blocks: u32,
    expect: impl Fn(&Error) -> bool,
    attempt: impl Fn(&F::Transport, &PeerId) -> blockwire::Result<TransferId>,
) {
    let a = open(fx, &Spec::new(local_blocks, 4096)).transport;
    let b = open(fx, &Spec::new(remote_blocks, 4096)).transport;
    fill_all(&a, 1);
    fill_all(&b, 2);
    let peer = connect(&a, "b", &b);
    match attempt(&a, &peer) {
        Ok(_) => panic!("accepted what should be rejected"),
        Err(e) => assert!(expect(&e), "wrong error: {e:?}"),
    }
    settle();
    check_blocks(&b, "remote", |i| pattern(2, i, 4096));
    check_blocks(&a, "local", |i| pattern(1, i, 4096));
    let reported = poll_for(&a, None, std::time::Duration::from_millis(20));
    assert!(
        reported.is_empty(),
        "a rejected transfer was tracked: {reported:?}"
    );
    assert_eq!(
        a.backend_stats().live_transfers,
        0,
        "backend holds a transfer"
    );
}

fn submit<T: Transport>(
    op: Op,
    t: &T,
    p: &PeerId,
    local: &[u32],
    remote: &[u32],
) -> blockwire::Result<TransferId> {
    match op {
        Op::Write => t.write_blocks(p, local, remote),
        Op::Read => t.read_blocks(p, local, remote),
    }
}

/// Index lists of different lengths.
///
/// Rules: R-POST-CHECK.
pub(crate) fn length_mismatch<F: Fixture>(fx: &F) {
    rejected(
        fx,
        8,
        8,
        |e| {
            matches!(
                e,
                Error::LengthMismatch {
                    local: 2,
                    remote: 1
                }
            )
        },
        |a, p| a.write_blocks(p, &[0, 1], &[2]),
    );
}

/// Empty index lists are refused (a transfer of nothing gets no id), for WRITE and READ.
///
/// Rules: R-POST-CHECK.
pub(crate) fn empty_index_lists<F: Fixture>(fx: &F) {
    for op in [Op::Write, Op::Read] {
        rejected(
            fx,
            8,
            8,
            |e| *e == Error::EmptyTransfer,
            |a, p| submit(op, a, p, &[], &[]),
        );
    }
}

/// A local index past the local region.
///
/// Rules: R-POST-CHECK.
pub(crate) fn local_index_out_of_range<F: Fixture>(fx: &F) {
    rejected(
        fx,
        8,
        16,
        |e| {
            *e == Error::LocalIndexOutOfRange {
                index: 8,
                num_blocks: 8,
            }
        },
        |a, p| a.write_blocks(p, &[1, 8], &[1, 9]),
    );
}

/// A remote index checked against the peer's block count, not the local one.
///
/// Rules: R-POST-CHECK.
pub(crate) fn remote_index_out_of_range_of_peer<F: Fixture>(fx: &F) {
    rejected(
        fx,
        16,
        8,
        |e| {
            *e == Error::RemoteIndexOutOfRange {
                peer: "b".into(),
                index: 8,
                num_blocks: 8,
            }
        },
        |a, p| a.write_blocks(p, &[1, 2], &[7, 8]),
    );
    rejected(
        fx,
        16,
        8,
        |e| matches!(e, Error::RemoteIndexOutOfRange { index: 12, .. }),
        |a, p| submit(Op::Read, a, p, &[0], &[12]),
    );
}

/// The same remote block twice in one write.
///
/// Rules: R-POST-CHECK.
pub(crate) fn remote_block_twice_in_write<F: Fixture>(fx: &F) {
    rejected(
        fx,
        8,
        8,
        |e| {
            *e == Error::DuplicateDestination {
                op: Op::Write,
                index: 3,
            }
        },
        |a, p| a.write_blocks(p, &[0, 1, 2], &[3, 4, 3]),
    );
}

/// The same local block twice in one read.
///
/// Rules: R-POST-CHECK.
pub(crate) fn local_block_twice_in_read<F: Fixture>(fx: &F) {
    rejected(
        fx,
        8,
        8,
        |e| {
            *e == Error::DuplicateDestination {
                op: Op::Read,
                index: 5,
            }
        },
        |a, p| a.read_blocks(p, &[5, 5], &[0, 1]),
    );
}

/// A peer never added, and one removed.
///
/// Rules: R-POST-CHECK.
pub(crate) fn unknown_peer<F: Fixture>(fx: &F) {
    rejected(
        fx,
        8,
        8,
        |e| *e == Error::UnknownPeer("nobody".into()),
        |a, _| a.write_blocks(&"nobody".into(), &[0], &[0]),
    );
    rejected(
        fx,
        8,
        8,
        |e| *e == Error::UnknownPeer("b".into()),
        |a, p| {
            a.remove_remote_peer(p).expect("remove");
            a.write_blocks(p, &[0], &[0])
        },
    );
}

/// After close every call is `Err(Closed)`, and close itself stays `Ok`.
///
/// Rules: R-CLOSE.
pub(crate) fn every_call_after_close<F: Fixture>(fx: &F) {
    let spec = Spec::new(4, 4096);
    let a = open(fx, &spec).transport;
    let b = open(fx, &spec).transport;
    fill_all(&b, 2);
    let peer = connect(&a, "b", &b);
    let desc = b.descriptor().expect("descriptor");
    a.close().expect("close");
    assert!(a.is_closed());
    assert_eq!(a.descriptor(), Err(Error::Closed));
    assert_eq!(a.add_remote_peer(&"c".into(), &desc), Err(Error::Closed));
    assert_eq!(
        a.add_remote_peer_async(&"c".into(), &desc).wait(),
        Err(Error::Closed)
    );
    assert_eq!(a.remove_remote_peer(&peer), Err(Error::Closed));
    assert_eq!(a.write_blocks(&peer, &[0], &[0]), Err(Error::Closed));
    assert_eq!(a.read_blocks(&peer, &[0], &[0]), Err(Error::Closed));
    assert_eq!(a.poll(Some(&peer)), Err(Error::Closed));
    assert_eq!(a.poll(None), Err(Error::Closed));
    assert_eq!(
        a.cancel(&[TransferId(1)], CancelMode::Wait),
        Err(Error::Closed)
    );
    assert_eq!(a.close(), Ok(()));
    assert!(a.peers().is_empty());
    settle();
    check_blocks(&b, "remote", |i| pattern(2, i, 4096));
}
