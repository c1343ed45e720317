//! The ceilings a point is compared with, measured in the same run: the machine's memory
//! bandwidth (the best of 1 to N threads copying the working set, each with the C library's
//! `memcpy` and with streaming stores), a single-thread `memcpy`
//! (measured again before each point), and a plain loopback TCP stream; and which of them
//! bounds a backend's setting.

mod memory;
mod tcp;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use memory::{CopyWith, WorkingSet, together_gbps};
use tcp::{congestion_control, tcp_gbps};

use crate::{Args, Res};

/// Which ceiling bounds a setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CeilingKind {
    /// Memory bandwidth: the data moves through shared memory (or a copy in one process).
    #[default]
    Mem,
    /// A loopback TCP stream: the data moves through the kernel's TCP stack.
    Tcp,
}

impl CeilingKind {
    /// `mem` or `tcp`, as the tables show it.
    pub fn as_str(self) -> &'static str {
        match self {
            CeilingKind::Mem => "mem",
            CeilingKind::Tcp => "tcp",
        }
    }

    /// The ceiling that bounds `backend` with this run's `--opt` settings for it (and, for
    /// ucx, `UCX_TLS` when the option is not given).
    ///
    /// - ucx: TCP unless `peer_errors=false` and the transports include shared memory (or are
    ///   UCX's default): with peer errors on, UCX 1.13 leaves out its shared-memory transports
    ///   and the default falls back to TCP lanes (see the ucx backend's docs).
    /// - libfabric: TCP for the providers `tcp` (the default), `net`, `sockets` and any
    ///   `tcp;...`/`...;ofi_rxm` stack over them; memory for `shm` and others.
    /// - nixl: memory, unless `UCX_TLS` (which NIXL's bundled UCX reads) has no shared-memory
    ///   transport.
    /// - shm and any other: memory.
    pub fn of(backend: &str, args: &Args) -> Self {
        match backend {
            "ucx" => {
                let tls = args
                    .option(backend, "tls")
                    .or_else(|| std::env::var("UCX_TLS").ok());
                let peer_errors = args.option(backend, "peer_errors").as_deref() != Some("false");
                Self::of_ucx(tls.as_deref(), peer_errors)
            }
            "libfabric" => Self::of_libfabric(args.option(backend, "provider").as_deref()),
            // NIXL's bundled UCX: shared memory unless `UCX_TLS` leaves it out.
            "nixl" => Self::of_ucx(std::env::var("UCX_TLS").ok().as_deref(), false),
            _ => CeilingKind::Mem,
        }
    }

    fn of_ucx(tls: Option<&str>, peer_errors: bool) -> Self {
        const SHARED: [&str; 9] = [
            "posix", "sysv", "cma", "knem", "xpmem", "sm", "shm", "mm", "all",
        ];
        // `^list`: every transport but those listed, shared memory among them.
        let shared = tls
            .is_none_or(|t| t.starts_with('^') || t.split(',').any(|x| SHARED.contains(&x.trim())));
        if shared && !peer_errors {
            CeilingKind::Mem
        } else {
            CeilingKind::Tcp
        }
    }

    fn of_libfabric(provider: Option<&str>) -> Self {
        let p = provider.unwrap_or("tcp");
        let tcp = p
            .split(';')
            .any(|part| matches!(part.trim(), "tcp" | "net" | "sockets"));
        if tcp {
            CeilingKind::Tcp
        } else {
            CeilingKind::Mem
        }
    }
}

/// The run's ceilings, each the best of the settings tried: measured before the sweep and
/// after it, and probed briefly before each point in the setting that was best so far; the
/// best figure of each setting is kept.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ceilings {
    /// Memory: the best GB/s of 1 to `available_parallelism` threads, each copying its share
    /// of a working set the size of one region.
    pub mem_gbps: f64,
    /// The thread count that gave [`Ceilings::mem_gbps`].
    pub mem_threads: usize,
    /// GB/s by thread count (index 0: one thread).
    pub mem_by_threads: Vec<f64>,
    /// Not a ceiling of any setting: the same copy between two shared-memory mappings
    /// ([`blockwire::Region::new_shared`], as a peer's shared region is mapped), the best of
    /// 1 to `available_parallelism` threads. Where the kernel gives shared memory smaller
    /// pages than private memory, this is what a copy into a peer's shared region can reach
    /// at best, beside [`Ceilings::mem_gbps`].
    #[serde(default)]
    pub mem_shared_gbps: f64,
    /// GB/s between shared-memory mappings by thread count (index 0: one thread).
    #[serde(default)]
    pub mem_shared_by_threads: Vec<f64>,
    /// TCP: the best GB/s received over loopback, through one connection or as many as
    /// there are cores.
    pub tcp_gbps: f64,
    /// The connection count that gave [`Ceilings::tcp_gbps`].
    pub tcp_connections: usize,
    /// `(connections, GB/s)` of each setting tried.
    pub tcp_by_connections: Vec<(usize, f64)>,
    /// The host's TCP congestion control (`net.ipv4.tcp_congestion_control`), which every
    /// TCP figure of the run went through: `bbr` paces each connection (on loopback, without
    /// the `fq` queueing discipline, by the kernel's own timer), so one connection moves
    /// less than with `cubic` and several connections more than one.
    #[serde(default)]
    pub tcp_congestion_control: Option<String>,
}

