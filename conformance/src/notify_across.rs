//! Notifications across processes: this process and a spawned peer, each direction, with the
//! target's side (a sender's notification to a closed target fails).
//!
//! Feature `peer-binaries`; the cross-process tests call [`notifications_with`] per setting.

use std::time::{Duration, Instant};

use crate::peer::{Opener, Reply, Request};
use crate::support::{pattern, wait_done};

type Fallible<T> = Result<T, String>;

/// What [`notifications_with`] measured.
#[derive(Debug)]
pub struct NotifyReport {
    /// From posting a notified WRITE of 16 blocks until it was reported done.
    pub write_done: Duration,
    /// The same WRITE without a notification.
    pub plain_write_done: Duration,
    /// From the peer's notified WRITE into this process until its notification was drained
    /// here.
    pub peer_write_seen: Duration,
    /// How the peer's notification to this process, after it closed, ended.
    pub after_close: String,
}

/// Runs the checks against a `blockwire-peer` process `exe` with `backend` and `opts`;
/// `open` opens this process's side.
///
/// 1. A notified WRITE from here reaches the peer, which never added this process, only with
///    its 16 blocks in place; a notified READ tells the peer its blocks were read; 20
///    standalone notifications arrive once each.
/// 2. The peer's notified WRITE into this process: drained here with the bytes in place.
/// 3. The target's side: once this process closed, the peer's notification to it is never
///    reported delivered (it fails or is refused).
pub fn notifications_with(
    open: Opener,
    exe: &str,
    backend: &str,
    opts: &str,
    bound: Duration,
) -> Fallible<NotifyReport> {
    const BLOCKS: u32 = 16;
    const LEN: usize = 64 * 1024;
    let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    let (mut child, me, peer) =
        crate::peer::connected_child(open, exe, backend, opts, BLOCKS, LEN)?;
    let child_name = child.descriptor.name.clone();
    let my_name = me.name().to_owned();

    // 1a. A notified WRITE, all 16 blocks reversed.
    let local: Vec<u32> = (0..BLOCKS).collect();
    let remote: Vec<u32> = (0..BLOCKS).rev().collect();
    let start = Instant::now();
    let id = me
        .write_blocks(&peer, &local, &remote)
        .map_err(|e| e.report())?;
    wait_done(&*me, &peer, &[id]);
    let plain_write_done = start.elapsed();
    let start = Instant::now();
    let id = me
        .write_blocks_notify(&peer, &local, &remote, b"16 blocks")
        .map_err(|e| e.report())?;
    wait_done(&*me, &peer, &[id]);
    let write_done = start.elapsed();
    let written: Vec<(u32, u32)> = remote.iter().copied().zip(local.iter().copied()).collect();
    let notified = child.request(&Request::AwaitNotifications {
        from: Some(my_name.clone()),
        count: 1,
        ms,
        seed: 1,
        written,
    })?;
    expect_notices(&notified, &[(&my_name, b"16 blocks")], "notified WRITE")?;

    // 1b. A notified READ of two of the peer's blocks (which hold this side's 12 and 11 now).
    let id = me
        .read_blocks_notify(&peer, &[0, 1], &[3, 4], b"read 3 and 4")
        .map_err(|e| e.report())?;
    wait_done(&*me, &peer, &[id]);
    for (l, source) in [(0u32, 12u32), (1, 11)] {
        if me.region().block(l).map_err(|e| e.report())? != pattern(1, source, LEN) {
            return Err(format!("notified READ: local block {l} is wrong"));
        }
    }
    let notified = child.request(&Request::AwaitNotifications {
        from: Some(my_name.clone()),
        count: 1,
        ms,
        seed: 0,
        written: vec![],
    })?;
    expect_notices(&notified, &[(&my_name, b"read 3 and 4")], "notified READ")?;

    // 1c. Twenty standalone notifications, each once.
    let ids: Vec<_> = (0..20u8)
        .map(|i| me.notify(&peer, &[i]).map_err(|e| e.report()))
        .collect::<Fallible<_>>()?;
    wait_done(&*me, &peer, &ids);
    let notified = child.request(&Request::AwaitNotifications {
        from: Some(my_name.clone()),
        count: 20,
        ms,
        seed: 0,
        written: vec![],
    })?;
    let Reply::Notified { notices, .. } = &notified else {
        return Err(format!("standalone: {notified:?}"));
    };
    let mut got: Vec<u8> = notices
        .iter()
        .filter_map(|(_, m)| m.first().copied())
        .collect();
    got.sort_unstable();
    if got != (0..20u8).collect::<Vec<_>>() || notices.len() != 20 {
        return Err(format!(
            "standalone: expected 0..20 once each, got {notices:?}"
        ));
    }

    // 2. The peer writes into this process with a notification; it is drained here with the
    //    bytes in place (the peer sends it while it settles, so drain meanwhile).
    child
        .expect_ok(&Request::Reset)
        .map_err(|e| format!("child Reset: {e}"))?;
    let desc = me.descriptor().map_err(|e| e.report())?;
    child
        .expect_ok(&Request::add("parent", &desc))
        .map_err(|e| format!("child ADD: {e}"))?;
    let posted = child.request(&Request::PostNotify {
        op: blockwire::Op::Write,
        name: "parent".into(),
        pairs: vec![(5, 8), (6, 9)],
        message: b"child wrote 8 and 9".to_vec(),
    })?;
    if !matches!(posted, Reply::Id { .. }) {
        return Err(format!("child PostNotify: {posted:?}"));
    }
    let start = Instant::now();
    let (settled, seen) = std::thread::scope(|s| {
        let drain = s.spawn(|| -> Fallible<Duration> {
            let deadline = Instant::now() + bound;
            loop {
                let got = me
                    .notifications(Some(&child_name))
                    .map_err(|e| e.report())?;
                if !got.is_empty() {
                    let seen = start.elapsed();
                    for (l, source) in [(8u32, 5u32), (9, 6)] {
                        if me.region().block(l).map_err(|e| e.report())? != pattern(7, source, LEN)
                        {
                            return Err(format!(
                                "the peer's notification arrived before its block {l}"
                            ));
                        }
                    }
                    if got.len() != 1 || got[0].message != b"child wrote 8 and 9" {
                        return Err(format!("the peer's notification: {got:?}"));
                    }
                    return Ok(seen);
                }
                if Instant::now() > deadline {
                    return Err("the peer's notification never arrived".into());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let settled = child.request(&Request::Settle { ms });
        let seen = drain
            .join()
            .unwrap_or_else(|_| Err("the drain panicked".into()));
        (settled, seen)
    });
    let peer_write_seen = seen?;
    match settled? {
        Reply::Settled {
            done: 1, failed: 0, ..
        } => {}
        other => return Err(format!("child's notified WRITE: {other:?}")),
    }

    // 3. This process closes; the peer's notification to it is not reported delivered.
    me.close().map_err(|e| e.report())?;
    let posted = child.request(&Request::Notify {
        name: "parent".into(),
        message: b"too late".to_vec(),
    })?;
    let after_close = match posted {
        Reply::Refused { why } => format!("refused: {why}"),
        Reply::Id { .. } => match child.request(&Request::Settle { ms })? {
            Reply::Settled {
                failed: 1,
                first_failure,
                elapsed_ms,
                ..
            } => format!("failed after {elapsed_ms} ms: {first_failure:?}"),
            other => return Err(format!("a notification to a closed target: {other:?}")),
        },
        other => return Err(format!("child Notify after close: {other:?}")),
    };
    child.quit()?;
    Ok(NotifyReport {
        write_done,
        plain_write_done,
        peer_write_seen,
        after_close,
    })
}

fn expect_notices(reply: &Reply, expect: &[(&str, &[u8])], what: &str) -> Fallible<()> {
    let Reply::Notified {
        notices,
        bad_blocks,
    } = reply
    else {
        return Err(format!("{what}: {reply:?}"));
    };
    if !bad_blocks.is_empty() {
        return Err(format!(
            "{what}: the notification arrived before blocks {bad_blocks:?} were in place"
        ));
    }
    let want: Vec<(String, Vec<u8>)> = expect
        .iter()
        .map(|(s, m)| ((*s).to_owned(), m.to_vec()))
        .collect();
    if *notices != want {
        return Err(format!("{what}: expected {want:?}, drained {notices:?}"));
    }
    Ok(())
}
