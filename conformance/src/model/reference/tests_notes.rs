//! The model's notifications alone: actions in, expectations out, drains judged.

use std::collections::HashSet;

use blockwire_core::{
    CancelMode, Error, FailureReason, MAX_NOTIFICATION_LEN, Notification, Op, PollResult,
    TransferId,
};

use super::super::Setup;
use super::super::action::{Action, Sender};
use super::super::expected::{Call, Then};
use super::Model;

fn model() -> Model {
    let mut m = Model::new(&Setup::new(16, 64));
    m.sender = "me".into();
    m.apply(&Action::Add { peer: 0, remote: 1 });
    m
}

/// Applies a notified WRITE to p0 (r1) and tracks it as `id`; returns its message.
fn post(m: &mut Model, id: u64) -> Vec<u8> {
    let expected = m.apply(&Action::Notified {
        op: Op::Write,
        peer: 0,
        blocks: 2,
        pick: id,
    });
    let Then::Posted {
        message: Some(message),
        planned,
        ..
    } = expected.then
    else {
        panic!("expected a notified post, got {:?}", expected.then);
    };
    assert_eq!(planned.note.as_ref().map(|n| n.target), Some(1));
    m.track(TransferId(id), planned).expect("a fresh id");
    message
}

fn note(message: &[u8]) -> Notification {
    Notification::new("me", message.to_vec())
}

fn report(m: &mut Model, id: u64, outcome: Result<(), FailureReason>) -> Result<(), String> {
    let r = match outcome {
        Ok(()) => PollResult {
            done: vec![TransferId(id)],
            ..PollResult::default()
        },
        Err(reason) => PollResult {
            failed: vec![(TransferId(id), reason)],
            ..PollResult::default()
        },
    };
    m.absorb(r, None).map(|_| ())
}

#[test]
fn a_done_transfer_owes_one_notification_and_its_blocks_are_checked() {
    let mut m = model();
    let message = post(&mut m, 1);
    report(&mut m, 1, Ok(())).expect("done");
    assert_eq!(m.owed(1).len(), 1);
    let (checks, counted) = m
        .received(Some(1), Sender::Any, &[note(&message)])
        .expect("owed");
    assert_eq!(counted.notes_drained, 1);
    assert_eq!(checks.len(), 2);
    assert!(checks.iter().all(|c| c.space == 2));
    assert!(m.owed(1).is_empty());
    let twice = m
        .received(Some(1), Sender::Initiator, &[note(&message)])
        .expect_err("twice");
    assert!(twice.contains("drained twice"), "{twice}");
}

#[test]
fn a_notification_may_come_before_its_transfer_is_reported_done_but_not_failed() {
    let mut m = model();
    let message = post(&mut m, 1);
    let (_, counted) = m
        .received(Some(1), Sender::Any, &[note(&message)])
        .expect("in flight");
    assert_eq!(counted.notes_early, 1);
    report(&mut m, 1, Ok(())).expect("done after its notification");
    let mut m = model();
    let message = post(&mut m, 1);
    m.received(Some(1), Sender::Any, &[note(&message)])
        .expect("in flight");
    m.apply(&Action::Remove { peer: 0 });
    let failed = report(&mut m, 1, Err(FailureReason::PeerRemoved)).expect_err("delivered");
    assert!(failed.contains("already drained"), "{failed}");
}

#[test]
fn a_failed_transfer_delivers_none() {
    let mut m = model();
    let message = post(&mut m, 1);
    m.apply(&Action::Remove { peer: 0 });
    report(&mut m, 1, Err(FailureReason::PeerRemoved)).expect("removed");
    assert!(m.owed(1).is_empty());
    let got = m
        .received(Some(1), Sender::Any, &[note(&message)])
        .expect_err("barred");
    assert!(got.contains("reported failed"), "{got}");
}

#[test]
fn a_cancelled_transfer_may_deliver_once_or_never() {
    for mode in [CancelMode::Immediate, CancelMode::Wait] {
        let mut m = model();
        let message = post(&mut m, 1);
        let Then::Cancelled { ids, mode } = m
            .apply(&Action::Cancel {
                mode,
                picks: vec![0],
            })
            .then
        else {
            panic!("expected a cancel");
        };
        m.cancelled(&ids, mode, &[]).expect("gone");
        assert!(m.owed(1).is_empty());
        assert_eq!(m.undrained(1), 1);
        let (_, counted) = m
            .received(Some(1), Sender::Any, &[note(&message)])
            .expect("undetermined");
        assert_eq!(counted.notes_undetermined, 1);
        assert!(m.received(Some(1), Sender::Any, &[note(&message)]).is_err());
    }
}

