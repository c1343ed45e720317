//! `blockwire-bench-nixl`: the bench for the nixl backend, in a process that never loads the
//! system UCX (NIXL brings its own). `blockwire-bench` runs it for nixl and merges its
//! results; it also runs alone with the same options.

mod raw_nixl;

use std::process::ExitCode;

use blockwire::{BlockTransport, Region, Transport, TransportOptions};
use blockwire_bench::{Args, Backends, Res, Shape};

/// The nixl backend alone.
struct Nixl;

impl Backends for Nixl {
    fn open(
        &self,
        backend: &str,
        blocks: u32,
        block: usize,
        options: TransportOptions,
        allocate: bool,
    ) -> Res<Box<dyn Transport>> {
        if backend != blockwire_nixl::KIND {
            return Err(format!("this binary runs only nixl, not {backend:?}").into());
        }
        if allocate {
            return Err("nixl registers the caller's memory; --allocate is not offered".into());
        }
        let region = Region::new(blocks, block)?;
        Ok(Box::new(
            BlockTransport::<blockwire_nixl::NixlBackend>::open(region, options)?,
        ))
    }

    fn names(&self) -> Vec<String> {
        vec![blockwire_nixl::KIND.to_owned()]
    }

    fn raw_gbps(&self, backend: &str, shape: &Shape, args: &Args) -> Res<Option<f64>> {
        let plugin = args
            .option(backend, "backend")
            .unwrap_or_else(|| "UCX".into());
        Ok(Some(raw_nixl::gbps(shape, &plugin)?))
    }
}

fn main() -> ExitCode {
    blockwire_bench::main(&Nixl)
}
