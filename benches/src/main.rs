//! `blockwire-bench`: the compare-backends CLI (see the `blockwire_bench` library docs).
//! This binary opens shm, ucx and libfabric itself and hands nixl to `blockwire-bench-nixl`.

#[cfg(feature = "libfabric")]
mod raw_ofi;
#[cfg(feature = "ucx")]
mod raw_ucx;

use std::process::ExitCode;

use blockwire::{Region, Transport, TransportOptions};
use blockwire_bench::{Args, Backends, Res, Shape};

/// Every backend compiled into blockwire, through `blockwire::open`.
struct Compiled;

impl Backends for Compiled {
    fn open(
        &self,
        backend: &str,
        blocks: u32,
        block: usize,
        options: TransportOptions,
        allocate: bool,
    ) -> Res<Box<dyn Transport>> {
        Ok(Box::new(if allocate {
            blockwire::open_allocated(backend, blocks, block, options)?
        } else {
            blockwire::open(backend, Region::new(blocks, block)?, options)?
        }))
    }

    #[cfg_attr(
        not(any(feature = "ucx", feature = "libfabric")),
        allow(unused_variables)
    )]
    fn raw_gbps(&self, backend: &str, shape: &Shape, args: &Args) -> Res<Option<f64>> {
        Ok(match backend {
            // `open_allocated("shm")` puts a region in shared memory: the raw copy too.
            "shm" => Some(blockwire_bench::raw_copy_gbps(
                shape,
                if args.allocate {
                    Region::new_shared
                } else {
                    Region::new
                },
            )?),
            #[cfg(feature = "ucx")]
            "ucx" => {
                let peer_errors = args.option(backend, "peer_errors").as_deref() != Some("false");
                let tls = args.option(backend, "tls");
                // Read and configured as the backend does (UCX's TCP send segment).
                let seg = args.options(backend)?.backend.take("tcp_seg_bytes")?;
                let tuning = blockwire::ucx::tcp_tuning(tls.as_deref(), seg)?;
                Some(raw_ucx::gbps(shape, tls.as_deref(), &tuning, peer_errors)?)
            }
            #[cfg(feature = "libfabric")]
            "libfabric" => {
                let provider = blockwire::libfabric::provider_named(
                    args.option(backend, "provider").as_deref(),
                );
                let domain = args.option(backend, "domain");
                Some(raw_ofi::gbps(shape, &provider, domain.as_deref())?)
            }
            _ => None,
        })
    }

    fn elsewhere(&self, backend: &str) -> Option<std::process::Command> {
        if backend != "nixl" || !cfg!(feature = "nixl") {
            return None;
        }
        let features: Vec<&str> = [
            ("shm", cfg!(feature = "shm")),
            ("ucx", cfg!(feature = "ucx")),
            ("libfabric", cfg!(feature = "libfabric")),
            ("nixl", true),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        let mut cmd = blockwire_bench::sibling("blockwire-bench-nixl", &features)?;
        // NIXL's bundled UCX crashes at exit when rdma-core is installed unless its InfiniBand
        // modules stay out (as .cargo/config.toml sets for cargo's own runs).
        if std::env::var_os("UCX_MODULES").is_none() {
            cmd.env("UCX_MODULES", "^ib*");
        }
        Some(cmd)
    }
}

fn main() -> ExitCode {
    blockwire_bench::main(&Compiled)
}
