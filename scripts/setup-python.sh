#!/usr/bin/env bash
# The Python side of the tests: a virtual environment at target/python-venv with maturin,
# pytest, numpy and mypy (the `pytest` test of blockwire-python installs the package into it
# and runs python/tests), Mooncake's transfer engine (mooncake-transfer-engine-non-cuda,
# which blockwire-bench runs as a peer through benches/peers/peer_driver.py; where no
# wheel fits this machine it is left out and the bench reports the peer skipped), and vLLM
# 0.33.0's two DataTransport ABC files, extracted from its wheel into target/vllm-reference
# (python/tests/test_vllm_abc.py checks the adapters against them). Needs python3 with venv
# and PyPI. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/python-venv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "maturin>=1.9,<2" "pytest>=7" "numpy>=1.24" mypy
echo "python environment: $venv ($("$venv/bin/python" --version))"
mooncake="mooncake-transfer-engine-non-cuda>=0.3.13,<0.4"
if "$venv/bin/python" -m pip install --quiet "$mooncake"; then
    echo "Mooncake transfer engine (the bench's peer): $("$venv/bin/python" -m pip show \
        mooncake-transfer-engine-non-cuda | sed -n 's/^Version: //p')"
else
    echo "warning: $mooncake did not install; blockwire-bench reports its Mooncake peer skipped" >&2
fi

ref="$root/target/vllm-reference"
if [ ! -f "$ref/vllm-0.33.0-p2p-data-base.py" ] || [ ! -f "$ref/vllm-0.33.0-ec-data-base.py" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$venv/bin/python" -m pip download --quiet --no-deps "vllm==0.33.0" -d "$tmp"
    wheel=$(ls "$tmp"/vllm-0.33.0-*.whl)
    mkdir -p "$ref"
    "$venv/bin/python" - "$wheel" "$ref" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
files = {
    "vllm/v1/kv_offload/tiering/p2p/data/base.py": "vllm-0.33.0-p2p-data-base.py",
    "vllm/distributed/ec_transfer/ec_connector/cpu/data/base.py": "vllm-0.33.0-ec-data-base.py",
}
with zipfile.ZipFile(wheel) as z:
    for name, target in files.items():
        with open(f"{out}/{target}", "wb") as f:
            f.write(z.read(name))
PY
fi
echo "vLLM 0.33.0 ABC files: $ref"
