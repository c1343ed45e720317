//! The driver's side: a spawned peer process it sends [`Request`]s to.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use blockwire::PeerDescriptor;

use super::Fallible;
use super::protocol::{Reply, Request};

/// A spawned peer process (the `blockwire-peer` binary, or another serving
/// [`serve_with`](super::serve_with)).
///
/// ```no_run
/// use blockwire_conformance::peer::{Request, Reply, SpawnedPeer};
/// fn main() -> Result<(), String> {
///     let mut p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
///     assert_eq!(p.descriptor.backend, "shm");
///     // Nothing written: block 0 holds its own pattern.
///     let verify = Request::Verify { seed: 1, written: vec![(0, 0)] };
///     assert_eq!(p.request(&verify)?, Reply::Ok);
///     p.quit()
/// }
/// ```
pub struct SpawnedPeer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The peer's descriptor.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.descriptor.validate().map_err(|e| e.to_string())?;
    ///     assert_eq!((p.descriptor.num_blocks, p.descriptor.block_len), (8, 4096));
    ///     p.quit()
    /// }
    /// ```
    pub descriptor: PeerDescriptor,
    /// What the peer is, for errors: backend and seed.
    what: String,
}

impl SpawnedPeer {
    /// Spawns `exe` (the `blockwire-peer` binary) with a region of `blocks` x `len` filled
    /// with `pattern(seed, i)`.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let exe = "target/debug/blockwire-peer";
    ///     let p = SpawnedPeer::spawn(exe, "shm", 8, 4096, 1, "copy_threads=1")?;
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
        Self::spawn_command(
            std::process::Command::new(exe),
            exe,
            backend,
            blocks,
            len,
            seed,
            opts,
        )
    }

    /// [`SpawnedPeer::spawn`] with `env` added to the peer's environment (a library's
    /// variables: `UCX_TCP_PORT_RANGE` to pin its port, for example).
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let exe = "target/debug/blockwire-peer";
    ///     let env = [("UCX_TCP_PORT_RANGE", "47100-47100")];
    ///     let p = SpawnedPeer::spawn_with_env(&env, exe, "ucx", 8, 4096, 1, "tls=tcp")?;
    ///     p.quit()
    /// }
    /// ```
    pub fn spawn_with_env(
        env: &[(&str, &str)],
        exe: &str,
        backend: &str,
        blocks: u32,
        len: usize,
        seed: u8,
        opts: &str,
    ) -> Fallible<Self> {
        let mut cmd = std::process::Command::new(exe);
        cmd.envs(env.iter().copied());
        Self::spawn_command(cmd, exe, backend, blocks, len, seed, opts)
    }

    /// [`SpawnedPeer::spawn`] inside the network namespace `netns` (`ip netns exec`; needs
    /// root and iproute2), with `env` added to its environment.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let exe = "target/debug/blockwire-peer";
    ///     let p = SpawnedPeer::spawn_in_netns("bw-a", &[], exe, "ucx", 8, 4096, 1, "tls=tcp")?;
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
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", netns, exe])
            .envs(env.iter().copied());
        Self::spawn_command(cmd, exe, backend, blocks, len, seed, opts)
    }

    fn spawn_command(
        mut cmd: std::process::Command,
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
        let mut p = SpawnedPeer {
            child,
            stdin,
            stdout,
            descriptor: PeerDescriptor::new("none", vec![], 0, 1, 1, ""),
            what: format!("{backend} peer (seed {seed})"),
        };
        p.descriptor = p.reply()?.to_descriptor()?;
        Ok(p)
    }

    /// Reads the next reply.
    fn reply(&mut self) -> Fallible<Reply> {
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
            return Reply::from_line(line.trim_end())
                .map_err(|e| format!("the peer replied {line:?}, not a reply: {e}"));
        }
    }

    /// Sends one request and returns the reply.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::{Request, Reply, SpawnedPeer};
    /// fn main() -> Result<(), String> {
    ///     let mut p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     let mine = Request::Verify { seed: 1, written: vec![(3, 3)] };
    ///     assert_eq!(p.request(&mine)?, Reply::Ok);
    ///     let other = Request::Verify { seed: 2, written: vec![(3, 3)] };
    ///     assert_eq!(p.request(&other)?, Reply::Fail { blocks: vec![3] });
    ///     p.quit()
    /// }
    /// ```
    pub fn request(&mut self, request: &Request) -> Fallible<Reply> {
        writeln!(self.stdin, "{}", request.to_line())
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("writing to the peer: {e}"))?;
        self.reply()
    }

    /// Sends one request that must be answered [`Reply::Ok`]; `Err` names the request and
    /// the reply otherwise.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::{Request, SpawnedPeer};
    /// fn main() -> Result<(), String> {
    ///     let mut p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.expect_ok(&Request::Reset)?;
    ///     p.quit()
    /// }
    /// ```
    pub fn expect_ok(&mut self, request: &Request) -> Fallible<()> {
        match self.request(request)? {
            Reply::Ok => Ok(()),
            other => Err(format!("{request:?}: {other:?}")),
        }
    }

    /// The peer's process id.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     assert!(std::path::Path::new(&format!("/proc/{}", p.pid())).exists());
    ///     p.quit()
    /// }
    /// ```
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the peer with `SIGKILL` (no chance to close anything) and reaps it.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let mut p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
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

    /// Stops the peer with `SIGSTOP` (a hung process: its sockets and mappings stay, nothing
    /// of it runs) until [`SpawnedPeer::resume`]; a peer dropped while stopped is killed.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let mut p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.stop()?;
    ///     p.resume()?;
    ///     p.quit()
    /// }
    /// ```
    pub fn stop(&mut self) -> Fallible<()> {
        self.signal(libc::SIGSTOP, "SIGSTOP")?;
        // The signal is delivered asynchronously: wait until every thread is stopped.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(self.pid()) {
            if Instant::now() > deadline {
                return Err(format!(
                    "the {} (pid {}) did not stop within 5 s of SIGSTOP",
                    self.what,
                    self.pid()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Lets a peer [`stop`](SpawnedPeer::stop)ped go on (`SIGCONT`).
    pub fn resume(&mut self) -> Fallible<()> {
        self.signal(libc::SIGCONT, "SIGCONT")
    }

    fn signal(&mut self, signal: libc::c_int, name: &str) -> Fallible<()> {
        let pid = libc::pid_t::try_from(self.pid()).map_err(|e| e.to_string())?;
        if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("{name}: the {} had exited ({status})", self.what));
        }
        // SAFETY: `kill` only sends a signal; `pid` is this handle's child, which had not
        // exited just now and cannot be reaped meanwhile (only through `&mut self`), so the
        // number is still its own.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(format!(
                "{name} to the {} (pid {pid}): {}",
                self.what,
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Sends [`Request::Quit`] and waits (bounded) for a successful exit.
    ///
    /// ```no_run
    /// use blockwire_conformance::peer::SpawnedPeer;
    /// fn main() -> Result<(), String> {
    ///     let p = SpawnedPeer::spawn("target/debug/blockwire-peer", "shm", 8, 4096, 1, "")?;
    ///     p.quit() // `Err` if it exits with a failure or does not exit within 10 s
    /// }
    /// ```
    pub fn quit(mut self) -> Fallible<()> {
        writeln!(self.stdin, "{}", Request::Quit.to_line()).map_err(|e| e.to_string())?;
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
                // Where each of its threads waits, read before the kill, names the hang.
                let threads = threads_waiting(self.pid());
                let _ = self.child.kill();
                return Err(format!(
                    "the {} (pid {}) did not exit within 10 s of Quit; its threads: {threads}",
                    self.what,
                    self.pid()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // After the name, which is in parentheses and may hold anything.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

/// Each thread of process `pid` as `name (state, kernel wait channel)`, from `/proc`.
fn threads_waiting(pid: u32) -> String {
    let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "unknown (/proc unreadable)".into();
    };
    let mut threads: Vec<String> = tasks
        .flatten()
        .map(|task| {
            let dir = task.path().display().to_string();
            let stat = read(format!("{dir}/stat"));
            // The state follows the parenthesised name.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .unwrap_or("?")
                .to_owned();
            format!(
                "{} ({state}, {})",
                read(format!("{dir}/comm")).trim_end(),
                read(format!("{dir}/wchan"))
            )
        })
        .collect();
    threads.sort();
    threads.join(", ")
}

impl Drop for SpawnedPeer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::threads_waiting;

    #[test]
    fn threads_waiting_names_a_sleeping_thread() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("bw-probe".into())
            .spawn(move || rx.recv())
            .expect("spawn");
        // The probe sleeps in `recv` once it has started; `/proc` shows it with state S.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = threads_waiting(std::process::id());
        while !seen.contains("bw-probe (S, ") {
            assert!(std::time::Instant::now() < deadline, "not listed: {seen}");
            std::thread::sleep(std::time::Duration::from_millis(5));
            seen = threads_waiting(std::process::id());
        }
        drop(tx);
        let _ = t.join();
        assert_eq!(threads_waiting(u32::MAX), "unknown (/proc unreadable)");
    }
}
