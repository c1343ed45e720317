#!/usr/bin/env python3
"""Mooncake's transfer engine as a peer of blockwire-bench.

blockwire-bench runs this driver with the python of a virtual environment that has
`mooncake-transfer-engine-non-cuda` (scripts/setup-python.sh installs it into
target/python-venv) and merges what it prints into its tables, JSON and plot.

It measures at the bench's geometry: for each operation (WRITE, READ) and block size it keeps
`--depth` batches of `--batch` blocks in flight for `--duration` seconds between two registered
regions of `--region-mib` MiB, over Mooncake's `tcp` protocol with `P2PHANDSHAKE` metadata.
Each batch takes the next `--batch` indices of a fixed shuffle of the region's blocks (the
same indices at both ends) unless `--contiguous`. After each point it checks the bytes of every
block the point moved: a WRITE left the initiator's pattern in the target's blocks, a READ the
target's pattern in the initiator's. It runs with both engines in this process
(`--processes one`), with the target engine in a child process that it spawns (`two`), or both.

Output, one JSON object a line on standard output:

- `{"point": {...}}`: one measurement, with the fields of the bench's `Point` it knows
  (`op`, `cross_process`, `block_bytes`, `batch`, `depth`, `gbps`, `submit_*`, `complete_*`).
- `{"skipped": "why"}`: what could not be measured (mooncake missing, the deadline reached).

Exit status 0 unless a transfer failed or its bytes were wrong (then 1, the reason on stderr).
"""

import argparse
import json
import random
import subprocess
import sys
import time
from collections import deque

HOST = "127.0.0.1"


def emit(obj):
    """One JSON line on standard output."""
    print(json.dumps(obj), flush=True)


class Failure(Exception):
    """A transfer failed or moved the wrong bytes."""


# The fill byte of block i: INITIATOR + i % 127 on the initiator, TARGET + i % 127 on the
# target, so that no block of one side ever looks like the same block of the other.
INITIATOR, TARGET = 0, 128


def pattern(blocks, side):
    """The fill byte of each of `blocks` blocks on `side` (INITIATOR or TARGET)."""
    import numpy as np

    return (side + np.arange(blocks, dtype=np.int64) % 127).astype(np.uint8)


def fill(buf, block, side):
    """Fills each `block`-byte block of `buf` with its pattern byte on `side`."""
    blocks = len(buf) // block
    buf[: blocks * block].reshape(blocks, block)[:] = pattern(blocks, side)[:, None]


