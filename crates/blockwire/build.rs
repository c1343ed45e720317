//! Sets `cfg(any_backend)` when at least one backend feature is on: `AnyTransport` and
//! `open` exist only then. The list of backend features is written here once, so that no
//! source file repeats it.

const BACKEND_FEATURES: [&str; 4] = ["SHM", "UCX", "LIBFABRIC", "NIXL"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(any_backend)");
    if BACKEND_FEATURES
        .iter()
        .any(|f| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some())
    {
        println!("cargo::rustc-cfg=any_backend");
    }
}
