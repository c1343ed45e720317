//! The model-based random runs (`blockwire_conformance::model::random`) on NIXL, in their own
//! test binary: NIXL's bundled UCX cannot share a process with Debian's (the ucx backend), so
//! the other backends' `model` binaries leave NIXL out. Same fixture as `suite`
//! (the UCX plugin, its default parameters), same knobs (`BLOCKWIRE_MODEL_CASES`,
//! `PROPTEST_RNG_SEED`, `BLOCKWIRE_MODEL_SAVE`, `BLOCKWIRE_MODEL_REPLAY`, the shrink limits).
//!
//! `cargo test -p blockwire-nixl --test nixl_model [-- FILTER]`.
//!
//! The leak checks after every sequence apply in full, with no allowance: each NIXL transport
//! (one agent with its UCX plugin) starts three threads (UCX's `async` thread and two of the
//! agent's) and holds about twenty fds (sockets, epoll/event/timer fds, pipes, unlinked
//! `/dev/shm/ucx_shm_posix_*` mappings), and dropping the transport ends and closes every one
//! of them; nothing NIXL or its UCX starts lasts beyond its last agent (measured: the process
//! is back to its starting threads and fds after the first transport is dropped, with or
//! without a warm-up, and a transport leaked on purpose is reported). Loading the runtime keeps
//! no thread or fd. The trial's warm-up stays, as for every fixture.

use blockwire_conformance::model::random;
use blockwire_conformance::{Plain, Setting};
use blockwire_nixl::NixlBackend;

fn main() {
    // 1 MiB blocks now and then, so transfers are really in flight when cancelled, removed or
    // closed.
    random::main([Plain(Setting::<NixlBackend>::default())], &[4096, 1 << 20]);
}
