#!/usr/bin/env bash
# Installs the system libraries the native backends need, so that
#   cargo test --workspace --all-features
# builds and tests every backend. Debian/Ubuntu, as root (or with sudo).
#   ucx: pkg-config, libclang-dev (bindgen) and libucx-dev (UCX 1.13 on Debian 12)
#   libfabric: libfabric-dev (libfabric 1.17 on Debian 12)
#   nixl: the runtime libraries of the PyPI wheel nixl-cu12==1.5.1 (pip download, unzip) into
#         target/nixl-runtime, where blockwire-nixl looks by default (BLOCKWIRE_NIXL_LIB_DIR
#         overrides); the UCX backend plugin there runs on DRAM without a GPU, and the wheel's
#         Python package there is the bench's NIXL peer
#   python: scripts/setup-python.sh (a venv with maturin, pytest, numpy, mypy and Mooncake's
#         transfer engine in target/python-venv, and vLLM 0.33.0's ABC files), for the Python
#         package's tests and the bench's peers
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# g++: libFuzzer (scripts/fuzz.sh, and the fuzz crate's clippy); iproute2 and procps: the
# two-host tests' network namespaces (ip netns, sysctl); python3-venv: the Python tests' venv.
$SUDO apt-get install -y -qq --no-install-recommends pkg-config libclang-dev libucx-dev libfabric-dev \
    g++ iproute2 procps python3 python3-venv

root="$(cd "$(dirname "$0")/.." && pwd)"
runtime="$root/target/nixl-runtime"
if [ ! -f "$runtime/.nixl_cu12.mesonpy.libs/libnixl_capi.so" ]; then
  mkdir -p "$runtime/wheel"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 nixl-cu12==1.5.1 -d "$runtime/wheel"
  python3 -m zipfile -e "$runtime"/wheel/nixl_cu12-1.5.1-*.whl "$runtime"
fi
test -f "$runtime/.nixl_cu12.mesonpy.libs/libnixl_capi.so"
echo "NIXL runtime: $runtime/.nixl_cu12.mesonpy.libs"

bash "$root/scripts/setup-python.sh"
