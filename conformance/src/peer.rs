//! Cross-process testing: a peer process ([`serve`], the `blockwire-peer` binary) and the
//! driver a test runs against it ([`drive`]).
//!
//! The peer opens a transport, fills its blocks with `pattern(seed, i)`, prints its
//! descriptor, then answers commands on stdin, one per line:
//!
//! | command | reply |
//! |---|---|
//! | `VERIFY <seed> <r>:<l>,...` | `OK` if block `r` holds `pattern(seed, l)` for each pair and every other block its own pattern, else `FAIL <why>`; the list `-` names no pair |
//! | `RESET` | `OK` once every block holds its own pattern again |
//! | `ADD <name> <hex descriptor>` | `OK` once the peer is registered |
//! | `WRITE <name> <l>:<r>,...` | `OK` once the write is done |
//! | `POST <name> <l>:<r>,...` | `ID <id>` as soon as the write is posted, `REFUSED <why>` if the transport refused it |
//! | `POSTREAD <name> <l>:<r>,...` | `ID <id>` as soon as the read is posted, `REFUSED <why>` if refused |
//! | `SETTLE <ms>` | waits up to `ms` for every posted write and read to surface: `SETTLED <done> <failed> <elapsed ms> <first failure>`, or `PENDING <n> <elapsed ms>` |
//! | `DROP` | `OK` once this process gave up access rights: as root it becomes user `nobody`, otherwise it makes itself non-dumpable (so same-user processes without `CAP_SYS_PTRACE` may no longer access its memory) |
//! | `CLOSE <seed>` | `OK` once the transport is closed (not dropped: its memory stays mapped) and every block holds `pattern(seed, i)`, the canary |
//! | `HOLDS <seed>` | `HOLDS <n>`: how many blocks `i` hold `pattern(seed, i)` |
//! | `QUIT` | closes and exits 0 |
//!
//! Any error is `ERR <message>` and exit status 1.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use blockwire::{BackendOptions, PeerDescriptor, PeerId, Region, Transport, TransportOptions};

use crate::support::{pattern, wait_done};

type Fallible<T> = Result<T, String>;

fn pairs(list: &str) -> Fallible<Vec<(u32, u32)>> {
    list.split(',')
        .map(|p| {
            let (a, b) = p.split_once(':').ok_or(format!("bad pair {p:?}"))?;
            Ok((
                a.parse().map_err(|e| format!("{a:?}: {e}"))?,
                b.parse().map_err(|e| format!("{b:?}: {e}"))?,
            ))
        })
        .collect()
}

/// Opens a transport for the peer protocol: backend name, blocks, block length, backend
/// options (`k=v,...`).
pub type Opener = fn(&str, u32, usize, &str) -> Fallible<Box<dyn Transport>>;

/// The [`Opener`] of every backend compiled into `blockwire` ([`blockwire::open`]).
///
/// ```
/// let t = blockwire_conformance::peer::open_any("shm", 2, 64, "").unwrap();
/// assert_eq!(t.num_blocks(), 2);
/// ```
pub fn open_any(
    backend: &str,
    blocks: u32,
    len: usize,
    opts: &str,
) -> Fallible<Box<dyn Transport>> {
    let region = Region::new(blocks, len).map_err(|e| e.to_string())?;
    let backend_opts = BackendOptions::parse_list(opts).map_err(|e| e.to_string())?;
    let t = blockwire::open(
        backend,
        region,
        TransportOptions::default().with_backend_options(backend_opts),
    )
    .map_err(|e| e.to_string())?;
    Ok(Box::new(t))
}

/// The peer process's main: `blockwire-peer <backend> <num_blocks> <block_len> <seed>
/// [backend options k=v,...]`.
///
/// ```no_run
/// // src/bin/blockwire-peer.rs
/// fn main() -> std::process::ExitCode {
///     blockwire_conformance::peer::serve()
/// }
/// ```
pub fn serve() -> ExitCode {
    serve_with(open_any)
}

