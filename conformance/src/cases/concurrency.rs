//! Many sessions on one transport at once.

use std::collections::HashMap;
use std::sync::Mutex;

use blockwire::{Error, Transport};
use blockwire_core::{PeerId, TransferId};

use crate::Fixture;
use crate::fixture::Spec;
use crate::support::{Outcomes, connect, open, record, wait_for};

/// Threads each serving their own peer write and poll at once while another thread adds and
/// removes a peer over and over: every id is accounted exactly once, by its own peer's poll.
///
/// Rules: R-POLL-PEER, R-ID-ONCE.
pub(crate) fn threads_per_peer_with_churn<F: Fixture>(fx: &F) {
    const SESSIONS: usize = 4;
    const ROUNDS: u32 = 150;
    let spec = Spec::new(64, 16 * 1024);
    let t = open(fx, &spec).transport;
    let remotes: Vec<_> = (0..=SESSIONS).map(|_| open(fx, &spec).transport).collect();
    let peers: Vec<PeerId> = (0..SESSIONS)
        .map(|i| connect(&t, &format!("s{i}"), &remotes[i]))
        .collect();
    let churn_desc = remotes[SESSIONS].descriptor().expect("descriptor");
    let reported: Mutex<HashMap<TransferId, PeerId>> = Mutex::new(HashMap::new());
    let note = |peer: &PeerId, seen: &Outcomes| {
        let mut all = reported.lock().expect("lock");
        for id in seen.keys() {
            assert!(
                all.insert(*id, peer.clone()).is_none(),
                "id {id} reported twice"
            );
        }
    };
    std::thread::scope(|s| {
        for peer in &peers {
            let (t, note) = (&t, &note);
            s.spawn(move || {
                let mut mine = Vec::new();
                let mut seen = Outcomes::new();
                for r in 0..ROUNDS {
                    let b = (r * 7) % 64;
                    mine.push(t.write_blocks(peer, &[b], &[(b + 1) % 64]).expect("write"));
                    record(&mut seen, t.poll(Some(peer)).expect("poll"));
                }
                let rest: Vec<_> = mine
                    .iter()
                    .copied()
                    .filter(|id| !seen.contains_key(id))
                    .collect();
                seen.extend(wait_for(t, Some(peer), &rest));
                assert_eq!(seen.len(), mine.len());
                for (id, outcome) in &seen {
                    assert!(mine.contains(id), "{peer} got id {id} of another session");
                    assert!(outcome.is_ok(), "{peer}: transfer {id}: {outcome:?}");
                }
                note(peer, &seen);
            });
        }
        let (t, note, churn_desc) = (&t, &note, &churn_desc);
        s.spawn(move || {
            let churn = PeerId::from("churn");
            let mut mine = Vec::new();
            for r in 0..ROUNDS / 3 {
                t.add_remote_peer(&churn, churn_desc).expect("add churn");
                match t.write_blocks(&churn, &[r % 64], &[r % 64]) {
                    Ok(id) => mine.push(id),
                    Err(e) => panic!("write to a published peer: {}", e.report()),
                }
                t.remove_remote_peer(&churn).expect("remove churn");
                assert_eq!(
                    t.write_blocks(&churn, &[0], &[0]),
                    Err(Error::UnknownPeer(churn.clone()))
                );
            }
            let seen = wait_for(t, Some(&churn), &mine);
            note(&churn, &seen);
        });
    });
    let total = reported.lock().expect("lock").len();
    assert_eq!(total, SESSIONS * ROUNDS as usize + (ROUNDS / 3) as usize);
    assert!(t.poll(None).expect("poll").is_empty());
}
