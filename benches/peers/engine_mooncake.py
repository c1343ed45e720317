"""Mooncake's transfer engine for peer_driver.py: `tcp` protocol, `P2PHANDSHAKE` metadata.

The calls are those of Mooncake's Python API (`mooncake.engine.TransferEngine`):
`initialize`, `register_memory`, `batch_transfer_async_write`/`..._read` with the addresses
of each block, and `get_batch_transfer_status`, which waits for a batch and frees it.
"""

import numpy as np
from mooncake.engine import TransferEngine

from peer_driver import HOST, Failure, Rejected

NAME = "mooncake"


class Engine:
    """One transfer engine on loopback with one registered region."""

    def __init__(self, role, mib):
        self.engine = TransferEngine()
        rc = self.engine.initialize(HOST, "P2PHANDSHAKE", "tcp", "")
        if rc != 0:
            raise Failure(f"TransferEngine.initialize returned {rc}")
        self.buf = np.zeros(mib << 20, dtype=np.uint8)
        rc = self.engine.register_memory(self.buf.ctypes.data, len(self.buf))
        if rc != 0:
            raise Failure(f"register_memory of {mib} MiB returned {rc}")

    def address(self):
        """What an initiator needs to reach this engine's region (JSON)."""
        return {"hostname": f"{HOST}:{self.engine.get_rpc_port()}", "base": self.buf.ctypes.data}

    def prepare(self, target, block, groups):
        """One posting argument per group of block indices (the same at both ends)."""
        lbase, rbase = self.buf.ctypes.data, target["base"]
        return [
            (target["hostname"], [lbase + i * block for i in g], [rbase + i * block for i in g],
             [block] * len(g))
            for g in groups
        ]

    def post(self, op, batch):
        """Posts one batch; its handle."""
        post = (
            self.engine.batch_transfer_async_write
            if op == "WRITE"
            else self.engine.batch_transfer_async_read
        )
        bid = post(*batch)
        if bid == 0:
            raise Rejected(f"{op}: submit returned 0")
        return bid

    def wait(self, op, bid):
        """Waits for a batch to end (and frees it: never asked twice)."""
        status = self.engine.get_batch_transfer_status([bid])
        if status != 0:
            raise Rejected(f"{op}: batch status {status}")

    def release(self, prepared):
        """Frees what `prepare` made (nothing, here)."""

    def close(self):
        """Ends the engine (the interpreter's exit does it)."""
