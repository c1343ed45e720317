//! The model on its own: no transport, only actions in and expectations out.

use blockwire_core::{CancelMode, Error, FailureReason, Op, PollResult, TransferId};

use super::super::Setup;
use super::super::action::{Action, Defect};
use super::super::expected::{Call, Planned, Then};
use super::Model;

fn model() -> Model {
    Model::new(&Setup::new(16, 64))
}

/// Applies a transfer the model must accept and tracks it as `id`.
fn post(m: &mut Model, peer: u8, id: u64) -> Planned {
    let expected = m.apply(&Action::Transfer {
        op: Op::Write,
        peer,
        blocks: 2,
        pick: 5,
    });
    let Then::Posted { planned, .. } = expected.then else {
        panic!("expected a post, got {:?}", expected.then);
    };
    m.track(TransferId(id), planned.clone())
        .expect("a fresh id");
    planned
}

fn done(ids: &[u64]) -> PollResult {
    PollResult {
        done: ids.iter().map(|&i| TransferId(i)).collect(),
        ..PollResult::default()
    }
}

#[test]
fn every_call_is_refused_once_closed() {
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 0 });
    assert!(matches!(m.apply(&Action::Close).then, Then::Closed { .. }));
    for action in [
        Action::Add { peer: 0, remote: 0 },
        Action::AddAsync { peer: 1, remote: 0 },
        Action::Remove { peer: 0 },
        Action::Poll { peer: None },
        Action::Cancel {
            mode: CancelMode::Wait,
            picks: vec![0],
        },
        Action::Transfer {
            op: Op::Read,
            peer: 0,
            blocks: 1,
            pick: 0,
        },
    ] {
        match m.apply(&action).then {
            Then::Refused { allowed, .. } => assert_eq!(allowed, vec![Error::Closed]),
            other => panic!("{action:?} after close: {other:?}"),
        }
    }
    assert_eq!(m.apply(&Action::Close).then, Then::ClosedAgain);
}

#[test]
fn an_id_is_reported_once_and_only_to_its_peer() {
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 0 });
    m.apply(&Action::Add { peer: 1, remote: 1 });
    let planned = post(&mut m, 0, 7);
    assert_eq!(m.in_flight(), (1, vec![1, 0, 0]));
    let wrong = m
        .absorb(done(&[7]), Some(1))
        .expect_err("p1 polled p0's id");
    assert!(wrong.contains("belongs to"), "{wrong}");
    let mut m2 = model();
    m2.apply(&Action::Add { peer: 0, remote: 0 });
    post(&mut m2, 0, 7);
    assert_eq!(m2.absorb(done(&[7]), Some(0)).expect("done").done, 1);
    let twice = m2.absorb(done(&[7]), None).expect_err("reported twice");
    assert!(twice.contains("reported twice"), "{twice}");
    let reused = m2.track(TransferId(7), planned).expect_err("id reused");
    assert!(reused.contains("issued twice"), "{reused}");
    let unknown = m2.absorb(done(&[8]), None).expect_err("never issued");
    assert!(unknown.contains("never issued"), "{unknown}");
}

#[test]
fn a_done_transfer_lands_its_sources_and_nothing_else() {
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 1 });
    let planned = post(&mut m, 0, 1);
    let known = |m: &Model| m.known_blocks();
    for &(space, block, _) in &planned.lands {
        assert!(
            !known(&m)
                .iter()
                .any(|k| k.0 == space && k.1 == block && k.2 != 0)
        );
    }
    m.absorb(done(&[1]), None).expect("done");
    for &(space, block, content) in &planned.lands {
        let super::Content::Known(stamp) = content else {
            panic!("a source of unknown content");
        };
        assert!(known(&m).contains(&(space, block, stamp)));
    }
    // Every other remote block still zeros.
    let landed: Vec<_> = planned.lands.iter().map(|l| (l.0, l.1)).collect();
    assert!(
        known(&m)
            .iter()
            .filter(|k| k.0 == 2 && !landed.contains(&(k.0, k.1)))
            .all(|k| k.2 == 0)
    );
}

#[test]
fn a_removed_peers_transfer_may_fail_removed_but_a_live_ones_may_not() {
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 0 });
    post(&mut m, 0, 1);
    post(&mut m, 0, 2);
    let live = m.absorb(
        PollResult {
            failed: vec![(TransferId(1), FailureReason::PeerRemoved)],
            ..PollResult::default()
        },
        None,
    );
    assert!(live.expect_err("live peer").contains("peer is live"));
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 0 });
    post(&mut m, 0, 1);
    assert_eq!(
        m.apply(&Action::Remove { peer: 0 }).then,
        Then::Removed {
            peer: 0,
            ok: true,
            unknown: false
        }
    );
    let counted = m
        .absorb(
            PollResult {
                failed: vec![(TransferId(1), FailureReason::PeerRemoved)],
                ..PollResult::default()
            },
            Some(0),
        )
        .expect("removed");
    assert_eq!(counted.failed, 1);
}

#[test]
fn cancel_wait_returns_only_ids_asked_for_and_in_flight() {
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 0 });
    post(&mut m, 0, 1);
    let Then::Cancelled { ids, mode } = m
        .apply(&Action::Cancel {
            mode: CancelMode::Wait,
            picks: vec![0, 0],
        })
        .then
    else {
        panic!("expected a cancel");
    };
    assert_eq!(ids, vec![TransferId(1), TransferId(1)]);
    let bad = m
        .cancelled(&ids, mode, &[TransferId(9)])
        .expect_err("never asked for");
    assert!(bad.contains("returned id 9"), "{bad}");
    let thrice = m
        .cancelled(&ids, mode, &[TransferId(1); 3])
        .expect_err("returned more often than asked");
    assert!(thrice.contains("3 times"), "{thrice}");
    let counted = m.cancelled(&ids, mode, &[]).expect("taken");
    assert_eq!(counted.taken_by_wait, 1);
    let after = m.absorb(done(&[1]), None).expect_err("taken by the cancel");
    assert!(after.contains("cancel(Wait) took it"), "{after}");
}

#[test]
fn an_invalid_transfer_expects_its_defect() {
    let mut m = model();
    m.apply(&Action::Add { peer: 0, remote: 0 });
    let expected = m.apply(&Action::Invalid {
        op: Op::Write,
        peer: 0,
        defect: Defect::Empty,
        pick: 3,
    });
    assert_eq!(
        expected.then,
        Then::Refused {
            call: Call::Post {
                op: Op::Write,
                peer: 0,
                local: vec![],
                remote: vec![],
                message: None,
            },
            allowed: vec![Error::EmptyTransfer],
            nothing_tracked: true,
        }
    );
    // To a peer never added: unknown, or the defect.
    match m
        .apply(&Action::Invalid {
            op: Op::Read,
            peer: 2,
            defect: Defect::LengthMismatch,
            pick: 3,
        })
        .then
    {
        Then::Refused { allowed, .. } => {
            assert_eq!(allowed.len(), 2);
            assert_eq!(allowed[0], Error::UnknownPeer("p2".into()));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_async_add_is_settled_before_a_transfer_to_its_peer() {
    let mut m = model();
    let Then::Registering { handle, .. } = m.apply(&Action::AddAsync { peer: 1, remote: 2 }).then
    else {
        panic!("expected a registration");
    };
    let expected = m.apply(&Action::Transfer {
        op: Op::Read,
        peer: 1,
        blocks: 1,
        pick: 0,
    });
    assert_eq!(expected.settle.len(), 1);
    assert_eq!(expected.settle[0].handle, handle);
    assert!(matches!(expected.then, Then::Posted { .. }));
}
