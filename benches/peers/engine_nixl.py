"""NIXL's own Python API for peer_driver.py, called the way vLLM's NIXL transports call it.

One `nixl_agent` (UCX backend, its progress thread on) per side registers one region
(`register_memory`). The initiator loads the target's agent metadata (`add_remote_agent`),
prepares a descriptor per block at both ends for each block size (`get_xfer_descs`,
`prep_xfer_dlist`; outside the timed part, as a connector does once per peer), and posts each
batch with `make_prepped_xfer` and `transfer`; it watches a batch with `check_xfer_state`
and frees it with `release_xfer_handle`. The package is the `nixl-cu12` wheel that
`scripts/setup-backends.sh` unpacks (the bench puts it on `PYTHONPATH`); its UCX reads
`UCX_TLS` as the bench's nixl backend does.
"""

import base64
import itertools
import time

import numpy as np
from nixl_cu12 import nixl_agent, nixl_agent_config

from peer_driver import Rejected

NAME = "nixl"

_names = itertools.count()

# The process ends with `os._exit` once its output is flushed: the wheel's bundled libnl-route
# (nixl_cu12.libs, loaded with its UCX) crashes with SIGSEGV in `rtnl_tc_unregister`, one of
# its ELF destructors, at every normal exit of a python that made an agent (gdb: `_dl_fini`,
# after the interpreter finished), even with every agent closed first.
SKIP_LIBRARY_DESTRUCTORS = True

# A watched batch that is not done yet: sleep this long before asking again (s). A tight loop
# of `check_xfer_state` takes a core from NIXL's progress thread on a small machine.
NAP_S = 20e-6


class Engine:
    """One NIXL agent with one registered region."""

    def __init__(self, role, mib):
        self.name = f"bench-{role}-{next(_names)}"
        self.agent = nixl_agent(self.name, nixl_agent_config(backends=["UCX"]))
        self.buf = np.zeros(mib << 20, dtype=np.uint8)
        self.reg = self.agent.register_memory(
            [(self.buf.ctypes.data, len(self.buf), 0, "")], mem_type="DRAM"
        )
        self.remotes = {}

    def address(self):
        """What an initiator needs to reach this agent's region (JSON)."""
        meta = base64.b64encode(self.agent.get_agent_metadata()).decode()
        return {"metadata": meta, "base": self.buf.ctypes.data}

    def _remote(self, target):
        meta = target["metadata"]
        if meta not in self.remotes:
            self.remotes[meta] = self.agent.add_remote_agent(base64.b64decode(meta))
        return self.remotes[meta]

    def _dlist(self, agent, base, block, blocks):
        descs = self.agent.get_xfer_descs(
            [(base + i * block, block, 0) for i in range(blocks)], mem_type="DRAM"
        )
        return self.agent.prep_xfer_dlist(agent, descs)

    def prepare(self, target, block, groups):
        """One posting argument per group of block indices (the same at both ends)."""
        remote = self._remote(target)
        blocks = len(self.buf) // block
        local = self._dlist("NIXL_INIT_AGENT", self.buf.ctypes.data, block, blocks)
        far = self._dlist(remote, target["base"], block, blocks)
        return [(local, np.asarray(g, dtype=np.int32), far) for g in groups]

    def post(self, op, batch):
        """Posts one batch; its handle."""
        local, idx, far = batch
        handle = self.agent.make_prepped_xfer(op, local, idx, far, idx)
        state = self.agent.transfer(handle)
        if state == "ERR":
            raise Rejected(f"{op}: transfer returned ERR")
        return handle

    def wait(self, op, handle):
        """Waits for a batch to end, then frees it (failed too)."""
        try:
            while True:
                state = self.agent.check_xfer_state(handle)
                if state == "DONE":
                    return
                if state == "ERR":
                    raise Rejected(f"{op}: check_xfer_state returned ERR")
                time.sleep(NAP_S)
        finally:
            self.agent.release_xfer_handle(handle)

    def release(self, prepared):
        """Frees the descriptor lists `prepare` made (every batch names the same two)."""
        local, _, far = prepared[0]
        self.agent.release_dlist_handle(local)
        self.agent.release_dlist_handle(far)

    def close(self):
        """Unloads the remote agents, deregisters the region and ends the agent, in that order
        (left to the interpreter's exit, NIXL's teardown can crash the process)."""
        for remote in self.remotes.values():
            self.agent.remove_remote_agent(remote)
        self.remotes.clear()
        self.agent.deregister_memory(self.reg)
        del self.agent
