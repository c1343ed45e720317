//! The ucx backend's notifications in each setting it runs (TCP, shared memory; progress
//! thread or caller progress; the caller's memory or UCX's), beyond the shared suite: the
//! acknowledgement makes "done" mean "in the target's inbox", so a drain right after done
//! finds it; a full inbox and a closed target fail the sender's notify.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blockwire::{BlockTransport, Region, Transport, TransportOptions};
use blockwire_core::{BackendOptions, FailureReason, PeerId, Result, TransferId};
use blockwire_ucx::UcxBackend;

const SETTINGS: [&str; 4] = [
    "tls=tcp",
    "tls=tcp,progress=caller",
    "tls=posix,cma,peer_errors=false",
    "tls=posix,cma,peer_errors=false,progress=caller",
];

type T = BlockTransport<UcxBackend>;

fn options(setting: &str, name: &str) -> Result<TransportOptions> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    Ok(TransportOptions::default()
        .with_backend_options(BackendOptions::parse_list(setting).expect("a valid setting"))
        .with_name(name)
        .with_stall_timeout(Some(Duration::from_secs(3))))
}

fn open(setting: &str, name: &str) -> Result<T> {
    T::open(Region::new(4, 4096)?, options(setting, name)?)
}

/// A target over memory UCX allocates.
fn open_allocated(setting: &str, name: &str) -> Result<T> {
    let opts = options(setting, name)?;
    let (backend, span) = UcxBackend::open_allocated(
        4,
        4096,
        BackendOptions::parse_list(setting).expect("a valid setting"),
    )?;
    // SAFETY: the memory belongs to the backend, which the transport drops before the
    // region; the region never frees it.
    let region = unsafe { Region::from_raw_parts(span.base().as_ptr(), 4, 4096)? };
    BlockTransport::open_with(region, opts, |_, transport_options| {
        backend.adopt_transport(&transport_options);
        Ok(backend)
    })
}

/// Polls `peer` until every one of `ids` ended; `Ok(())` for done, in the order of `ids`.
/// `drive` is the target when it must be progressed meanwhile (caller progress: its worker
/// runs only while it is driven): a drain of a sender that never sends progresses it without
/// taking anything from its inbox.
fn wait_all(
    a: &T,
    drive: Option<&T>,
    peer: &PeerId,
    ids: &[TransferId],
) -> Vec<std::result::Result<(), FailureReason>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ended = HashMap::new();
    while ended.len() < ids.len() {
        let r = a.poll(Some(peer)).expect("poll");
        ended.extend(r.done.into_iter().map(|id| (id, Ok(()))));
        ended.extend(r.failed.into_iter().map(|(id, why)| (id, Err(why))));
        if let Some(b) = drive.filter(|b| !b.is_closed()) {
            assert!(
                b.notifications(Some("never-a-sender"))
                    .expect("drain")
                    .is_empty()
            );
        }
        assert!(
            Instant::now() < deadline,
            "transfers still running; ended {ended:?}, target: {:?}",
            drive.map(|b| b.notification_stats())
        );
        std::thread::yield_now();
    }
    ids.iter()
        .map(|id| ended.remove(id).expect("ended"))
        .collect()
}

/// [`wait_all`] for one transfer.
fn wait(
    a: &T,
    drive: Option<&T>,
    peer: &PeerId,
    id: TransferId,
) -> std::result::Result<(), FailureReason> {
    wait_all(a, drive, peer, &[id]).remove(0)
}

/// Drains until a notification shows (bounded).
fn drain_one(b: &T, from: &str) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(n) = b.notifications(Some(from)).expect("drain").pop() {
            return n.message;
        }
        assert!(Instant::now() < deadline, "no notification from {from}");
        std::thread::yield_now();
    }
}

#[test]
fn write_read_and_standalone_notifications() -> Result<()> {
    for setting in SETTINGS {
        for allocated in [false, true] {
            let a = open(setting, "a")?;
            let b = if allocated {
                open_allocated(setting, "b")?
            } else {
                open(setting, "b")?
            };
            let p = PeerId::from("b");
            a.add_remote_peer(&p, &b.descriptor()?)?;
            a.region().fill_block(0, 7)?;
            let id = a.write_blocks_notify(&p, &[0], &[3], b"block 3 is yours")?;
            // A passive target unless its backend progresses only while driven.
            let drive = setting.contains("caller").then_some(&b);
            wait(&a, drive, &p, id).expect("write with a notification");
            // Done means acknowledged by b's handler: in b's inbox already.
            let got = b.notifications(Some("a"))?;
            assert_eq!(got.len(), 1, "{setting}");
            assert_eq!(got[0].message, b"block 3 is yours");
            assert_eq!(b.region().block(3)?, vec![7u8; 4096], "{setting}");

            b.region().fill_block(1, 5)?;
            let id = a.read_blocks_notify(&p, &[2], &[1], b"done with 1")?;
            wait(&a, drive, &p, id).expect("read with a notification");
            assert_eq!(a.region().block(2)?, vec![5u8; 4096]);
            assert_eq!(drain_one(&b, "a"), b"done with 1");

            let long = vec![9u8; blockwire_core::MAX_NOTIFICATION_LEN];
            let id = a.notify(&p, &long)?;
            wait(&a, drive, &p, id).expect("standalone notification");
            assert_eq!(drain_one(&b, "a"), long);
            assert_eq!(
                b.notification_stats().received,
                3,
                "{setting} allocated={allocated}"
            );
            a.close()?;
            b.close()?;
        }
    }
    Ok(())
}

#[test]
fn a_full_inbox_fails_the_notify() -> Result<()> {
    for setting in SETTINGS {
        let a = open(setting, "a")?;
        let b = T::open(
            Region::new(2, 4096)?,
            options(setting, "b")?.with_notification_capacity(1),
        )?;
        let p = PeerId::from("b");
        a.add_remote_peer(&p, &b.descriptor()?)?;
        let first = a.notify(&p, b"1")?;
        let second = a.notify(&p, b"2")?;
        let ends = wait_all(&a, Some(&b), &p, &[first, second]);
        assert!(ends[0].is_ok(), "{setting}: {ends:?}");
        assert!(
            matches!(&ends[1], Err(FailureReason::NotificationUndelivered(m)) if m.contains("full")),
            "{setting}: {ends:?}"
        );
        assert_eq!(b.notification_stats().dropped_full, 1);
        assert_eq!(b.notifications(None)?.len(), 1);
    }
    Ok(())
}

#[test]
fn a_closed_target_fails_the_notify() -> Result<()> {
    for setting in SETTINGS {
        let a = open(setting, "a")?;
        let b = open(setting, "b")?;
        let p = PeerId::from("b");
        a.add_remote_peer(&p, &b.descriptor()?)?;
        let id = a.notify(&p, b"before")?;
        wait(&a, Some(&b), &p, id).expect("a notify before close");
        b.close()?;
        let end = a
            .notify(&p, b"after close")
            .map_err(|e| FailureReason::Backend(e.to_string()))
            .and_then(|id| wait(&a, None, &p, id));
        assert!(
            end.is_err(),
            "{setting}: a notify to a closed target was reported done"
        );
        eprintln!("{setting}: {end:?}");
        a.close()?;
    }
    Ok(())
}
