//! The peer process's side: open a transport, then answer [`Request`]s until `Quit`.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use blockwire::{Op, PeerDescriptor, PeerId, TransferId, Transport};

use super::protocol::{Pair, Reply, Request};
use super::{Fallible, Opener};
use crate::support::{pattern, wait_done};

/// The transport a peer process serves, and what it posted.
struct Served {
    t: Box<dyn Transport>,
    blocks: u32,
    len: usize,
    /// The seed of its own pattern.
    seed: u8,
    posted: Vec<TransferId>,
    /// The last seed [`Request::Holds`] asked about, with its patterns: a [`Request::Close`]
    /// with that seed fills them at once, so its canary lands right after the close.
    last_asked: Option<(u8, Vec<Vec<u8>>)>,
}

/// Parses the command line, opens the transport, prints its descriptor and serves.
pub(super) fn serve_inner(open: Opener) -> Fallible<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [backend, blocks, len, seed, rest @ ..] = args.as_slice() else {
        return Err("usage: blockwire-peer BACKEND NUM_BLOCKS BLOCK_LEN SEED [OPTIONS]".into());
    };
    let blocks: u32 = blocks.parse().map_err(|e| format!("num_blocks: {e}"))?;
    let len: usize = len.parse().map_err(|e| format!("block_len: {e}"))?;
    let seed: u8 = seed.parse().map_err(|e| format!("seed: {e}"))?;
    let opts = rest.first().map(String::as_str).unwrap_or("");
    let mut served = Served {
        t: open(backend, blocks, len, opts)?,
        blocks,
        len,
        seed,
        posted: Vec::new(),
        last_asked: None,
    };
    served.fill(seed)?;
    let desc = served.t.descriptor().map_err(|e| e.report())?;
    say(&Reply::descriptor(&desc))?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let request =
            Request::from_line(&line).map_err(|e| format!("unknown request {line:?}: {e}"))?;
        if request == Request::Quit {
            served.t.close().map_err(|e| e.report())?;
            return Ok(());
        }
        say(&served.answer(request)?)?;
    }
    Err("stdin closed before Quit".into())
}

/// Writes one reply line to stdout.
pub(super) fn say(reply: &Reply) -> Fallible<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", reply.to_line())
        .and_then(|_| out.flush())
        .map_err(|e| e.to_string())
}

impl Served {
    fn fill(&self, seed: u8) -> Fallible<()> {
        self.fill_with(&self.patterns(seed))
    }

    /// `pattern(seed, i)` for every block `i`.
    fn patterns(&self, seed: u8) -> Vec<Vec<u8>> {
        (0..self.blocks)
            .map(|i| pattern(seed, i, self.len))
            .collect()
    }

    fn fill_with(&self, blocks: &[Vec<u8>]) -> Fallible<()> {
        for (i, block) in (0..self.blocks).zip(blocks) {
            self.t
                .region()
                .write_block(i, block)
                .map_err(|e| e.report())?;
        }
        Ok(())
    }

    /// Blocks `i` that hold `pattern(seed, i)`.
    fn holds(&mut self, seed: u8) -> Fallible<usize> {
        let patterns = match self.last_asked.take() {
            Some((asked, patterns)) if asked == seed => patterns,
            _ => self.patterns(seed),
        };
        let mut n = 0;
        for (i, expect) in (0..self.blocks).zip(&patterns) {
            if self.t.region().block(i).map_err(|e| e.report())? == *expect {
                n += 1;
            }
        }
        self.last_asked = Some((seed, patterns));
        Ok(n)
    }

    /// Closes the transport, then fills every block with `pattern(seed, i)`: made before the
    /// close when the last [`Request::Holds`] asked about `seed`.
    fn close_and_fill(&mut self, seed: u8) -> Fallible<()> {
        let ready = match self.last_asked.take() {
            Some((asked, patterns)) if asked == seed => Some(patterns),
            _ => None,
        };
        self.t.close().map_err(|e| e.report())?;
        match ready {
            Some(patterns) => self.fill_with(&patterns),
            None => self.fill(seed),
        }
    }

