#!/usr/bin/env bash
# Installs the system libraries the native backends need, so that
#   cargo test --workspace --all-features
# builds and tests every backend. Debian/Ubuntu, as root (or with sudo).
#   ucx: pkg-config, libclang-dev (bindgen) and libucx-dev (UCX 1.13 on Debian 12)
#   libfabric: libfabric-dev (libfabric 1.17 on Debian 12)
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends pkg-config libclang-dev libucx-dev libfabric-dev