def check(buf, block, side, idx):
    """None if every block of `idx` in `buf` holds its pattern of `side`, else what is wrong."""
    import numpy as np

    blocks = len(buf) // block
    view = buf[: blocks * block].reshape(blocks, block)
    want = pattern(blocks, side)
    idx = np.asarray(idx, dtype=np.int64)
    # In slices, so that the check never copies more than a few MiB at a time.
    step = max(1, (8 << 20) // block)
    for at in range(0, len(idx), step):
        part = idx[at : at + step]
        wrong = view[part] != want[part][:, None]
        bad = np.nonzero(wrong.any(axis=1))[0]
        if len(bad):
            i = int(part[bad[0]])
            off = int(np.argmax(wrong[bad[0]]))
            return (
                f"block {i} byte {off} holds {int(view[i][off])}, not {int(want[i])} "
                f"({len(idx)} blocks checked)"
            )
    return None


def engine():
    """A transfer engine on loopback over Mooncake's tcp protocol."""
    from mooncake.engine import TransferEngine

    e = TransferEngine()
    rc = e.initialize(HOST, "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise Failure(f"TransferEngine.initialize returned {rc}")
    return e


def region(e, mib):
    """A registered numpy region of `mib` MiB."""
    import numpy as np

    buf = np.zeros(mib << 20, dtype=np.uint8)
    rc = e.register_memory(buf.ctypes.data, len(buf))
    if rc != 0:
        raise Failure(f"register_memory of {mib} MiB returned {rc}")
    return buf


class LocalTarget:
    """The target engine in this process."""

    cross_process = False

    def __init__(self, mib):
        self.engine = engine()
        self.buf = region(self.engine, mib)
        self.hostname = f"{HOST}:{self.engine.get_rpc_port()}"
        self.base = self.buf.ctypes.data

    def fill(self, block):
        fill(self.buf, block, TARGET)

    def check(self, block, idx):
        return check(self.buf, block, INITIATOR, idx)

    def close(self):
        pass


class ChildTarget:
    """The target engine in a child process (this script with `--serve-target`), driven by
    JSON lines on its standard input and output."""

    cross_process = True

    def __init__(self, mib):
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--serve-target", f"--region-mib={mib}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self._reply()
        self.hostname, self.base = hello["hostname"], hello["base"]

    def _reply(self):
        line = self.child.stdout.readline()
        if not line:
            raise Failure(f"the target process ended (status {self.child.poll()})")
        msg = json.loads(line)
        if "error" in msg:
            raise Failure(f"target process: {msg['error']}")
        return msg

    def _ask(self, msg):
        self.child.stdin.write(json.dumps(msg) + "\n")
        self.child.stdin.flush()
        return self._reply()

    def fill(self, block):
        self._ask({"fill": block})

    def check(self, block, idx):
        return self._ask({"check": block, "blocks": [int(i) for i in idx]}).get("wrong")

    def close(self):
        self.child.stdin.close()
        self.child.wait(timeout=30)


def serve_target(mib):
    """The child's side of ChildTarget: serve until standard input closes."""
    try:
        e = engine()
        buf = region(e, mib)
    except Exception as err:  # reported to the parent, which raises it
        emit({"error": f"{type(err).__name__}: {err}"})
        return 1
    emit({"hostname": f"{HOST}:{e.get_rpc_port()}", "base": buf.ctypes.data})
    for line in sys.stdin:
        msg = json.loads(line)
        if "fill" in msg:
            fill(buf, msg["fill"], TARGET)
            emit({"ok": True})
        elif "check" in msg:
            emit({"wrong": check(buf, msg["check"], INITIATOR, msg["blocks"])})
        else:
            emit({"error": f"unknown command {line.strip()!r}"})
    return 0


def summary(v):
    """Average and 99th percentile (µs) of `v`, zeros when empty."""
    if not v:
        return 0.0, 0.0
    s = sorted(v)
    return sum(s) / len(s), s[max(1, -(-len(s) * 99 // 100)) - 1]


def point(init, ibuf, target, op, block, args):
    """One measurement: `op` of `block`-byte blocks, then its bytes checked."""
    blocks = max(1, len(ibuf) // block)
    batch = min(args.batch, blocks)
    order = list(range(blocks))
    if not args.contiguous:
        random.Random(blocks).shuffle(order)
    groups = max(1, blocks // batch)
    fill(ibuf, block, INITIATOR)
    target.fill(block)
    lbase, rbase = ibuf.ctypes.data, target.base
    lists = []
    for g in range(groups):
        idx = order[g * batch : (g + 1) * batch]
        lists.append(
            ([lbase + i * block for i in idx], [rbase + i * block for i in idx], [block] * len(idx))
        )
    post = init.batch_transfer_async_write if op == "WRITE" else init.batch_transfer_async_read
    inflight = deque()
    submits, completes = [], []
    k = 0
    start = time.perf_counter()
    run_for = args.duration
    while True:
        running = time.perf_counter() - start < run_for
        while running and len(inflight) < args.depth:
            local, remote, lengths = lists[k % groups]
            t = time.perf_counter()
            bid = post(target.hostname, local, remote, lengths)
            submits.append((time.perf_counter() - t) * 1e6)
            if bid == 0:
                raise Failure(f"{op} batch {k}: submit returned 0")
            inflight.append((bid, t))
            k += 1
        if not inflight:
            break
        bid, t = inflight.popleft()
        # Waits for the batch, and frees it once it is done: never ask twice.
        status = init.get_batch_transfer_status([bid])
        if status != 0:
            raise Failure(f"{op} of {block}-byte blocks: batch status {status}")
        completes.append((time.perf_counter() - t) * 1e6)
    secs = time.perf_counter() - start
    moved = order[: min(k, groups) * batch]
    wrong = (
        target.check(block, moved) if op == "WRITE" else check(ibuf, block, TARGET, moved)
    )
    if wrong:
        raise Failure(f"{op} of {block}-byte blocks moved the wrong bytes: {wrong}")
    s_avg, s_p99 = summary(submits)
    c_avg, c_p99 = summary(completes)
    return {
        "op": op,
        "cross_process": target.cross_process,
        "block_bytes": block,
        "batch": batch,
        "depth": args.depth,
        "gbps": len(completes) * batch * block / secs / 1e9,
        "submit_avg_us": s_avg,
        "submit_p99_us": s_p99,
        "complete_avg_us": c_avg,
        "complete_p99_us": c_p99,
        "verified_blocks": len(moved),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-kib", default="64,1024")
    p.add_argument("--ops", default="write,read")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--duration", type=float, default=1.0)
    p.add_argument("--region-mib", type=int, default=256)
    p.add_argument("--processes", default="one,two", help="one, two, or both (one,two)")
    p.add_argument("--contiguous", action="store_true", help="batches of adjacent blocks")
    p.add_argument("--deadline", type=float, default=0.0, help="seconds in all (0: none)")
    p.add_argument("--serve-target", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    try:
        import numpy  # noqa: F401
        from mooncake.engine import TransferEngine  # noqa: F401
    except ImportError as err:
        emit({"skipped": f"{sys.executable} cannot import numpy and mooncake.engine ({err})"})
        return 0
    if args.serve_target:
        return serve_target(args.region_mib)
    began = time.monotonic()
    sizes = [int(s) << 10 for s in args.sizes_kib.split(",") if s]
    ops = [o.upper() for o in args.ops.split(",") if o]
    modes = [m for m in args.processes.split(",") if m]
    init = engine()
    ibuf = region(init, args.region_mib)
    for mode in modes:
        left = [(op, b) for op in ops for b in sizes]
        if args.deadline and time.monotonic() - began + args.duration > args.deadline:
            emit({"skipped": f"{mode} process(es): the {args.deadline} s deadline was reached"})
            continue
        target = LocalTarget(args.region_mib) if mode == "one" else ChildTarget(args.region_mib)
        try:
            while left:
                if args.deadline and time.monotonic() - began + args.duration > args.deadline:
                    shown = ", ".join(f"{op} {b >> 10} KiB" for op, b in left)
                    emit({"skipped": f"{mode} process(es), {shown}: the {args.deadline} s deadline was reached"})
                    break
                op, block = left.pop(0)
                emit({"point": point(init, ibuf, target, op, block, args)})
        finally:
            target.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as err:
        print(f"mooncake driver: {err}", file=sys.stderr)
        sys.exit(1)