/// [`serve`] with transports from `open` (a backend that must not share a process with the
/// others, like NIXL, brings its own peer binary).
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     blockwire_conformance::peer::serve_with(blockwire_conformance::peer::open_any)
/// }
/// ```
pub fn serve_with(open: Opener) -> ExitCode {
    match serve_inner(open) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("ERR {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_inner(open: Opener) -> Fallible<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [backend, blocks, len, seed, rest @ ..] = args.as_slice() else {
        return Err("usage: blockwire-peer BACKEND NUM_BLOCKS BLOCK_LEN SEED [OPTIONS]".into());
    };
    let blocks: u32 = blocks.parse().map_err(|e| format!("num_blocks: {e}"))?;
    let len: usize = len.parse().map_err(|e| format!("block_len: {e}"))?;
    let seed: u8 = seed.parse().map_err(|e| format!("seed: {e}"))?;
    let opts = rest.first().map(String::as_str).unwrap_or("");
    let t = open(backend, blocks, len, opts)?;
    for i in 0..blocks {
        t.region()
            .write_block(i, &pattern(seed, i, len))
            .map_err(|e| e.to_string())?;
    }
    let desc = t.descriptor().map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: &str| -> Fallible<()> {
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())
    };
    say(&mut out, &format!("DESC {}", hex::encode(desc.to_bytes())))?;
    let mut posted = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["VERIFY", s, list] => {
                let s: u8 = s.parse().map_err(|e| format!("seed: {e}"))?;
                let written = match *list {
                    "-" => Vec::new(),
                    list => pairs(list)?,
                };
                let mut bad = Vec::new();
                for i in 0..blocks {
                    let expect = match written.iter().find(|(r, _)| *r == i) {
                        Some((_, l)) => pattern(s, *l, len),
                        None => pattern(seed, i, len),
                    };
                    if t.region().block(i).map_err(|e| e.to_string())? != expect {
                        bad.push(i);
                    }
                }
                if bad.is_empty() {
                    say(&mut out, "OK")?;
                } else {
                    say(
                        &mut out,
                        &format!("FAIL blocks {bad:?} hold the wrong bytes"),
                    )?;
                }
            }
            ["ADD", name, hexdesc] => {
                let bytes = hex::decode(hexdesc).map_err(|e| e.to_string())?;
                let d = PeerDescriptor::from_bytes(&bytes).map_err(|e| e.to_string())?;
                t.add_remote_peer(&PeerId::from(*name), &d)
                    .map_err(|e| e.to_string())?;
                say(&mut out, "OK")?;
            }
            ["WRITE", name, list] => {
                let (local, remote): (Vec<u32>, Vec<u32>) = pairs(list)?.into_iter().unzip();
                let peer = PeerId::from(*name);
                let id = t
                    .write_blocks(&peer, &local, &remote)
                    .map_err(|e| e.to_string())?;
                wait_done(&*t, &peer, &[id]);
                say(&mut out, "OK")?;
            }
            [op @ ("POST" | "POSTREAD"), name, list] => {
                let (local, remote): (Vec<u32>, Vec<u32>) = pairs(list)?.into_iter().unzip();
                let peer = PeerId::from(*name);
                let posted_now = match *op {
                    "POST" => t.write_blocks(&peer, &local, &remote),
                    _ => t.read_blocks(&peer, &local, &remote),
                };
                match posted_now {
                    Ok(id) => {
                        posted.push(id);
                        say(&mut out, &format!("ID {id}"))?;
                    }
                    Err(
                        e
                        @ (blockwire::Error::Submit { .. } | blockwire::Error::PeerFaulted { .. }),
                    ) => {
                        say(&mut out, &format!("REFUSED {e}"))?;
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            ["CLOSE", s] => {
                let s: u8 = s.parse().map_err(|e| format!("seed: {e}"))?;
                t.close().map_err(|e| e.to_string())?;
                for i in 0..blocks {
                    t.region()
                        .write_block(i, &pattern(s, i, len))
                        .map_err(|e| e.to_string())?;
                }
                say(&mut out, "OK")?;
            }
            ["HOLDS", s] => {
                let s: u8 = s.parse().map_err(|e| format!("seed: {e}"))?;
                let mut n = 0;
                for i in 0..blocks {
                    if t.region().block(i).map_err(|e| e.to_string())? == pattern(s, i, len) {
                        n += 1;
                    }
                }
                say(&mut out, &format!("HOLDS {n}"))?;
            }
            ["RESET"] => {
                for i in 0..blocks {
                    t.region()
                        .write_block(i, &pattern(seed, i, len))
                        .map_err(|e| e.to_string())?;
                }
                say(&mut out, "OK")?;
            }
            ["SETTLE", ms] => {
                let ms: u64 = ms.parse().map_err(|e| format!("ms: {e}"))?;
                let start = Instant::now();
                let (mut done, mut failed, mut first) = (0usize, 0usize, None);
                while !posted.is_empty() && start.elapsed() < Duration::from_millis(ms) {
                    let r = t.poll(None).map_err(|e| e.to_string())?;
                    for id in r.done {
                        posted.retain(|p| *p != id);
                        done += 1;
                    }
                    for (id, why) in r.failed {
                        posted.retain(|p| *p != id);
                        failed += 1;
                        first.get_or_insert(why);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                let took = start.elapsed().as_millis();
                if posted.is_empty() {
                    let why = first.map_or_else(String::new, |w| w.to_string());
                    say(&mut out, &format!("SETTLED {done} {failed} {took} {why}"))?;
                } else {
                    say(&mut out, &format!("PENDING {} {took}", posted.len()))?;
                }
            }
            ["DROP"] => {
                drop_access()?;
                say(&mut out, "OK")?;
            }
            ["QUIT"] => {
                t.close().map_err(|e| e.to_string())?;
                return Ok(());
            }
            _ => return Err(format!("unknown command {line:?}")),
        }
    }
    Err("stdin closed before QUIT".into())
}

/// Gives up the rights that let this process reach others' memory, or others reach its own.
fn drop_access() -> Fallible<()> {
    // SAFETY: plain syscalls on this process's credentials; no memory is passed.
    let rc = unsafe {
        if libc::geteuid() == 0 {
            let nobody = 65534;
            if libc::setresgid(nobody, nobody, nobody) != 0 {
                -1
            } else {
                libc::setresuid(nobody, nobody, nobody)
            }
        } else {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0)
        }
    };
    if rc != 0 {
        return Err(format!(
            "dropping access rights: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Whether this process runs as root.
///
/// ```
/// use blockwire_conformance::peer::is_root;
/// if is_root() {
///     eprintln!("root keeps access to every process: a `DROP` test proves nothing here");
/// }
/// ```
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A spawned peer process.
///
/// ```no_run
/// use blockwire_conformance::peer::PeerProcess;
/// fn main() -> Result<(), String> {
///     let mut p = PeerProcess::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
///     assert_eq!(p.descriptor.backend, "shm");
///     assert_eq!(p.command("VERIFY 1 0:0")?, "OK"); // nothing written: its own pattern
///     p.quit()
/// }
/// ```
pub struct PeerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The peer's descriptor.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::PeerProcess;
    /// fn main() -> Result<(), String> {
    ///     let p = PeerProcess::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.descriptor.validate().map_err(|e| e.to_string())?;
    ///     assert_eq!((p.descriptor.num_blocks, p.descriptor.block_len), (8, 4096));
    ///     p.quit()
    /// }
    /// ```
    pub descriptor: PeerDescriptor,
}

impl PeerProcess {
    /// Spawns `exe` (the `blockwire-peer` binary) with a region of `blocks` x `len` filled
    /// with `pattern(seed, i)`.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::PeerProcess;
    /// fn main() -> Result<(), String> {
    ///     let exe = "target/debug/blockwire-peer";
    ///     let p = PeerProcess::spawn(exe, "shm", 8, 4096, 1, "copy_threads=1")?;
    ///     assert_eq!(p.descriptor.num_blocks, 8);
    ///     p.quit()
    /// }
    /// ```
    pub fn spawn(
        exe: &str,
        backend: &str,
        blocks: u32,
        len: usize,
        seed: u8,
        opts: &str,
    ) -> Fallible<Self> {
        Self::spawn_command(Command::new(exe), exe, backend, blocks, len, seed, opts)
    }

    /// [`PeerProcess::spawn`] inside the network namespace `netns` (`ip netns exec`; needs
    /// root and iproute2), with `env` added to its environment.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::PeerProcess;
    /// fn main() -> Result<(), String> {
    ///     let exe = "target/debug/blockwire-peer";
    ///     let p = PeerProcess::spawn_in_netns("bw-a", &[], exe, "ucx", 8, 4096, 1, "tls=tcp")?;
    ///     p.quit()
    /// }
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_in_netns(
        netns: &str,
        env: &[(&str, &str)],
        exe: &str,
        backend: &str,
        blocks: u32,
        len: usize,
        seed: u8,
        opts: &str,
    ) -> Fallible<Self> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns, exe])
            .envs(env.iter().copied());
        Self::spawn_command(cmd, exe, backend, blocks, len, seed, opts)
    }

    fn spawn_command(
        mut cmd: Command,
        exe: &str,
        backend: &str,
        blocks: u32,
        len: usize,
        seed: u8,
        opts: &str,
    ) -> Fallible<Self> {
        let mut child = cmd
            .args([
                backend,
                &blocks.to_string(),
                &len.to_string(),
                &seed.to_string(),
                opts,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning {exe}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut p = PeerProcess {
            child,
            stdin,
            stdout,
            descriptor: PeerDescriptor::new("none", vec![], 0, 1, 1, ""),
        };
        let line = p.read_line()?;
        let hexdesc = line
            .strip_prefix("DESC ")
            .ok_or(format!("expected DESC, got {line:?}"))?;
        let bytes = hex::decode(hexdesc).map_err(|e| e.to_string())?;
        p.descriptor = PeerDescriptor::from_bytes(&bytes).map_err(|e| e.to_string())?;
        Ok(p)
    }

    fn read_line(&mut self) -> Fallible<String> {
        loop {
            let mut line = String::new();
            self.stdout
                .read_line(&mut line)
                .map_err(|e| format!("reading from the peer: {e}"))?;
            if line.is_empty() {
                return Err("the peer closed its output".into());
            }
            // UCX logs to standard output by default (`[time] [host:pid:thread] ... UCX
            // ERROR ...`): pass such lines on, they are not replies.
            if line.starts_with('[') && line.contains(" UCX ") {
                eprint!("peer: {line}");
                continue;
            }
            return Ok(line.trim_end().to_owned());
        }
    }

    /// Sends one command and returns the reply line.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::PeerProcess;
    /// fn main() -> Result<(), String> {
    ///     let mut p = PeerProcess::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     assert_eq!(p.command("VERIFY 1 3:3")?, "OK");
    ///     assert!(p.command("VERIFY 2 3:3")?.starts_with("FAIL"));
    ///     p.quit()
    /// }
    /// ```
    pub fn command(&mut self, line: &str) -> Fallible<String> {
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("writing to the peer: {e}"))?;
        self.read_line()
    }

    /// Kills the peer with `SIGKILL` (no chance to close anything) and reaps it.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::PeerProcess;
    /// fn main() -> Result<(), String> {
    ///     let mut p = PeerProcess::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.kill()
    /// }
    /// ```
    pub fn kill(&mut self) -> Fallible<()> {
        self.child
            .kill()
            .map_err(|e| format!("killing the peer: {e}"))?;
        self.child
            .wait()
            .map(drop)
            .map_err(|e| format!("reaping the peer: {e}"))
    }

    /// Sends `QUIT` and waits (bounded) for a successful exit.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::PeerProcess;
    /// fn main() -> Result<(), String> {
    ///     let p = PeerProcess::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.quit() // `Err` if it exits with a failure or does not exit within 10 s
    /// }
    /// ```
    pub fn quit(mut self) -> Fallible<()> {
        writeln!(self.stdin, "QUIT").map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("peer exited with {status}"))
                };
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return Err("peer did not exit".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The cross-process check for `backend`: this process writes blocks into a spawned peer and
/// reads others back, the peer verifies every one of its blocks, then the peer writes into this
/// process. `exe` is the `blockwire-peer` binary.
///
/// ```no_run
/// fn main() -> Result<(), String> {
///     let exe = "target/debug/blockwire-peer";
///     blockwire_conformance::peer::drive(exe, "shm", "chunk_bytes=65536")
/// }
/// ```
pub fn drive(exe: &str, backend: &str, opts: &str) -> Fallible<()> {
    drive_with(open_any, exe, backend, opts)
}

/// [`drive`] with this side's transport from `open`.
///
/// ```no_run
/// use blockwire_conformance::peer::{drive_with, open_any};
/// fn main() -> Result<(), String> {
///     drive_with(open_any, "target/debug/blockwire-peer", "shm", "")
/// }
/// ```
pub fn drive_with(open: Opener, exe: &str, backend: &str, opts: &str) -> Fallible<()> {
    const BLOCKS: u32 = 32;
    const LEN: usize = 256 * 1024 + 8;
    let mut child = PeerProcess::spawn(exe, backend, BLOCKS, LEN, 7, opts)?;
    let me = open(backend, BLOCKS, LEN, opts)?;
    for i in 0..BLOCKS {
        me.region()
            .write_block(i, &pattern(1, i, LEN))
            .map_err(|e| e.to_string())?;
    }
    let peer = PeerId::from("child");
    me.add_remote_peer(&peer, &child.descriptor)
        .map_err(|e| format!("add_remote_peer: {e}"))?;
    // WRITE four blocks, permuted, one of them twice to two places.
    let (local, remote) = ([0u32, 1, 2, 3, 3], [10u32, 4, 7, 0, 31]);
    let id = me
        .write_blocks(&peer, &local, &remote)
        .map_err(|e| e.to_string())?;
    wait_done(&*me, &peer, &[id]);
    // READ two untouched blocks of the child.
    let id = me
        .read_blocks(&peer, &[20, 21], &[5, 6])
        .map_err(|e| e.to_string())?;
    wait_done(&*me, &peer, &[id]);
    for (l, r) in [(20u32, 5u32), (21, 6)] {
        if me.region().block(l).map_err(|e| e.to_string())? != pattern(7, r, LEN) {
            return Err(format!(
                "READ: local block {l} does not hold the child's block {r}"
            ));
        }
    }
    let list: Vec<String> = remote
        .iter()
        .zip(&local)
        .map(|(r, l)| format!("{r}:{l}"))
        .collect();
    let reply = child.command(&format!("VERIFY 1 {}", list.join(",")))?;
    if reply != "OK" {
        return Err(format!("child after WRITE: {reply}"));
    }
    // The other direction: the child writes into this process.
    let desc = hex::encode(me.descriptor().map_err(|e| e.to_string())?.to_bytes());
    let reply = child.command(&format!("ADD parent {desc}"))?;
    if reply != "OK" {
        return Err(format!("child ADD: {reply}"));
    }
    let reply = child.command("WRITE parent 8:30,9:29")?;
    if reply != "OK" {
        return Err(format!("child WRITE: {reply}"));
    }
    for (l, r) in [(30u32, 8u32), (29, 9)] {
        if me.region().block(l).map_err(|e| e.to_string())? != pattern(7, r, LEN) {
            return Err(format!(
                "child WRITE: block {l} does not hold the child's block {r}"
            ));
        }
    }
    child.quit()?;
    me.close().map_err(|e| e.to_string())
}
