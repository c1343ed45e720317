"""Fixtures: every backend setting this build has, and pairs of transports over numpy memory.

``BLOCKWIRE_TEST_BACKENDS`` (comma-separated backend names) picks the backends; by default
every backend the build has, except ``nixl`` when ``ucx`` is in too (NIXL bundles its own
UCX, which cannot share a process with the system's: run nixl in a pytest of its own).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

# As the workspace's .cargo/config.toml does for the Rust tests: NIXL's bundled UCX crashes at
# exit when rdma-core is installed unless its InfiniBand modules are left out. Before any
# transport opens (UCX reads it then); children of multiprocessing inherit it.
os.environ.setdefault("UCX_MODULES", "^ib*")

import blockwire  # noqa: E402

# The backends' settings the Rust suite runs, by name: (backend, options).
SETTINGS = {
    "shm": ("shm", {}),
    "ucx-tcp": ("ucx", {"tls": "tcp"}),
    "ucx-shm": ("ucx", {"tls": "posix,cma", "peer_errors": "false"}),
    "libfabric-tcp": ("libfabric", {"provider": "tcp", "domain": "lo"}),
    "libfabric-shm": ("libfabric", {"provider": "shm"}),
    "nixl": ("nixl", {}),
}


def selected_backends() -> list[str]:
    built = blockwire.backends()
    wanted = os.environ.get("BLOCKWIRE_TEST_BACKENDS")
    if wanted:
        names = [b.strip() for b in wanted.split(",") if b.strip()]
        missing = [b for b in names if b not in built]
        if missing:
            raise pytest.UsageError(
                f"BLOCKWIRE_TEST_BACKENDS names {missing}, not in this build ({built})"
            )
        return names
    return [b for b in built if not (b == "nixl" and "ucx" in built)]


def selected_settings() -> list[str]:
    backends = selected_backends()
    return [name for name, (backend, _) in SETTINGS.items() if backend in backends]


class Setting:
    """A backend and its options; opens transports over fresh numpy memory."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.backend, self.options = SETTINGS[name]
        self.opened: list[blockwire.Transport] = []

    def kwargs(self) -> dict:
        return {"backend": self.backend, "options": dict(self.options)}

    def memory(self, num_blocks: int = 16, block_len: int = 4096) -> np.ndarray:
        return np.zeros((num_blocks, block_len), dtype=np.uint8)

    def open(self, mem: np.ndarray | None = None, **kw) -> blockwire.Transport:
        mem = self.memory() if mem is None else mem
        kw.setdefault("stall_timeout", 3.0)
        t = blockwire.Transport(mem, self.backend, options=dict(self.options), **kw)
        self.opened.append(t)
        return t

    def close_all(self) -> None:
        for t in self.opened:
            t.close()


@pytest.fixture(params=selected_settings())
def setting(request):
    s = Setting(request.param)
    yield s
    s.close_all()


def pytest_report_header(config):
    return [
        f"blockwire {blockwire.__version__} from {os.path.dirname(blockwire.__file__)}: "
        f"backends built {blockwire.backends()}, settings tested {selected_settings()}"
    ]