    fn answer(&mut self, request: Request) -> Fallible<Reply> {
        match request {
            Request::Verify { seed, written } => self.verify(seed, &written),
            Request::Reset => self.fill(self.seed).map(|()| Reply::Ok),
            Request::Add { name, descriptor } => {
                let bytes = hex::decode(&descriptor).map_err(|e| e.to_string())?;
                let d = PeerDescriptor::from_bytes(&bytes).map_err(|e| e.to_string())?;
                self.t
                    .add_remote_peer(&PeerId::from(name), &d)
                    .map_err(|e| e.report())?;
                Ok(Reply::Ok)
            }
            Request::Write { name, pairs } => {
                let (local, remote): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
                let peer = PeerId::from(name);
                let id = self
                    .t
                    .write_blocks(&peer, &local, &remote)
                    .map_err(|e| e.report())?;
                wait_done(&*self.t, &peer, &[id]);
                Ok(Reply::Ok)
            }
            Request::Post { op, name, pairs } => self.post(op, &PeerId::from(name), &pairs, None),
            Request::PostNotify {
                op,
                name,
                pairs,
                message,
            } => self.post(op, &PeerId::from(name), &pairs, Some(&message)),
            Request::Notify { name, message } => {
                let posted = self.t.notify(&PeerId::from(name), &message);
                self.posted_or_refused(posted)
            }
            Request::AwaitNotifications {
                from,
                count,
                ms,
                seed,
                written,
            } => self.await_notifications(from.as_deref(), count, ms, seed, &written),
            Request::Settle { ms } => self.settle(Duration::from_millis(ms)),
            Request::DropAccess => drop_access().map(|()| Reply::Ok),
            Request::Close { seed } => self.close_and_fill(seed).map(|()| Reply::Ok),
            Request::Holds { seed } => self.holds(seed).map(|blocks| Reply::Holds { blocks }),
            Request::Quit => Err("Quit has no reply".into()),
        }
    }

    fn verify(&self, seed: u8, written: &[Pair]) -> Fallible<Reply> {
        let mut bad = Vec::new();
        for i in 0..self.blocks {
            let expect = match written.iter().find(|(b, _)| *b == i) {
                Some((_, source)) => pattern(seed, *source, self.len),
                None => pattern(self.seed, i, self.len),
            };
            if self.t.region().block(i).map_err(|e| e.report())? != expect {
                bad.push(i);
            }
        }
        Ok(if bad.is_empty() {
            Reply::Ok
        } else {
            Reply::Fail { blocks: bad }
        })
    }

    fn post(
        &mut self,
        op: Op,
        peer: &PeerId,
        pairs: &[Pair],
        message: Option<&[u8]>,
    ) -> Fallible<Reply> {
        let (local, remote): (Vec<u32>, Vec<u32>) = pairs.iter().copied().unzip();
        let posted = match (op, message) {
            (Op::Write, None) => self.t.write_blocks(peer, &local, &remote),
            (Op::Read, None) => self.t.read_blocks(peer, &local, &remote),
            (Op::Write, Some(m)) => self.t.write_blocks_notify(peer, &local, &remote, m),
            (Op::Read, Some(m)) => self.t.read_blocks_notify(peer, &local, &remote, m),
        };
        self.posted_or_refused(posted)
    }

    fn await_notifications(
        &self,
        from: Option<&str>,
        count: usize,
        ms: u64,
        seed: u8,
        written: &[Pair],
    ) -> Fallible<Reply> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        let mut notices = Vec::new();
        let mut bad_blocks = Vec::new();
        while notices.len() < count && Instant::now() < deadline {
            let got = self.t.notifications(from).map_err(|e| e.report())?;
            if notices.is_empty() && !got.is_empty() && !written.is_empty() {
                if let Reply::Fail { blocks } = self.verify(seed, written)? {
                    bad_blocks = blocks;
                }
            }
            notices.extend(got.into_iter().map(|n| (n.sender, n.message)));
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(Reply::Notified {
            notices,
            bad_blocks,
        })
    }

    fn posted_or_refused(&mut self, posted: blockwire::Result<TransferId>) -> Fallible<Reply> {
        match posted {
            Ok(id) => {
                self.posted.push(id);
                Ok(Reply::Id { id: id.0 })
            }
            // A backend that learns at once that a notification cannot be sent (NIXL's
            // genNotif to an agent that is gone, libfabric's cut link to a closed
            // shm target) refuses it with `Notify`.
            Err(
                e @ (blockwire::Error::Submit { .. }
                | blockwire::Error::PeerFaulted { .. }
                | blockwire::Error::Notify { .. }),
            ) => Ok(Reply::Refused { why: e.report() }),
            Err(e) => Err(e.report()),
        }
    }

    fn settle(&mut self, wait: Duration) -> Fallible<Reply> {
        let start = Instant::now();
        let (mut done, mut failed, mut first) = (0usize, 0usize, None);
        while !self.posted.is_empty() && start.elapsed() < wait {
            let r = self.t.poll(None).map_err(|e| e.report())?;
            for id in r.done {
                self.posted.retain(|p| *p != id);
                done += 1;
            }
            for (id, why) in r.failed {
                self.posted.retain(|p| *p != id);
                failed += 1;
                first.get_or_insert(why);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(if self.posted.is_empty() {
            Reply::Settled {
                done,
                failed,
                elapsed_ms,
                first_failure: first.map(|w| w.to_string()),
            }
        } else {
            Reply::Pending {
                left: self.posted.len(),
                elapsed_ms,
            }
        })
    }
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
