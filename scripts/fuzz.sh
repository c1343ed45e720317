#!/usr/bin/env bash
# Coverage-guided fuzzing of blockwire with cargo-fuzz (libFuzzer, AddressSanitizer, debug
# assertions and overflow checks), on the stable toolchain through RUSTC_BOOTSTRAP=1.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Runs every target in fuzz/fuzz_targets (or the ones named) for SECONDS each (default 60),
# one after another, starting from the committed seed corpus fuzz/corpus/<target>. New inputs
# go to a temporary directory, so the committed corpus does not grow; set FUZZ_KEEP_CORPUS=DIR
# to keep them under DIR/<target> instead, then add to the committed corpus only the inputs
# that bring new coverage (keeps the named seeds of fuzz/seeds.sh):
#   RUSTC_BOOTSTRAP=1 cargo fuzz run -a <target> fuzz/corpus/<target> DIR/<target> -- -merge=1
# (or `cargo fuzz cmin -a <target>` to minimize the committed corpus itself; it renames files).
#
# Prints the executions per target and exits non-zero if any target found a crash (the input
# is written to fuzz/artifacts/<target>/; reproduce with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run -a <target> fuzz/artifacts/<target>/<file>`).
#
# FUZZ_FEATURES (for example `ucx,libfabric`) builds the targets with those features of the
# fuzz crate: add_remote_peer then also runs those backends (needs what
# scripts/setup-backends.sh installs). UCX's malloc and mmap hooks are turned off (they fight
# ASan's allocator), and fuzz/lsan.supp keeps the leak check off allocations UCX holds until a
# worker is destroyed (the fuzz fixture's never is).
#
# Needs Rust (stable), a C++ compiler for libFuzzer (installed with apt-get when missing and
# run as root on Debian/Ubuntu), and installs cargo-fuzz when missing. Linux x86_64/aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=${1:-60}
shift || true
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
    exit 2
fi
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
export UCX_MODULES="${UCX_MODULES:-^ib*}"
export LSAN_OPTIONS="suppressions=$root/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
features=()
if [ -n "${FUZZ_FEATURES:-}" ]; then
    features=(--features "$FUZZ_FEATURES")
fi

if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing g++ (libFuzzer is C++)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
    else
        echo "a C++ compiler (g++) is needed to build libFuzzer" >&2
        exit 1
    fi
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

echo "== cargo fuzz build -a ${features[*]} (${targets[*]})"
cargo fuzz build -a "${features[@]}" 2>&1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

failed=()
summary=()
for t in "${targets[@]}"; do
    seeds="$root/fuzz/corpus/$t"
    mkdir -p "$seeds"
    if [ -n "${FUZZ_KEEP_CORPUS:-}" ]; then
        out="$FUZZ_KEEP_CORPUS/$t"
    else
        out="$tmp/corpus-$t"
    fi
    mkdir -p "$out"
    log="$tmp/$t.log"
    echo "== fuzzing $t for ${seconds}s (seeds: $(find "$seeds" -type f | wc -l) files)"
    # libFuzzer writes new inputs into the first corpus directory and reads all of them.
    set +e
    cargo fuzz run -a "${features[@]}" "$t" "$out" "$seeds" -- \
        -max_total_time="$seconds" -timeout=30 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    new=$(find "$out" -type f | wc -l)
    if [ "$rc" -ne 0 ]; then
        tail -n 60 "$log"
        # The tail is mostly the stack: the panic's message and what the libraries logged
        # just before it (UCX's errors, for one) come first.
        echo "-- what failed:"
        grep -m 3 -B 3 -A 2 "panicked at\|ERROR: AddressSanitizer" "$log" || true
        echo "!! $t: exit status $rc (artifacts in fuzz/artifacts/$t/)"
        failed+=("$t")
        summary+=("$t: FAILED after ${execs:-?} executions")
    else
        grep -E "^Done [0-9]+ runs" "$log" || true
        summary+=("$t: ok, ${execs:-?} executions in ${seconds}s, $new new corpus inputs")
    fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzzing found failures in: ${failed[*]}" >&2
    exit 1
fi
