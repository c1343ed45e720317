//! NIXL's side of notifications, beyond the suite's `notifications::*` cases: the sender NIXL
//! reports is the transport's name, namesakes are refused at connect, a passive target keeps
//! what every sender sent, and "done" means the notification is already in the target's NIXL.
//! One case at a time, like the suite (see its docs).

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire::{BlockTransport, Error, PeerId, Region, Transport, TransportOptions};
use blockwire_core::{Backend, BackendErrorKind, BackendOptions, OpenBackend, RegionSpan};
use blockwire_nixl::NixlBackend;
use libtest_mimic::{Arguments, Failed, Trial};

type Nixl = BlockTransport<NixlBackend>;
type Case = fn() -> Result<(), Failed>;

fn open(name: &str) -> Nixl {
    let options = TransportOptions::default().with_name(name);
    Nixl::open(Region::new(4, 4096).expect("region"), options).expect("open nixl")
}

fn connect(from: &Nixl, id: &str, to: &Nixl) -> PeerId {
    let peer = PeerId::from(id);
    from.add_remote_peer(&peer, &to.descriptor().expect("descriptor"))
        .expect("add_remote_peer");
    peer
}

/// Polls `t` until every id is done (failing on a failure or after 10 s).
fn wait_done(t: &Nixl, peer: &PeerId, ids: &[blockwire::TransferId]) -> Result<(), Failed> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left: Vec<_> = ids.to_vec();
    while !left.is_empty() {
        let r = t.poll(Some(peer))?;
        if let Some(f) = r.failed.first() {
            return Err(format!("failed: {f:?}").into());
        }
        left.retain(|id| !r.done.contains(id));
        if Instant::now() > deadline {
            return Err(format!("{} transfers never finished", left.len()).into());
        }
    }
    Ok(())
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) -> Result<(), Failed> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        if Instant::now() > deadline {
            return Err(format!("timed out: {what}").into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// The transport's name is the agent's, so it is the sender the target drains by; backends
/// opened without a transport get distinct generated names.
fn sender_is_the_transport_name() -> Result<(), Failed> {
    let a = open("prefill-0");
    let b = open("decode-0");
    let peer = connect(&a, "decode", &b);
    let id = a.notify(&peer, b"hello")?;
    wait_done(&a, &peer, &[id])?;
    let got = b.notifications(Some("prefill-0"))?;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].sender.as_str(), &got[0].message[..]),
        ("prefill-0", &b"hello"[..])
    );
    let mut mem = vec![0u8; 2 * 4096];
    let base = NonNull::new(mem.as_mut_ptr()).expect("non-null");
    let span = || RegionSpan::new(base, 2, 4096).expect("span");
    // SAFETY: `mem` outlives both backends (dropped at the end of this function).
    let (x, y) = unsafe {
        (
            NixlBackend::open(span(), BackendOptions::new())?,
            NixlBackend::open(span(), BackendOptions::new())?,
        )
    };
    assert_ne!(x.agent_name(), y.agent_name());
    assert!(x.capabilities().notifications);
    drop((x, y));
    Ok(())
}

