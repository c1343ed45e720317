//! `--cross-process`: the remote transport lives in a spawned copy of this binary, which
//! opens it, prints its descriptor and serves (draining the notifications that reach it)
//! until its standard input closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use blockwire::{PeerDescriptor, Transport};

use crate::{Args, Backends, Res, Role, write_pattern};

/// A peer transport in a child process; dropping it ends the child.
pub(crate) struct BenchPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The child's transport, to add as a peer.
    pub(crate) descriptor: PeerDescriptor,
}

impl BenchPeer {
    /// Starts this binary as the peer: a transport of `backend` with `blocks` blocks of
    /// `block` bytes and this run's options for it.
    pub(crate) fn spawn(args: &Args, backend: &str, blocks: u32, block: usize) -> Res<Self> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(&exe);
        cmd.arg(format!("--serve-peer={backend}:{blocks}:{block}"));
        cmd.args(args.opts.iter().map(|o| format!("--opt={o}")));
        if args.allocate {
            cmd.arg("--allocate");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the peer process {}: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            BufReader::new(out).read_line(&mut line)?;
        }
        let mut peer = BenchPeer {
            child,
            stdin,
            descriptor: PeerDescriptor::new(backend, Vec::new(), 0, 0, 0, ""),
        };
        let hex = line
            .trim()
            .strip_prefix("DESC ")
            .ok_or_else(|| format!("the {backend} peer process did not start: {line:?}"))?;
        peer.descriptor = PeerDescriptor::from_bytes(&hex::decode(hex)?)?;
        Ok(peer)
    }
}

impl Drop for BenchPeer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Err(e) = self.child.wait() {
            eprintln!("waiting for the peer process: {e}");
        }
    }
}

/// The child's side: open the transport `spec` names, print `DESC <hex>`, serve until
/// standard input closes, then close.
pub(crate) fn serve(backends: &dyn Backends, args: &Args, spec: &str) -> Res<()> {
    let bad = || format!("--serve-peer wants BACKEND:BLOCKS:BLOCK_BYTES, not {spec:?}");
    let mut parts = spec.split(':');
    let (Some(backend), Some(blocks), Some(block), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad().into());
    };
    let blocks: u32 = blocks.parse().map_err(|_| bad())?;
    let block: usize = block.parse().map_err(|_| bad())?;
    let t = backends.open(
        backend,
        blocks,
        block,
        args.options(backend)?,
        args.allocate,
    )?;
    write_pattern(t.region(), Role::Remote)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "DESC {}", hex::encode(t.descriptor()?.to_bytes()))?;
    out.flush()?;
    drop(out);
    // Drain the notifications that arrive (as a target would), until standard input closes;
    // without notifications, only wait.
    let drain = t.capabilities().notifications;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        drop(tx);
    });
    let every = Duration::from_millis(if drain { 1 } else { 1000 });
    let mut drained = 0usize;
    loop {
        let open = matches!(rx.recv_timeout(every), Err(RecvTimeoutError::Timeout));
        if drain {
            drained += t.notifications(None)?.len();
        }
        if !open {
            break;
        }
    }
    let stats = t.notification_stats();
    if stats.dropped_full > 0 || stats.malformed > 0 {
        eprintln!(
            "{backend} peer process: {drained} notifications drained, {} dropped (inbox full), \
             {} malformed",
            stats.dropped_full, stats.malformed
        );
    }
    Transport::close(&*t)?;
    Ok(())
}
