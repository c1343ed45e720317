//! Two processes: this test process and a spawned `blockwire-peer`, descriptors over the
//! child's stdin/stdout.

#[cfg(feature = "shm")]
#[test]
fn shm_between_two_processes() {
    blockwire_conformance::peer::drive(env!("CARGO_BIN_EXE_blockwire-peer"), "shm", "")
        .expect("cross-process shm");
}