impl Ceilings {
    /// Measures both, `time` per setting, the memory one over `set`.
    pub(crate) fn measure(set: &mut WorkingSet, time: Duration) -> Res<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut c = Ceilings {
            mem_by_threads: (1..=cores)
                .map(|t| set.private.best_gbps(t, time))
                .collect(),
            mem_shared_by_threads: (1..=cores).map(|t| set.shared.best_gbps(t, time)).collect(),
            ..Default::default()
        };
        c.tcp_congestion_control = congestion_control();
        for n in [1, cores].into_iter().take(if cores > 1 { 2 } else { 1 }) {
            c.tcp_by_connections.push((n, tcp_gbps(n, time)?));
        }
        c.keep_best(&Ceilings::default());
        Ok(c)
    }

    /// Measures ceiling `kind` again, briefly (`time`), in its best setting so far, and keeps
    /// the better figure: done before each point, so that a ceiling measured while the
    /// machine was busier than during the point does not flatter it.
    pub(crate) fn probe(
        &mut self,
        kind: CeilingKind,
        set: &mut WorkingSet,
        time: Duration,
    ) -> Res<()> {
        let mut again = Ceilings::default();
        match kind {
            CeilingKind::Mem => {
                let threads = self.mem_threads.max(1);
                again.mem_by_threads = vec![0.0; threads];
                again.mem_by_threads[threads - 1] = set.private.best_gbps(threads, time);
            }
            CeilingKind::Tcp => {
                let n = self.tcp_connections.max(1);
                again.tcp_by_connections = vec![(n, tcp_gbps(n, time)?)];
            }
        }
        self.keep_best(&again);
        Ok(())
    }

    /// Keeps, setting by setting, the better of these and `other` (the same ceilings measured
    /// again, or by another binary of this run).
    pub(crate) fn keep_best(&mut self, other: &Ceilings) {
        keep_better(&mut self.mem_by_threads, &other.mem_by_threads);
        keep_better(
            &mut self.mem_shared_by_threads,
            &other.mem_shared_by_threads,
        );
        if self.tcp_congestion_control.is_none() {
            self.tcp_congestion_control = other.tcp_congestion_control.clone();
        }
        for &(n, g) in &other.tcp_by_connections {
            match self.tcp_by_connections.iter_mut().find(|(m, _)| *m == n) {
                Some(mine) => mine.1 = mine.1.max(g),
                None => self.tcp_by_connections.push((n, g)),
            }
        }
        (self.mem_threads, self.mem_gbps) = best(self.mem_by_threads.iter().copied().enumerate())
            .map_or((1, 0.0), |(i, g)| (i + 1, g));
        self.mem_shared_gbps =
            best(self.mem_shared_by_threads.iter().copied().enumerate()).map_or(0.0, |(_, g)| g);
        (self.tcp_connections, self.tcp_gbps) =
            best(self.tcp_by_connections.iter().copied()).unwrap_or((1, 0.0));
    }

    /// The value of ceiling `kind`, GB/s.
    pub fn of(&self, kind: CeilingKind) -> f64 {
        match kind {
            CeilingKind::Mem => self.mem_gbps,
            CeilingKind::Tcp => self.tcp_gbps,
        }
    }
}

/// Keeps, thread count by thread count, the better of `mine` and `theirs` (GB/s, index 0: one
/// thread; the longer list's extra counts as they are).
fn keep_better(mine: &mut Vec<f64>, theirs: &[f64]) {
    mine.resize(mine.len().max(theirs.len()), 0.0);
    for (m, t) in mine.iter_mut().zip(theirs) {
        *m = m.max(*t);
    }
}

