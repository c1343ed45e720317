//! Notifications at the backend level, on `tcp` and `shm`: frames sent with `notify` reach a
//! passive target's inbox (it never polls) whole and once; bytes that are no frame are counted
//! malformed; after the target's `revoke` nothing is delivered and the sender's notify is
//! never reported done. (The transport-level rules are the conformance suite's.)

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use blockwire_core::kit::Inbox;
use blockwire_core::{
    Backend, BackendOptions, MAX_NAME_LEN, MAX_NOTIFICATION_LEN, OpenBackend, PeerDescriptor,
    RegionSpan, XferState, encode_frame,
};
use blockwire_libfabric::OfiBackend;

const BLOCKS: u32 = 2;
const BLOCK_LEN: usize = 4096;

/// The suite's two settings, and each with posts through the receiving endpoint (its queue
/// then holds send and receive completions together).
fn settings() -> [(&'static str, BackendOptions); 4] {
    let tcp = || {
        BackendOptions::new()
            .with("provider", "tcp")
            .with("domain", "lo")
    };
    let shm = || BackendOptions::new().with("provider", "shm");
    [
        ("tcp", tcp()),
        ("shm", shm()),
        ("tcp-shared", tcp().with("endpoint_per_peer", "false")),
        ("shm-shared", shm().with("endpoint_per_peer", "false")),
    ]
}

struct Side {
    backend: OfiBackend,
    inbox: Inbox,
    _mem: Vec<u8>,
}

fn open(options: BackendOptions, name: &str) -> Side {
    let mut mem = vec![0u8; BLOCKS as usize * BLOCK_LEN];
    let span = RegionSpan::new(
        NonNull::new(mem.as_mut_ptr()).expect("non-null"),
        BLOCKS,
        BLOCK_LEN,
    )
    .expect("span");
    let inbox = Inbox::new(1024);
    let options = options.with_identity(name, inbox.clone());
    // SAFETY: `mem` moves into the returned `Side` (its heap buffer does not move), which
    // drops the backend first (field order).
    let backend = unsafe { OfiBackend::open(span, options) }.expect("open");
    Side {
        backend,
        inbox,
        _mem: mem,
    }
}

fn descriptor(side: &Side) -> PeerDescriptor {
    PeerDescriptor::new(
        "libfabric",
        side.backend.address(),
        side._mem.as_ptr() as u64,
        BLOCKS,
        BLOCK_LEN as u64,
        "",
    )
}

/// Waits for `x` to end (or `within`): its final state, `Running` if it did not end.
fn wait(b: &OfiBackend, x: &mut <OfiBackend as Backend>::Xfer, within: Duration) -> XferState {
    let deadline = Instant::now() + within;
    loop {
        let s = b.state(x);
        if s != XferState::Running || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn notifications_reach_a_passive_target_whole_and_once() {
    for (setting, options) in settings() {
        let a = open(options.clone(), "a");
        let b = open(options, "b");
        assert!(a.backend.capabilities().notifications, "{setting}");
        let peer = a.backend.connect(&descriptor(&b)).expect("connect");
        let longest_name = "n".repeat(MAX_NAME_LEN);
        let big: Vec<u8> = (0..MAX_NOTIFICATION_LEN).map(|i| (i * 7) as u8).collect();
        let mut frames = vec![encode_frame(&longest_name, &big), encode_frame("a", b"")];
        frames.extend((0..200u32).map(|i| encode_frame("a", &i.to_le_bytes())));
        // All in flight at once: more than the target's posted receive buffers.
        let mut xfers: Vec<_> = frames
            .iter()
            .map(|f| a.backend.notify(&peer, f).expect("notify"))
            .collect();
        for x in &mut xfers {
            let state = wait(&a.backend, x, Duration::from_secs(10));
            assert_eq!(state, XferState::Done, "{setting}");
        }
        for x in xfers {
            assert!(a.backend.release(x).is_ok());
        }
        eventually("every notification arrived", || {
            b.inbox.stats().received == frames.len() as u64
        });
        let longest = b.inbox.drain(Some(&longest_name));
        assert_eq!(longest.len(), 1, "{setting}");
        assert_eq!(longest[0].message, big, "{setting}");
        let rest = b.inbox.drain(Some("a"));
        assert_eq!(rest.len(), 201, "{setting}");
        assert!(rest[0].message.is_empty());
        let mut got: Vec<u32> = rest[1..]
            .iter()
            .map(|n| u32::from_le_bytes(n.message[..].try_into().expect("4 bytes")))
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..200).collect::<Vec<_>>(), "{setting}: each once");
        // Bytes that are no frame: counted, and the path goes on.
        let mut x = a.backend.notify(&peer, b"not a frame").expect("notify");
        assert_eq!(
            wait(&a.backend, &mut x, Duration::from_secs(10)),
            XferState::Done
        );
        assert!(a.backend.release(x).is_ok());
        eventually("the malformed one was counted", || {
            b.inbox.stats().malformed == 1
        });
        let mut x = a
            .backend
            .notify(&peer, &encode_frame("a", b"again"))
            .expect("notify");
        assert_eq!(
            wait(&a.backend, &mut x, Duration::from_secs(10)),
            XferState::Done
        );
        assert!(a.backend.release(x).is_ok());
        eventually("the next one arrived", || b.inbox.stats().queued == 1);
        assert_eq!(b.inbox.drain(None)[0].message, b"again");
        a.backend.disconnect(peer);
    }
}

#[test]
fn nothing_is_delivered_after_revoke() {
    for (setting, options) in settings() {
        let a = open(options.clone(), "a");
        let b = open(options, "b");
        let peer = a.backend.connect(&descriptor(&b)).expect("connect");
        let mut x = a
            .backend
            .notify(&peer, &encode_frame("a", b"before"))
            .expect("notify");
        assert_eq!(
            wait(&a.backend, &mut x, Duration::from_secs(10)),
            XferState::Done
        );
        assert!(a.backend.release(x).is_ok());
        eventually("the first arrived", || b.inbox.stats().queued == 1);
        b.backend.revoke();
        match a.backend.notify(&peer, &encode_frame("a", b"after")) {
            Err(e) => eprintln!("{setting}: notify after revoke refused: {e}"),
            Ok(mut x) => {
                let state = wait(&a.backend, &mut x, Duration::from_secs(3));
                assert_ne!(state, XferState::Done, "{setting}: delivered after revoke");
                eprintln!("{setting}: notify after revoke: {state:?}");
                if state == XferState::Running {
                    // The watchdog's cut ends it (shm: the target's endpoint file is gone).
                    assert!(a.backend.fail_peer(&peer), "{setting}: cut");
                    assert!(matches!(a.backend.state(&mut x), XferState::Failed(_)));
                }
                assert!(a.backend.release(x).is_ok());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(b.inbox.stats().received, 1, "{setting}");
        a.backend.disconnect(peer);
    }
}

/// The environment variable that makes [`target_process`] a target (the provider's setting).
const TARGET_ENV: &str = "BLOCKWIRE_LIBFABRIC_NOTIFY_TARGET";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// In a child process started by [`a_stopped_target_is_not_notified`]: opens a target, prints
/// its address and base, then how many notifications reached its inbox whenever that changes,
/// until killed (or a minute passed). Otherwise does nothing.
#[test]
fn target_process() {
    let Ok(setting) = std::env::var(TARGET_ENV) else {
        return;
    };
    let options = settings()
        .into_iter()
        .find(|(name, _)| *name == setting)
        .expect("a setting")
        .1;
    let t = open(options, "target");
    println!(
        "\naddress {} {}",
        hex(&t.backend.address()),
        t._mem.as_ptr() as u64
    );
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let received = t.inbox.stats().received;
        if received != seen {
            seen = received;
            println!("received {seen}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Across processes: a notification to a target process that is stopped (`SIGSTOP`) is not
/// reported done, on `tcp` too (where the send alone completes once it is in the socket: the
/// probe write waits for the target); once the target resumes, it is, and the target has it.
#[test]
fn a_stopped_target_is_not_notified() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    for (setting, options) in settings() {
        let mut child = Child(
            Command::new(std::env::current_exe().expect("exe"))
                .args([
                    "--exact",
                    "target_process",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(TARGET_ENV, setting)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn the target"),
        );
        let mut lines = BufReader::new(child.0.stdout.take().expect("stdout")).lines();
        // The harness prints its own lines first.
        let (address, base) = loop {
            let line = lines.next().expect("the target's address").expect("a line");
            let mut words = line.split_whitespace();
            if let (Some("address"), Some(a), Some(b)) = (words.next(), words.next(), words.next())
            {
                break (unhex(a), b.parse::<u64>().expect("the target's base"));
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("received ") {
                    let _ = tx.send(n.parse::<u64>().unwrap_or(0));
                }
            }
        });
        let a = open(options, "a");
        let desc = PeerDescriptor::new("libfabric", address, base, BLOCKS, BLOCK_LEN as u64, "");
        let peer = a.backend.connect(&desc).expect("connect");
        let mut x = a
            .backend
            .notify(&peer, &encode_frame("a", b"1"))
            .expect("notify");
        assert_eq!(
            wait(&a.backend, &mut x, Duration::from_secs(10)),
            XferState::Done
        );
        assert!(a.backend.release(x).is_ok());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1), "{setting}");
        let pid = child.0.id().to_string();
        let signal = |sig: &str| {
            let status = Command::new("kill").args([sig, &pid]).status();
            assert!(status.is_ok_and(|s| s.success()), "kill {sig}");
        };
        signal("-STOP");
        std::thread::sleep(Duration::from_millis(100));
        let mut x = a
            .backend
            .notify(&peer, &encode_frame("a", b"2"))
            .expect("notify");
        let state = wait(&a.backend, &mut x, Duration::from_millis(500));
        signal("-CONT");
        assert_eq!(
            state,
            XferState::Running,
            "{setting}: done while the target was stopped"
        );
        assert_eq!(
            wait(&a.backend, &mut x, Duration::from_secs(10)),
            XferState::Done
        );
        assert!(a.backend.release(x).is_ok());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(2), "{setting}");
        a.backend.disconnect(peer);
    }
}

/// A child process, killed when dropped (also when the test fails).
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
