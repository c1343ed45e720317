//! Two hosts on one machine: two network namespaces joined by a veth pair, a peer process in
//! each, over the TCP settings of ucx, libfabric and nixl. Transfers are verified across the
//! link both ways; then the link is cut in the middle of large writes and every write must
//! surface within a bound, failed as a remote disconnect.
//!
//! **Needs root and iproute2** (`ip netns`, `ip link`): CI runs as root. Elsewhere these tests
//! fail with that message; set `BLOCKWIRE_SKIP_NETNS=1` to skip them. Traffic stays inside the
//! namespaces (10.77.0.0/24 on the veth pair; each namespace has only `lo` and its veth end).
//!
//! Neither blockwire nor UCX nor libfabric times out a TCP connection on its own: a cut link
//! surfaces when the kernel gives up retransmitting (`net.ipv4.tcp_retries2`, 15 by default,
//! i.e. many minutes). The namespaces set it to 3 (about 3 s here), which is what a deployment
//! that wants a bounded failure does for its data-path network.

#![cfg(any(feature = "ucx", feature = "libfabric", feature = "nixl"))]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use blockwire_conformance::peer::{PeerProcess, is_root};

/// How long the writes in flight at the cut may take to surface.
const BOUND: Duration = Duration::from_secs(10);
const BLOCKS: u32 = 32;
const LEN: usize = 4 << 20;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {args:?}: {e} (these tests need iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Hosts {
    ns: [String; 2],
    dev: [String; 2],
}

impl Hosts {
    fn new() -> Result<Hosts, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let hosts = Hosts {
            ns: [format!("bw{tag}a"), format!("bw{tag}b")],
            dev: [format!("bw{tag}a"), format!("bw{tag}b")],
        };
        for ns in &hosts.ns {
            ip(&["netns", "add", ns])?;
        }
        let [na, nb] = &hosts.ns;
        let [da, db] = &hosts.dev;
        ip(&[
            "link", "add", da, "netns", na, "type", "veth", "peer", "name", db, "netns", nb,
        ])?;
        for (i, (ns, dev)) in hosts.ns.iter().zip(&hosts.dev).enumerate() {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("10.77.0.{}/24", i + 1),
                "dev",
                dev,
            ])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&[
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv4.tcp_retries2=3",
            ])?;
        }
        Ok(hosts)
    }

    fn cut(&self) -> Result<(), String> {
        ip(&["-n", &self.ns[0], "link", "set", &self.dev[0], "down"])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn expect(reply: String, want: &str, what: &str) -> Result<(), String> {
    if reply == want {
        Ok(())
    } else {
        Err(format!("{what}: {reply}"))
    }
}

/// The whole check for one backend; `opts(dev)` is the setting on interface `dev`.
fn two_hosts(
    exe: &str,
    backend: &str,
    env: &dyn Fn(&str) -> Vec<(String, String)>,
    opts: &dyn Fn(&str) -> String,
) -> Result<(), String> {
    if std::env::var_os("BLOCKWIRE_SKIP_NETNS").is_some() {
        eprintln!("{backend}: two hosts skipped (BLOCKWIRE_SKIP_NETNS)");
        return Ok(());
    }
    if !is_root() {
        return Err(
            "this test needs root and iproute2 to make network namespaces (CI runs as root); \
             set BLOCKWIRE_SKIP_NETNS=1 to skip it"
                .into(),
        );
    }
    let hosts = Hosts::new()?;
    let spawn = |i: usize, seed: u8| {
        let env = env(&hosts.dev[i]);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        PeerProcess::spawn_in_netns(
            &hosts.ns[i],
            &env,
            exe,
            backend,
            BLOCKS,
            LEN,
            seed,
            &opts(&hosts.dev[i]),
        )
    };
    let (mut a, mut b) = (spawn(0, 1)?, spawn(1, 2)?);
    let hex = |p: &PeerProcess| hex::encode(p.descriptor.to_bytes());
    expect(a.command(&format!("ADD b {}", hex(&b)))?, "OK", "a ADD b")?;
    expect(b.command(&format!("ADD a {}", hex(&a)))?, "OK", "b ADD a")?;
    expect(a.command("WRITE b 0:5,1:6")?, "OK", "a WRITE b")?;
    expect(b.command("VERIFY 1 5:0,6:1")?, "OK", "b after a's write")?;
    expect(b.command("WRITE a 3:9")?, "OK", "b WRITE a")?;
    expect(a.command("VERIFY 2 9:3")?, "OK", "a after b's write")?;

    // 30 writes of 16 blocks of 4 MiB (1.9 GB), then cut the link under them.
    let list: Vec<String> = (0..16).map(|i| format!("{i}:{}", 16 + i)).collect();
    for _ in 0..30 {
        let reply = a.command(&format!("POST b {}", list.join(",")))?;
        if !reply.starts_with("ID ") {
            return Err(format!("a POST: {reply}"));
        }
    }
    hosts.cut()?;
    let reply = a.command(&format!("SETTLE {}", BOUND.as_millis()))?;
    eprintln!("{backend}: after the cut: {reply}");
    let words: Vec<&str> = reply.split_whitespace().collect();
    match words.as_slice() {
        ["SETTLED", _done, failed, ms, why @ ..] => {
            let failed: usize = failed.parse().map_err(|e| format!("{reply}: {e}"))?;
            if failed == 0 {
                return Err(format!(
                    "{backend}: every write finished before the cut; nothing was tested: {reply}"
                ));
            }
            // nixl-sys collapses NIXL's status codes into one "backend error", so a NIXL
            // transfer cannot say why it failed; the others must say remote disconnect.
            let why = why.join(" ");
            let said = why.starts_with("remote disconnect")
                || (backend == "nixl" && why.starts_with("backend error"));
            if !said {
                return Err(format!("{backend}: not a remote disconnect: {reply}"));
            }
            eprintln!("{backend}: {failed} writes failed {ms} ms after the cut");
        }
        _ => {
            return Err(format!(
                "{backend}: writes still pending {BOUND:?} after the cut: {reply}"
            ));
        }
    }
    a.quit()?;
    b.quit()
}

#[cfg(feature = "ucx")]
#[test]
fn ucx_tcp_two_hosts() {
    two_hosts(
        env!("CARGO_BIN_EXE_blockwire-peer"),
        "ucx",
        &|_| Vec::new(),
        &|dev| format!("tls=tcp,net_devices={dev}"),
    )
    .expect("ucx over tcp between two namespaces");
}

#[cfg(feature = "libfabric")]
#[test]
fn libfabric_tcp_two_hosts() {
    two_hosts(
        env!("CARGO_BIN_EXE_blockwire-peer"),
        "libfabric",
        &|_| Vec::new(),
        &|dev| format!("provider=tcp,domain={dev}"),
    )
    .expect("libfabric over tcp between two namespaces");
}

/// NIXL's UCX plugin takes its transports from the environment: TCP on the veth end only (by
/// default it would use shared memory, which crosses network namespaces).
#[cfg(feature = "nixl")]
#[test]
fn nixl_tcp_two_hosts() {
    two_hosts(
        env!("CARGO_BIN_EXE_blockwire-nixl-peer"),
        "nixl",
        &|dev| {
            vec![
                ("UCX_TLS".into(), "tcp".into()),
                ("UCX_NET_DEVICES".into(), dev.into()),
                ("UCX_MODULES".into(), "^ib*".into()),
            ]
        },
        &|_| String::new(),
    )
    .expect("nixl over tcp between two namespaces");
}
