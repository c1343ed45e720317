//! The TCP ceiling: plain loopback TCP streams, one connection or several.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::Res;

/// Bytes of each `write` (and `read`) of the TCP ceiling.
const TCP_CHUNK: usize = 4 << 20;

/// The host's TCP congestion control, if it can be read (Linux).
pub(super) fn congestion_control() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").ok()?;
    Some(name.trim().to_owned()).filter(|n| !n.is_empty())
}

/// GB/s received over `connections` loopback TCP connections, each sent `TCP_CHUNK`-byte
/// writes for `time` by its own thread and read by another.
pub(super) fn tcp_gbps(connections: usize, time: Duration) -> Res<f64> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("TCP ceiling: bind: {e}"))?;
    let addr = listener.local_addr()?;
    let start = Barrier::new(2 * connections);
    std::thread::scope(|s| -> Res<f64> {
        let mut senders = Vec::new();
        for _ in 0..connections {
            let start = &start;
            senders.push(s.spawn(move || -> std::io::Result<()> {
                let mut c = TcpStream::connect(addr)?;
                c.set_nodelay(true)?;
                let buf = vec![7u8; TCP_CHUNK];
                start.wait();
                let t = Instant::now();
                while t.elapsed() < time {
                    c.write_all(&buf)?;
                }
                c.shutdown(std::net::Shutdown::Write)
            }));
        }
        let mut receivers = Vec::new();
        for _ in 0..connections {
            let (mut c, _) = listener
                .accept()
                .map_err(|e| format!("TCP ceiling: accept: {e}"))?;
            let start = &start;
            receivers.push(s.spawn(move || -> std::io::Result<(usize, Duration)> {
                let mut buf = vec![0u8; TCP_CHUNK];
                start.wait();
                let t = Instant::now();
                let mut got = 0usize;
                loop {
                    match c.read(&mut buf)? {
                        0 => return Ok((got, t.elapsed())),
                        n => got += n,
                    }
                }
            }));
        }
        let (mut bytes, mut longest) = (0usize, Duration::ZERO);
        for r in receivers {
            let (got, took) = r
                .join()
                .map_err(|_| "TCP ceiling: a receiver panicked")?
                .map_err(|e| format!("TCP ceiling: receive: {e}"))?;
            bytes += got;
            longest = longest.max(took);
        }
        for w in senders {
            w.join()
                .map_err(|_| "TCP ceiling: a sender panicked")?
                .map_err(|e| format!("TCP ceiling: send: {e}"))?;
        }
        Ok(bytes as f64 / longest.as_secs_f64().max(1e-9) / 1e9)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tcp_ceiling_counts_what_arrives() {
        let g = tcp_gbps(2, Duration::from_millis(20)).expect("loopback TCP");
        assert!(g > 0.0, "{g}");
    }
}
