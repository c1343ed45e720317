//! Finding and loading the NIXL runtime before nixl-sys's forwarder looks for it.
//!
//! nixl-sys with `stub-api` `dlopen`s `libnixl_capi.so` by name at its first call and aborts
//! the process when that fails. This module loads it first, by absolute path, from the
//! runtime directory: once loaded, the forwarder's lookup by name finds it (no
//! `LD_LIBRARY_PATH` needed), and NIXL finds its plugins beside it.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use blockwire_core::{BackendError, BackendErrorKind};

/// Environment variable naming the directory that holds `libnixl_capi.so`.
pub const LIB_DIR_ENV: &str = "BLOCKWIRE_NIXL_LIB_DIR";

/// Where `scripts/setup-backends.sh` unpacks the `nixl-cu12` wheel's libraries.
pub const DEFAULT_LIB_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/nixl-runtime/.nixl_cu12.mesonpy.libs"
);

static LOADED: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The runtime directory: the `lib_dir` option, else `BLOCKWIRE_NIXL_LIB_DIR`, else the
/// default the setup script fills.
pub(crate) fn lib_dir(option: Option<&str>) -> PathBuf {
    option
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(LIB_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_LIB_DIR))
}

fn load(dir: &Path) -> Result<PathBuf, String> {
    let lib = dir.join("libnixl_capi.so");
    let c = CString::new(lib.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: dlopen with a NUL-terminated path; the handle is kept for the process's life.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local message or null.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_owned()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!("{}: {why}", lib.display()));
    }
    Ok(lib)
}

/// Whether the system's UCX (`libucs.so.0`, e.g. through the ucx backend) is loaded in this
/// process: NIXL's bundled UCX exports the same symbols and aborts when it starts beside it.
fn system_ucx_loaded() -> bool {
    // SAFETY: RTLD_NOLOAD only looks the library up among those already loaded; the extra
    // reference it takes (if found) is dropped at once.
    unsafe {
        let h = libc::dlopen(c"libucs.so.0".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if h.is_null() {
            false
        } else {
            libc::dlclose(h);
            true
        }
    }
}

/// Loads the runtime once per process; fails with a clear error, never aborts, when it is
/// missing. The first successful directory stays in use for the process's life.
pub(crate) fn ensure(dir: &Path) -> Result<(), BackendError> {
    if system_ucx_loaded() && LOADED.get().is_none() {
        return Err(BackendError::new(
            BackendErrorKind::Unsupported,
            "this process already runs the system UCX (libucs.so.0, e.g. through the ucx \
             backend); the NIXL runtime bundles its own UCX, which cannot share a process with \
             it: run the nixl backend in another process",
        ));
    }
    let loaded = LOADED.get_or_init(|| load(dir));
    let missing = |why: &str| {
        BackendError::new(
            BackendErrorKind::Unsupported,
            format!(
                "the NIXL runtime is not installed ({why}). Run scripts/setup-backends.sh, which \
                 downloads the nixl-cu12==1.5.1 wheel with pip and unpacks its libraries into \
                 target/nixl-runtime, or point {LIB_DIR_ENV} (or the lib_dir option) at the \
                 directory holding libnixl_capi.so"
            ),
        )
    };
    match loaded {
        Err(why) => Err(missing(why)),
        // Now the forwarder's dlopen by name finds the library already loaded.
        Ok(_) if nixl_sys::is_stub() => Err(missing("libnixl_capi.so did not load")),
        Ok(_) => Ok(()),
    }
}

/// Whether the NIXL runtime is loaded in this process (not nixl-sys's stub).
pub(crate) fn is_loaded() -> bool {
    matches!(LOADED.get(), Some(Ok(_))) && !nixl_sys::is_stub()
}

/// Whether the real NIXL runtime is loaded in this process (opening a backend loads it); never
/// touches nixl-sys's forwarder before that, so it cannot abort.
///
/// ```
/// // Nothing opened yet in this process.
/// assert!(!blockwire_nixl::runtime_loaded());
/// ```
pub fn runtime_loaded() -> bool {
    is_loaded()
}

/// Loads the NIXL runtime into this process, from `lib_dir` or the default place (opening a
/// backend does this too), for code that calls nixl-sys directly beside blockwire, such as the
/// bench's raw NIXL baseline. Fails as [`BackendErrorKind::Unsupported`] when the runtime is
/// missing or this process already runs the system UCX.
///
/// ```
/// // Needs the runtime (scripts/setup-backends.sh).
/// blockwire_nixl::load_runtime(None)?;
/// assert!(blockwire_nixl::runtime_loaded());
/// # Ok::<(), blockwire_core::BackendError>(())
/// ```
pub fn load_runtime(lib_dir: Option<&str>) -> Result<(), BackendError> {
    ensure(&self::lib_dir(lib_dir))
}