#[test]
fn only_what_was_sent_there_from_the_initiator_may_arrive() {
    let mut m = model();
    let message = post(&mut m, 1);
    let stranger = m
        .received(Some(1), Sender::Stranger, &[note(&message)])
        .expect_err("stranger");
    assert!(stranger.contains("nobody sends"), "{stranger}");
    let mut other = note(&message);
    other.sender = "someone".into();
    assert!(m.received(Some(1), Sender::Any, &[other]).is_err());
    assert!(m.received(Some(0), Sender::Any, &[note(&message)]).is_err());
    assert!(m.received(None, Sender::Any, &[note(&message)]).is_err());
    let unknown = m
        .received(Some(1), Sender::Any, &[note(b"n99|")])
        .expect_err("never sent");
    assert!(unknown.contains("nobody sent"), "{unknown}");
}

#[test]
fn a_block_written_again_is_not_checked() {
    let mut m = model();
    let message = post(&mut m, 1);
    report(&mut m, 1, Ok(())).expect("done");
    let lands = m.notes[&TransferId(1)].lands.clone();
    assert_eq!(lands.len(), 2);
    let rewritten = |m: &Model| {
        lands
            .iter()
            .all(|l| m.writes[l.space][l.block as usize] != l.write)
    };
    let mut id = 2;
    while !rewritten(&m) {
        let expected = m.apply(&Action::Transfer {
            op: if id % 2 == 0 { Op::Write } else { Op::Read },
            peer: 0,
            blocks: 4,
            pick: id,
        });
        let Then::Posted { planned, .. } = expected.then else {
            panic!("expected a post");
        };
        m.track(TransferId(id), planned).expect("fresh");
        report(&mut m, id, Ok(())).expect("done");
        id += 1;
        assert!(id < 200, "never rewritten");
    }
    let (checks, _) = m
        .received(Some(1), Sender::Any, &[note(&message)])
        .expect("owed");
    assert!(checks.is_empty(), "{checks:?}");
}

#[test]
fn messages_are_unique_and_within_the_limit() {
    let mut m = model();
    let mut seen = HashSet::new();
    let mut longest = 0;
    for pick in 0..64u64 {
        let message = m.message(pick);
        m.step += 1;
        assert!(message.len() <= MAX_NOTIFICATION_LEN);
        longest = longest.max(message.len());
        assert!(seen.insert(message));
    }
    assert_eq!(longest, MAX_NOTIFICATION_LEN);
}

#[test]
fn unsupported_notifications_are_refused_and_a_standalone_one_needs_a_peer() {
    let mut m = model();
    match m.apply(&Action::Notify { peer: 2, pick: 0 }).then {
        Then::Refused { allowed, .. } => assert_eq!(allowed, vec![Error::UnknownPeer("p2".into())]),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        m.apply(&Action::Notify { peer: 0, pick: 0 }).then,
        Then::Notified { .. }
    ));
    let refusal = Error::Unsupported {
        backend: "x",
        what: "notifications".into(),
    };
    m.unsupported = Some(refusal.clone());
    for action in [
        Action::Notify { peer: 0, pick: 0 },
        Action::Notified {
            op: Op::Read,
            peer: 0,
            blocks: 1,
            pick: 0,
        },
    ] {
        match m.apply(&action).then {
            Then::Refused { allowed, .. } => assert_eq!(allowed, vec![refusal.clone()]),
            other => panic!("{other:?}"),
        }
    }
    m.apply(&Action::Close);
    match m
        .apply(&Action::Notifications {
            target: 3,
            from: Sender::Any,
        })
        .then
    {
        Then::Refused { call, allowed, .. } => {
            assert!(matches!(call, Call::Notifications { target: None, .. }));
            assert_eq!(allowed, vec![Error::Closed]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        m.apply(&Action::Notifications {
            target: 1,
            from: Sender::Any
        })
        .then,
        Then::Drank {
            target: Some(1),
            ..
        }
    ));
}
