//! Helpers the cases share: opening connected pairs, block patterns, waiting for ids.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blockwire::Transport;
use blockwire_core::{BlockIndex, FailureReason, PeerId, PollResult, TransferId};

use crate::fault::FaultPlan;
use crate::fixture::{Fixture, Opened, Spec};

/// How long a case waits for something that should happen quickly before it fails.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// Opens a transport or fails the case.
pub fn open<F: Fixture>(fx: &F, spec: &Spec) -> Opened<F::Transport> {
    fx.open(spec)
        .unwrap_or_else(|e| panic!("{}: opening a transport: {}", fx.name(), e.report()))
}

/// Registers `b` on `a` under `name` (synchronously) or fails the case.
pub fn connect<T: Transport>(a: &T, name: &str, b: &T) -> PeerId {
    let peer = PeerId::from(name);
    let desc = b.descriptor().expect("descriptor");
    a.add_remote_peer(&peer, &desc)
        .unwrap_or_else(|e| panic!("add_remote_peer({name}): {}", e.report()));
    peer
}

/// The fault switches of a transport opened by a fault-injecting fixture.
pub fn faults<T>(o: &Opened<T>) -> &FaultPlan {
    o.faults
        .as_ref()
        .expect("this case needs a fault-injecting fixture")
}

/// Deterministic content of block `block` for `seed`: every (seed, block) pair differs, and so
/// do most bytes within a block.
pub fn pattern(seed: u8, block: BlockIndex, len: usize) -> Vec<u8> {
    let mut x = (u64::from(seed) << 32 | u64::from(block)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Fills every block of `t` with `pattern(seed, i)`.
pub fn fill_all<T: Transport>(t: &T, seed: u8) {
    for i in 0..t.num_blocks() {
        t.region()
            .write_block(i, &pattern(seed, i, t.block_len()))
            .expect("write_block");
    }
}

/// Fails the case unless every block `i` of `t` equals `expect(i)`.
pub fn check_blocks<T: Transport>(t: &T, what: &str, expect: impl Fn(BlockIndex) -> Vec<u8>) {
    for i in 0..t.num_blocks() {
        let got = t.region().block(i).expect("block");
        assert!(
            got == expect(i),
            "{what}: block {i} does not hold what it should"
        );
    }
}

/// What each id was reported as.
pub type Outcomes = HashMap<TransferId, Result<(), FailureReason>>;

/// Records `r` into `seen`, failing the case if an id is reported twice.
pub fn record(seen: &mut Outcomes, r: PollResult) {
    for id in r.done {
        assert!(seen.insert(id, Ok(())).is_none(), "id {id} reported twice");
    }
    for (id, reason) in r.failed {
        assert!(
            seen.insert(id, Err(reason)).is_none(),
            "id {id} reported twice"
        );
    }
}

/// Polls (`peer`, or every peer) until each of `ids` is reported; fails the case on a
/// timeout, on an id reported twice, or on an id that is not in `ids`.
pub fn wait_for<T: Transport + ?Sized>(
    t: &T,
    peer: Option<&PeerId>,
    ids: &[TransferId],
) -> Outcomes {
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Outcomes::new();
    while !ids.iter().all(|id| seen.contains_key(id)) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {ids:?}; reported so far: {seen:?}"
        );
        record(&mut seen, t.poll(peer).expect("poll"));
        std::thread::yield_now();
    }
    for id in seen.keys() {
        assert!(ids.contains(id), "unexpected id {id} reported");
    }
    seen
}

/// Like [`wait_for`], and every id must be done.
pub fn wait_done<T: Transport + ?Sized>(t: &T, peer: &PeerId, ids: &[TransferId]) {
    for (id, outcome) in wait_for(t, Some(peer), ids) {
        assert!(outcome.is_ok(), "transfer {id} failed: {outcome:?}");
    }
}

/// Polls for `d` and returns everything reported meanwhile.
pub fn poll_for<T: Transport>(t: &T, peer: Option<&PeerId>, d: Duration) -> Outcomes {
    let deadline = Instant::now() + d;
    let mut seen = Outcomes::new();
    while Instant::now() < deadline {
        record(&mut seen, t.poll(peer).expect("poll"));
        std::thread::sleep(Duration::from_millis(1));
    }
    seen
}

/// Waits until `cond` holds; fails the case with `what` on timeout.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Lets a wrongly posted transfer (if any) move its bytes before the case checks that none did.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(30));
}

/// One initiator connected to two peers, all opened with one spec (see [`two_peers`]).
pub struct TwoPeers<T> {
    /// The side that posts transfers.
    pub a: T,
    /// The two peers, open for as long as this lives.
    _peers: (T, T),
    /// `b`'s id on `a`.
    pub pb: PeerId,
    /// `c`'s id on `a`.
    pub pc: PeerId,
}

/// Opens three transports with `spec` and connects the first to the other two (as `"b"` and
/// `"c"`).
pub fn two_peers<F: Fixture>(fx: &F, spec: &Spec) -> TwoPeers<F::Transport> {
    let a = open(fx, spec).transport;
    let b = open(fx, spec).transport;
    let c = open(fx, spec).transport;
    let pb = connect(&a, "b", &b);
    let pc = connect(&a, "c", &c);
    TwoPeers {
        a,
        _peers: (b, c),
        pb,
        pc,
    }
}

/// Two transports of one spec, `b` registered on `a` as peer `"b"`, and `a`'s fault switches
/// when the fixture injects faults.
pub struct Pair<T> {
    /// The side that posts transfers.
    pub a: T,
    /// The peer.
    pub b: T,
    /// `b`'s id on `a`.
    pub peer: PeerId,
    /// `a`'s fault switches.
    pub faults: Option<FaultPlan>,
}

impl<T> Pair<T> {
    /// `a`'s fault switches, or a failed case.
    pub fn plan(&self) -> &FaultPlan {
        self.faults
            .as_ref()
            .expect("this case needs a fault-injecting fixture")
    }
}

/// Opens a [`Pair`].
pub fn pair<F: Fixture>(fx: &F, spec: &Spec) -> Pair<F::Transport> {
    let Opened {
        transport: a,
        faults,
    } = open(fx, spec);
    let b = open(fx, spec).transport;
    let peer = connect(&a, "b", &b);
    Pair { a, b, peer, faults }
}

/// Waits until `n` posts in all reached `plan`'s backend: a transport whose backend posts in
/// the caller's thread (`posts_in_caller`) posts on its posting thread, and a case that acts
/// on running transfers (held, cancelled, removed) needs them posted first. It returns once
/// the `n`th post has *begun* (the wrapper counts on entry): that post may not have returned
/// yet, and until it does its transfer counts twice in `backend_stats().live_transfers` (the
/// transport's and the backend's count), so a case reading that count right after waits for
/// the figure it expects.
pub fn posted(plan: &FaultPlan, n: u64) {
    assert!(
        plan.wait_posts(n, TIMEOUT),
        "the posting thread posted {} of {n}",
        plan.posts()
    );
}

/// [`posted`], then waits until the posting thread handed every transfer it posted over to
/// `transport` (its slot says posted, so polls and the stall watchdog observe it through the
/// backend): until then a transfer counts twice in `backend_stats().live_transfers`, so the
/// wait is for that count to equal what `plan`'s backend holds.
pub fn handed_over<T: Transport>(transport: &T, plan: &FaultPlan, n: u64) {
    posted(plan, n);
    eventually("the posting thread handed its posts over", || {
        transport.backend_stats().live_transfers == plan.live_transfers()
    });
}
