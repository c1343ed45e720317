//! The command line, shared by `blockwire-bench` and `blockwire-bench-nixl`.

use std::path::PathBuf;

use blockwire::{BackendOptions, Op, TransportOptions};
use clap::Parser;

use crate::Res;

/// Compare blockwire backends: GB/s per block size, against the memory ceiling and each
/// backend's raw library.
#[derive(Parser, Clone, Debug)]
#[command(version, about)]
pub struct Args {
    /// Backends to run (default: every backend compiled in).
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Operations: write, read.
    #[arg(long, value_delimiter = ',', default_value = "write,read")]
    pub ops: Vec<String>,
    /// Block sizes in KiB.
    #[arg(long, value_delimiter = ',', default_value = "4,64,256,1024,4096")]
    pub sizes_kib: Vec<usize>,
    /// Blocks per transfer.
    #[arg(long, default_value_t = 16)]
    pub batch: u32,
    /// Transfers in flight.
    #[arg(long, default_value_t = 4)]
    pub depth: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Bytes of each region in MiB (keep it larger than the last-level cache).
    #[arg(long, default_value_t = 256)]
    pub region_mib: usize,
    /// A short run for CI: two sizes, short measurements, smaller regions.
    #[arg(long)]
    pub quick: bool,
    /// Put the remote peer in a spawned process (this binary, serving one transport) instead
    /// of a second transport in this process. Raw baselines stay in one process.
    #[arg(long)]
    pub cross_process: bool,
    /// Backend options, `BACKEND:k=v,...` (repeatable), e.g. `ucx:tls=posix,cma,peer_errors=false`.
    #[arg(long = "opt")]
    pub opts: Vec<String>,
    /// Let each backend allocate its regions (UCX: `ucp_mem_map` ALLOCATE).
    #[arg(long)]
    pub allocate: bool,
    /// Folder the results (JSON, SVG plot) go into, one subfolder per run.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Write the run as JSON to this file instead of tables and a results folder (used when
    /// one binary runs a backend in another).
    #[arg(long, hide = true)]
    pub emit_json: Option<PathBuf>,
    /// Serve one transport, `BACKEND:BLOCKS:BLOCK_BYTES`, as the peer of a cross-process run.
    #[arg(long, hide = true)]
    pub serve_peer: Option<String>,
}

impl Args {
    /// Applies `--quick`.
    pub(crate) fn settle(&mut self) {
        if self.quick {
            self.sizes_kib = vec![64, 1024];
            self.duration = 0.3;
            self.region_mib = 64;
        }
    }

    /// The operations asked for.
    pub(crate) fn ops(&self) -> Res<Vec<Op>> {
        self.ops
            .iter()
            .map(|o| match o.as_str() {
                "write" => Ok(Op::Write),
                "read" => Ok(Op::Read),
                other => Err(format!("unknown op {other:?} (write, read)").into()),
            })
            .collect()
    }

    /// Transport options for `backend`, with its `--opt` settings.
    pub fn options(&self, backend: &str) -> Res<TransportOptions> {
        let mut opts = BackendOptions::new();
        for o in &self.opts {
            if let Some(list) = o.strip_prefix(backend).and_then(|r| r.strip_prefix(':')) {
                for (k, v) in BackendOptions::parse_list(list)?.iter() {
                    opts.set(k, v);
                }
            }
        }
        Ok(TransportOptions::default().with_backend_options(opts))
    }

    /// One backend option given with `--opt` (the raw baselines honour the transport choice).
    pub fn option(&self, backend: &str, key: &str) -> Option<String> {
        let mut opts = self.options(backend).ok()?.backend;
        opts.take::<String>(key).ok().flatten()
    }

    /// The arguments that make another binary run the same measurements of `backend`.
    pub(crate) fn forwarded(&self, backend: &str) -> Vec<String> {
        let mut v = vec![
            format!("--backends={backend}"),
            format!("--ops={}", self.ops.join(",")),
            format!(
                "--sizes-kib={}",
                self.sizes_kib
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("--batch={}", self.batch),
            format!("--depth={}", self.depth),
            format!("--duration={}", self.duration),
            format!("--region-mib={}", self.region_mib),
        ];
        v.extend(self.opts.iter().map(|o| format!("--opt={o}")));
        if self.allocate {
            v.push("--allocate".into());
        }
        if self.cross_process {
            v.push("--cross-process".into());
        }
        v
    }
}
