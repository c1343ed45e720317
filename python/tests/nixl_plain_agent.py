"""A plain NIXL agent, driven over stdin/stdout: the other side of test_nixl_interop.py.

It uses NIXL's own Python API only (the ``nixl_cu12`` package of the runtime that
scripts/setup-backends.sh unpacks, on PYTHONPATH) and numpy, no torch and no blockwire, and
sets itself up step for step the way vLLM 0.33.0's ``NixlTransport`` does: an agent with no
default backend, the UCX backend created with vLLM's parameters, one DRAM registration of the
whole region, one descriptor per block prepared as the local list (``NIXL_INIT_AGENT``), a
peer added with ``add_remote_agent`` plus one descriptor per block of its region prepared
under its name, transfers with ``make_prepped_xfer`` + ``transfer`` + ``check_xfer_state``.

Usage: ``python nixl_plain_agent.py NAME NUM_BLOCKS BLOCK_LEN [PIECES]``: with ``PIECES`` (a
divisor of ``NUM_BLOCKS``, 1 by default) the region is registered as that many descriptors of
equal size instead of one, as an agent that registers its cache in pieces does. Requests are
JSON lines on stdin; each answer is one line on stdout starting with ``@@`` (anything else
there is a library's and ignored by the test). Bytes travel as hex.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

import numpy as np


def pattern(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def reply(**kw) -> None:
    sys.stdout.write("@@" + json.dumps(kw) + "\n")
    sys.stdout.flush()


def main() -> None:
    name, num_blocks, block_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    pieces = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if pieces < 1 or num_blocks % pieces:
        sys.exit(f"PIECES ({pieces}) must divide NUM_BLOCKS ({num_blocks})")
    try:
        from importlib.metadata import version

        from nixl_cu12 import nixl_agent, nixl_agent_config
    except Exception as exc:  # reported as the reason the test is skipped
        reply(error=f"cannot import nixl_cu12: {type(exc).__name__}: {exc}", unavailable=True)
        return
    try:
        nixl_version = version("nixl-cu12")
    except Exception:
        nixl_version = "unknown"

    mem = np.zeros((num_blocks, block_len), dtype=np.uint8)
    base = mem.ctypes.data
    # As NixlTransport._init does for backends=["UCX"].
    agent = nixl_agent(name, nixl_agent_config(backends=[], capture_telemetry=True))
    agent.create_backend("UCX", {"engine_config": "TLS=^rc_gda", "num_threads": "2"})
    piece = num_blocks // pieces * block_len
    reg = agent.register_memory(
        [(base + k * piece, piece, 0, "") for k in range(pieces)], mem_type="DRAM"
    )
    blocks = [(base + i * block_len, block_len, 0) for i in range(num_blocks)]
    local = agent.prep_xfer_dlist(
        "NIXL_INIT_AGENT", agent.get_xfer_descs(blocks, mem_type="DRAM")
    )
    reply(
        metadata=agent.get_agent_metadata().hex(),
        base_addr=base,
        num_blocks=num_blocks,
        block_len=block_len,
        name=name,
        nixl_version=nixl_version,
    )
    remotes: dict[str, object] = {}
    inbox: dict[str, list[bytes]] = {}

    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        try:
            if cmd == "add":
                # As NixlTransport._build_peer_handles.
                peer = agent.add_remote_agent(bytes.fromhex(req["metadata"]))
                if isinstance(peer, bytes):
                    peer = peer.decode()
                descs = [
                    (req["base_addr"] + i * req["block_len"], req["block_len"], 0)
                    for i in range(req["num_blocks"])
                ]
                remotes[peer] = agent.prep_xfer_dlist(
                    peer, agent.get_xfer_descs(descs, mem_type="DRAM")
                )
                reply(name=peer)
            elif cmd == "remove":
                agent.release_dlist_handle(remotes.pop(req["name"]))
                agent.remove_remote_agent(req["name"])
                reply(ok=True)
            elif cmd == "fill":
                mem[req["block"]] = pattern(req["seed"], block_len)
                reply(ok=True)
            elif cmd == "digest":
                reply(digest=hashlib.sha256(mem[req["block"]].tobytes()).hexdigest())
            elif cmd == "xfer":
                # As NixlTransport.write_blocks (and the EC connector's post_read).
                handle = agent.make_prepped_xfer(
                    req["op"],
                    local,
                    np.asarray(req["local"], dtype=np.int32),
                    remotes[req["peer"]],
                    np.asarray(req["remote"], dtype=np.int32),
                    notif_msg=bytes.fromhex(req.get("notif", "")),
                )
                state = agent.transfer(handle)
                deadline = time.monotonic() + 30
                while state not in ("DONE", "ERR") and time.monotonic() < deadline:
                    state = agent.check_xfer_state(handle)
                agent.release_xfer_handle(handle)
                reply(state=state)
            elif cmd == "notifs":
                # Waits until `want` messages arrived (or the timeout), then hands them all.
                deadline = time.monotonic() + req.get("timeout", 20)
                while True:
                    for sender, msgs in agent.get_new_notifs().items():
                        inbox.setdefault(sender, []).extend(msgs)
                    if sum(map(len, inbox.values())) >= req["want"]:
                        break
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.001)
                got = {k: [m.hex() for m in v] for k, v in inbox.items()}
                inbox.clear()
                reply(notifs=got)
            elif cmd == "quit":
                break
            else:
                reply(error=f"unknown command {cmd!r}")
        except Exception as exc:
            reply(error=f"{type(exc).__name__}: {exc}")
    for handle in remotes.values():
        agent.release_dlist_handle(handle)
    agent.release_dlist_handle(local)
    agent.deregister_memory(reg)
    reply(bye=True)


if __name__ == "__main__":
    main()
