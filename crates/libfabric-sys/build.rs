//! Generates bindings to the libfabric found by pkg-config (Debian: `libfabric-dev`). Most of
//! libfabric's API (`fi_domain`, `fi_endpoint`, `fi_mr_reg`, `fi_writemsg`, `fi_cq_read`, ...)
//! is `static inline` in its headers; bindgen's `wrap_static_fns` emits a C file with one
//! exported wrapper per such function, compiled here with `cc`.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let fabric = match pkg_config::Config::new()
        .atleast_version("1.14")
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "libfabric-sys: libfabric was not found through pkg-config ({e}). Install it \
                 first, on Debian: apt-get install pkg-config libclang-dev libfabric-dev"
            );
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let header = manifest.join("wrapper.h");
    let wrappers = out.join("static_wrappers");
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid_.*|fid")
        .allowlist_var("FI_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .wrap_unsafe_ops(true)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &fabric.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    builder
        .generate()
        .expect("bindgen could not read the libfabric headers")
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs");
    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c")).include(&manifest);
    for path in &fabric.include_paths {
        cc.include(path);
    }
    cc.warnings(false).compile("libfabric_static_wrappers");
}