/// A peer named like this transport, this transport itself, and a second peer named like a
/// connected one are refused with a clear error; once the first is removed, the second
/// connects and is notified.
fn namesakes_are_refused() -> Result<(), Failed> {
    let me = open("twin");
    let other_twin = open("twin");
    let expect_name_in_use = |r: blockwire::Result<()>, says: &str| -> Result<(), Failed> {
        match r {
            Err(Error::Connect { source, .. }) => {
                assert_eq!(source.kind(), BackendErrorKind::NameInUse, "{source}");
                assert!(source.message().contains(says), "{source}");
                Ok(())
            }
            other => Err(format!("expected a refused connect, got {other:?}").into()),
        }
    };
    let desc = other_twin.descriptor()?;
    expect_name_in_use(
        me.add_remote_peer(&"t".into(), &desc),
        "this transport's name",
    )?;
    let own = me.descriptor()?;
    expect_name_in_use(me.add_remote_peer(&"me".into(), &own), "itself")?;
    let c1 = open("c");
    let c2 = open("c");
    let p1 = connect(&me, "c1", &c1);
    let p2 = PeerId::from("c2");
    let desc2 = c2.descriptor()?;
    expect_name_in_use(me.add_remote_peer(&p2, &desc2), "another connected peer")?;
    // The same agent under a second id is fine.
    let again = connect(&me, "c1-again", &c1);
    me.remove_remote_peer(&again)?;
    me.remove_remote_peer(&p1)?;
    me.add_remote_peer(&p2, &desc2)?;
    let id = me.notify(&p2, b"to the second c")?;
    wait_done(&me, &p2, &[id])?;
    assert_eq!(c2.notifications(Some("twin"))?.len(), 1);
    assert!(c1.notifications(None)?.is_empty());
    Ok(())
}

/// A target that never drains receives every sender's notifications into its inbox, each
/// sender's in order; draining one sender leaves the other's.
fn passive_target_keeps_every_sender() -> Result<(), Failed> {
    const N: u32 = 500;
    let target = open("passive");
    let s1 = open("s1");
    let s2 = open("s2");
    let p1 = connect(&s1, "t", &target);
    let p2 = connect(&s2, "t", &target);
    for i in 0..N {
        s1.notify(&p1, &i.to_le_bytes())?;
        s2.notify(&p2, &i.to_le_bytes())?;
    }
    eventually("every notification is in the inbox", || {
        let _ = (s1.poll(None), s2.poll(None));
        target.notification_stats().received == u64::from(2 * N)
    })?;
    let in_order = |got: &[blockwire::Notification], from: &str| {
        got.len() == N as usize
            && got
                .iter()
                .zip(0..N)
                .all(|(n, i)| n.sender == from && n.message == i.to_le_bytes())
    };
    let from_s2 = target.notifications(Some("s2"))?;
    assert!(
        in_order(&from_s2, "s2"),
        "{:?}",
        &from_s2[..from_s2.len().min(4)]
    );
    let rest = target.notifications(None)?;
    assert!(in_order(&rest, "s1"), "{:?}", &rest[..rest.len().min(4)]);
    Ok(())
}

/// Done means the notification is in the target's NIXL: one drain right after, with no
/// retry, finds it (the probe READ after genNotif; see the crate docs, "Delivered").
fn done_means_the_target_has_it() -> Result<(), Failed> {
    let a = open("sender");
    let b = open("receiver");
    let peer = connect(&a, "b", &b);
    for i in 0..200u32 {
        let id = a.notify(&peer, &i.to_le_bytes())?;
        wait_done(&a, &peer, &[id])?;
        let got = b.notifications(Some("sender"))?;
        if got.len() != 1 || got[0].message != i.to_le_bytes() {
            return Err(format!("notification {i}: right after done, drained {got:?}").into());
        }
    }
    Ok(())
}