/// The `(key, GB/s)` with the highest GB/s.
fn best<K>(it: impl Iterator<Item = (K, f64)>) -> Option<(K, f64)> {
    it.max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_args;

    #[test]
    fn each_setting_gets_the_ceiling_of_its_data_path() {
        let kind = |backend: &str, flags: &[&str]| CeilingKind::of(backend, &test_args(flags));
        assert_eq!(kind("shm", &[]), CeilingKind::Mem);
        // nixl follows `UCX_TLS`, as its UCX does.
        let nixl = CeilingKind::of_ucx(std::env::var("UCX_TLS").ok().as_deref(), false);
        assert_eq!(kind("nixl", &[]), nixl);
        assert_eq!(kind("libfabric", &[]), CeilingKind::Tcp);
        assert_eq!(
            kind("libfabric", &["--opt=libfabric:provider=shm"]),
            CeilingKind::Mem
        );
        for p in ["net", "sockets", "tcp;ofi_rxm"] {
            let flag = format!("--opt=libfabric:provider={p}");
            assert_eq!(kind("libfabric", &[&flag]), CeilingKind::Tcp, "{p}");
        }
        assert_eq!(CeilingKind::of_ucx(Some("tcp"), false), CeilingKind::Tcp);
        assert_eq!(
            CeilingKind::of_ucx(Some("posix,cma"), false),
            CeilingKind::Mem
        );
        assert_eq!(CeilingKind::of_ucx(None, false), CeilingKind::Mem);
        // With peer errors on, UCX leaves its shared-memory transports out.
        assert_eq!(
            CeilingKind::of_ucx(Some("posix,cma"), true),
            CeilingKind::Tcp
        );
        assert_eq!(CeilingKind::of_ucx(None, true), CeilingKind::Tcp);
        assert_eq!(
            kind(
                "ucx",
                &[
                    "--opt=ucx:tls=posix,cma,self",
                    "--opt=ucx:peer_errors=false"
                ]
            ),
            CeilingKind::Mem
        );
    }

    #[test]
    fn the_ceilings_keep_the_best_setting() {
        let mut set = WorkingSet::new(1 << 20).expect("working set");
        let mut c = Ceilings::measure(&mut set, Duration::from_millis(5)).expect("measured");
        let best = c.mem_by_threads.iter().copied().fold(0.0, f64::max);
        assert_eq!(c.mem_gbps, best);
        assert_eq!(c.mem_by_threads[c.mem_threads - 1], best);
        assert_eq!(c.mem_shared_by_threads.len(), c.mem_by_threads.len());
        let shared = c.mem_shared_by_threads.iter().copied().fold(0.0, f64::max);
        assert!(shared > 0.0 && c.mem_shared_gbps == shared, "{c:?}");
        assert!(c.tcp_by_connections.iter().all(|&(_, g)| g <= c.tcp_gbps));
        assert_eq!(c.of(CeilingKind::Tcp), c.tcp_gbps);
        // Read wherever the kernel shows it (some sandboxes hide `/proc/sys/net`).
        if std::path::Path::new("/proc/sys/net/ipv4/tcp_congestion_control").exists() {
            assert!(c.tcp_congestion_control.is_some(), "{c:?}");
        }
        let before = (c.mem_gbps, c.tcp_gbps);
        for kind in [CeilingKind::Mem, CeilingKind::Tcp] {
            c.probe(kind, &mut set, Duration::from_millis(5))
                .expect("probed");
        }
        assert!(c.mem_gbps >= before.0 && c.tcp_gbps >= before.1);
    }

    #[test]
    fn keeping_the_best_takes_each_setting_s_better_figure() {
        let mut a = Ceilings {
            mem_by_threads: vec![5.0, 7.0],
            mem_shared_by_threads: vec![4.0],
            tcp_by_connections: vec![(1, 2.0), (2, 3.0)],
            ..Default::default()
        };
        let b = Ceilings {
            mem_by_threads: vec![9.0, 6.0],
            mem_shared_by_threads: vec![3.0, 5.0],
            tcp_by_connections: vec![(1, 4.0), (2, 1.0)],
            ..Default::default()
        };
        a.keep_best(&b);
        assert_eq!(a.mem_by_threads, [9.0, 7.0]);
        assert_eq!(a.mem_shared_by_threads, [4.0, 5.0]);
        assert_eq!(a.mem_shared_gbps, 5.0);
        assert_eq!((a.mem_threads, a.mem_gbps), (1, 9.0));
        assert_eq!(a.tcp_by_connections, [(1, 4.0), (2, 3.0)]);
        assert_eq!((a.tcp_connections, a.tcp_gbps), (1, 4.0));
    }
}