/// A peer added from NIXL's own handshake: the raw metadata taken out of its descriptor
/// (what a plain NIXL agent hands out) and its geometry, as vLLM's `NixlTransport` passes
/// them. Blocks and notifications move both ways; the name comes from the metadata.
fn peer_from_raw_nixl_metadata() -> Result<(), Failed> {
    let a = open("raw-a");
    let b = open("raw-b");
    let d = b.descriptor()?;
    let md = blockwire_nixl::agent_metadata(&d)?;
    assert!(md.starts_with(b"nixlSerDes|"));
    assert_eq!(blockwire_nixl::agent_name_of(md)?, "raw-b");
    let raw = blockwire_nixl::descriptor_from_nixl(md, d.base_addr, d.num_blocks, d.block_len, "")?;
    // The same peer, whose address only lacks the close fence a plain agent does not have.
    assert_eq!(blockwire_nixl::agent_metadata(&raw)?, md);
    let mut fenced = d.clone().with_name("raw-b");
    assert_ne!(raw.address, fenced.address);
    fenced.address = raw.address.clone();
    assert_eq!(raw, fenced);
    let peer = PeerId::from("b");
    a.add_remote_peer(&peer, &raw)?;
    a.region().write_block(2, &[0x5a; 4096])?;
    let id = a.write_blocks_notify(&peer, &[2], &[1], b"wrote 1")?;
    wait_done(&a, &peer, &[id])?;
    assert_eq!(b.region().block(1)?, vec![0x5a; 4096]);
    let got = b.notifications(Some("raw-a"))?;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].message, b"wrote 1");
    // A second agent named raw-b, from raw metadata too: a typed refusal.
    let twin = open("raw-b");
    let td = twin.descriptor()?;
    let twin_raw = blockwire_nixl::descriptor_from_nixl(
        blockwire_nixl::agent_metadata(&td)?,
        td.base_addr,
        td.num_blocks,
        td.block_len,
        "",
    )?;
    match a.add_remote_peer(&"twin".into(), &twin_raw) {
        Err(Error::Connect { source, .. }) if source.kind() == BackendErrorKind::NameInUse => {}
        other => return Err(format!("expected NameInUse, got {other:?}").into()),
    }
    // Geometry that disagrees with what the agent registered: NIXL refuses the list.
    a.remove_remote_peer(&peer)?;
    let too_many = blockwire_nixl::descriptor_from_nixl(md, d.base_addr, 8, d.block_len, "")?;
    assert!(a.add_remote_peer(&peer, &too_many).is_err());
    Ok(())
}

/// A peer added from a blockwire target's raw NIXL metadata (the Python P2P layer's
/// handshake) holds the target's close fence, found under that metadata: once the target's
/// close returned, its posts are refused before NIXL sees them and nothing lands, where
/// NIXL's UCX plugin would still copy into the closed target's memory (`cma`).
fn a_raw_peer_is_held_off_a_closed_target() -> Result<(), Failed> {
    for round in 0..20 {
        let a = open("fenced-a");
        let b = open("fenced-b");
        let d = b.descriptor()?;
        let md = blockwire_nixl::agent_metadata(&d)?;
        let raw =
            blockwire_nixl::descriptor_from_nixl(md, d.base_addr, d.num_blocks, d.block_len, "")?;
        let peer = PeerId::from("b");
        a.add_remote_peer(&peer, &raw)?;
        a.region().write_block(0, &[0xcd; 4096])?;
        b.close()?;
        let id = a.write_blocks(&peer, &[0], &[0])?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let failure = loop {
            let r = a.poll(Some(&peer))?;
            if r.done.contains(&id) {
                return Err(format!("round {round}: a WRITE to a closed target succeeded").into());
            }
            if let Some(f) = r.failed.iter().find(|f| f.0 == id) {
                break format!("{f:?}");
            }
            if Instant::now() > deadline {
                return Err(format!("round {round}: the WRITE never ended").into());
            }
        };
        assert!(
            failure.contains("closed"),
            "round {round}: not the fence: {failure}"
        );
        assert_eq!(
            b.region().block(0)?,
            vec![0; 4096],
            "round {round}: it landed"
        );
    }
    Ok(())
}

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(1);
    let cases: [(&str, Case); 6] = [
        ("sender_is_the_transport_name", sender_is_the_transport_name),
        ("namesakes_are_refused", namesakes_are_refused),
        (
            "passive_target_keeps_every_sender",
            passive_target_keeps_every_sender,
        ),
        ("done_means_the_target_has_it", done_means_the_target_has_it),
        ("peer_from_raw_nixl_metadata", peer_from_raw_nixl_metadata),
        (
            "a_raw_peer_is_held_off_a_closed_target",
            a_raw_peer_is_held_off_a_closed_target,
        ),
    ];
    let trials = cases
        .into_iter()
        .map(|(name, f)| Trial::test(name, f))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
