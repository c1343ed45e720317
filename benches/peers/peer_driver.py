#!/usr/bin/env python3
"""The peers of blockwire-bench: the engines users would pick instead, at the bench's geometry.

blockwire-bench writes this driver and its engine modules (`engine_mooncake.py`,
`engine_nixl.py`) into a temporary folder, runs it once per peer with `--engine`, and merges
what it prints into its tables, JSON and plot. The engines:

- `mooncake`: Mooncake's transfer engine over its `tcp` protocol (the python of a virtual
  environment with `mooncake-transfer-engine-non-cuda`; scripts/setup-python.sh installs it
  into target/python-venv).
- `nixl`: NIXL's own Python API with its UCX backend (the `nixl-cu12` wheel that
  scripts/setup-backends.sh unpacks into target/nixl-runtime; the bench puts it on
  `PYTHONPATH`).

It measures at the bench's geometry: for each operation (WRITE, READ) and block size it keeps
`--depth` batches of `--batch` blocks in flight for `--duration` seconds between two registered
regions of `--region-mib` MiB (`--batches` gives each size its own batch: the bench's
`--same-bytes`). Each batch takes the next indices of a fixed
shuffle of the region's blocks (the same indices at both ends) unless `--contiguous`. After
each point it checks the bytes of every block the point moved: a WRITE left the initiator's
pattern in the target's blocks, a READ the target's pattern in the initiator's. It runs with
both engines in this process (`--processes one`), with the target engine in a child process
that it spawns (`two`), or both.

Output, one JSON object a line on standard output:

- `{"point": {...}}`: one measurement, with the fields of the bench's `Point` it knows
  (`op`, `cross_process`, `block_bytes`, `batch`, `depth`, `gbps`, `submit_*`, `complete_*`).
- `{"skipped": "why"}`: what could not be measured (the engine missing, the deadline reached,
  a batch the engine refused or failed: the driver goes on with the next point).

Exit status 0 unless an engine did not start or a transfer moved the wrong bytes (then 1, the
reason on stderr).
"""

import argparse
import importlib
import json
import os
import random
import subprocess
import sys
import time
from collections import deque

HOST = "127.0.0.1"

# The engines this driver knows (a module engine_NAME.py beside it each).
ENGINES = ("mooncake", "nixl")


def emit(obj):
    """One JSON line on standard output."""
    print(json.dumps(obj), flush=True)


class Failure(Exception):
    """The driver cannot go on: an engine did not start, or a transfer moved the wrong bytes."""


class Rejected(Exception):
    """The engine refused or failed a batch: the point is reported skipped, with the reason,
    and the driver goes on with the next one."""


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


def load_engine(name):
    """The engine module `name` (engine_mooncake.py or engine_nixl.py, beside this file)."""
    # The engines import this file by name: let them find this run of it, not a second copy.
    sys.modules.setdefault("peer_driver", sys.modules[__name__])
    module = importlib.import_module(f"engine_{name}")
    LOADED.append(module)
    return module


# The engine module this run loaded (at most one).
LOADED: list = []


def leave(code):
    """Ends the process with `code`: through `os._exit` once output is flushed where the engine
    asks (`SKIP_LIBRARY_DESTRUCTORS`: a library of its own that crashes in its destructors at
    exit), else as usual."""
    if any(getattr(m, "SKIP_LIBRARY_DESTRUCTORS", False) for m in LOADED):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


class LocalTarget:
    """The target engine in this process."""

    cross_process = False

    def __init__(self, engines, mib):
        self.engine = engines.Engine("target", mib)
        self.buf = self.engine.buf
        self.address = self.engine.address()

    def fill(self, block):
        fill(self.buf, block, TARGET)

    def check(self, block, idx):
        return check(self.buf, block, INITIATOR, idx)

    def close(self):
        self.engine.close()


class ChildTarget:
    """The target engine in a child process (this script with `--serve-target`), driven by
    JSON lines on its standard input and output."""

    cross_process = True

    def __init__(self, engines, mib):
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--serve-target", f"--engine={engines.NAME}",
             f"--region-mib={mib}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.address = self._reply()["address"]

    def _reply(self):
        # The engine's own logging may share standard output: only JSON objects are replies.
        while True:
            line = self.child.stdout.readline()
            if not line:
                raise Failure(f"the target process ended (status {self.child.poll()})")
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                break
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


def serve_target(engines, mib):
    """The child's side of ChildTarget: serve until standard input closes."""
    try:
        e = engines.Engine("target", mib)
    except Exception as err:  # reported to the parent, which raises it
        emit({"error": f"{type(err).__name__}: {err}"})
        return 1
    emit({"address": e.address()})
    try:
        serve(e)
    finally:
        e.close()
    return 0


def serve(e):
    """Answers the parent's commands until standard input closes."""
    for line in sys.stdin:
        msg = json.loads(line)
        if "fill" in msg:
            fill(e.buf, msg["fill"], TARGET)
            emit({"ok": True})
        elif "check" in msg:
            emit({"wrong": check(e.buf, msg["check"], INITIATOR, msg["blocks"])})
        else:
            emit({"error": f"unknown command {line.strip()!r}"})


def summary(v):
    """Average and 99th percentile (µs) of `v`, zeros when empty."""
    if not v:
        return 0.0, 0.0
    s = sorted(v)
    return sum(s) / len(s), s[max(1, -(-len(s) * 99 // 100)) - 1]


def point(init, target, op, block, batch, args):
    """One measurement: `op` of `block`-byte blocks, `batch` a batch, then its bytes checked."""
    ibuf = init.buf
    blocks = max(1, len(ibuf) // block)
    batch = min(batch, blocks)
    order = list(range(blocks))
    if not args.contiguous:
        random.Random(blocks).shuffle(order)
    groups = max(1, blocks // batch)
    fill(ibuf, block, INITIATOR)
    target.fill(block)
    lists = init.prepare(
        target.address, block, [order[g * batch : (g + 1) * batch] for g in range(groups)]
    )
    inflight = deque()
    submits, completes = [], []
    k = 0
    cpu = time.thread_time()
    start = time.perf_counter()
    try:
        while True:
            running = time.perf_counter() - start < args.duration
            while running and len(inflight) < args.depth:
                t = time.perf_counter()
                handle = init.post(op, lists[k % groups])
                submits.append((time.perf_counter() - t) * 1e6)
                inflight.append((handle, t))
                k += 1
            if not inflight:
                break
            handle, t = inflight.popleft()
            init.wait(op, handle)
            completes.append((time.perf_counter() - t) * 1e6)
        secs = time.perf_counter() - start
        cpu = time.thread_time() - cpu
    except Rejected as err:
        # The batches still in flight end before their lists are released.
        for handle, _ in inflight:
            try:
                init.wait(op, handle)
            except Rejected:
                pass
        raise Rejected(f"{batch} blocks a batch, {k} posted: {err}") from err
    finally:
        init.release(lists)
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
        # This thread's CPU time (posts and waits), as the bench measures its own caller.
        "caller_cpu_us_per_transfer": cpu * 1e6 / len(completes) if completes else None,
        "verified_blocks": len(moved),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=ENGINES, default="mooncake")
    p.add_argument("--sizes-kib", default="64,1024")
    p.add_argument("--ops", default="write,read")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--duration", type=float, default=1.0)
    p.add_argument("--region-mib", type=int, default=256)
    p.add_argument("--processes", default="one,two", help="one, two, or both (one,two)")
    p.add_argument("--contiguous", action="store_true", help="batches of adjacent blocks")
    p.add_argument(
        "--batches",
        default="",
        help="blocks per batch at each of --sizes-kib, in order (default: --batch at every size)",
    )
    p.add_argument("--deadline", type=float, default=0.0, help="seconds in all (0: none)")
    p.add_argument("--serve-target", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    try:
        engines = load_engine(args.engine)
    except ImportError as err:
        emit({"skipped": f"{sys.executable} cannot import the {args.engine} engine ({err})"})
        return 0
    if args.serve_target:
        return serve_target(engines, args.region_mib)
    began = time.monotonic()
    sizes = [int(s) << 10 for s in args.sizes_kib.split(",") if s]
    batches = [int(b) for b in args.batches.split(",") if b] or [args.batch] * len(sizes)
    if len(batches) != len(sizes):
        raise Failure(f"--batches names {len(batches)} batches for {len(sizes)} sizes")
    ops = [o.upper() for o in args.ops.split(",") if o]
    modes = [m for m in args.processes.split(",") if m]
    init = engines.Engine("initiator", args.region_mib)
    try:
        measure(init, engines, modes, dict(zip(sizes, batches)), ops, began, args)
    finally:
        init.close()
    return 0


def measure(init, engines, modes, sizes, ops, began, args):
    """Every point of every placement in `modes` (`sizes`: block bytes to blocks a batch),
    each printed as it is measured."""
    for mode in modes:
        left = [(op, b) for op in ops for b in sizes]
        if args.deadline and time.monotonic() - began + args.duration > args.deadline:
            emit({"skipped": f"{mode} process(es): the {args.deadline} s deadline was reached"})
            continue
        target = (
            LocalTarget(engines, args.region_mib)
            if mode == "one"
            else ChildTarget(engines, args.region_mib)
        )
        try:
            while left:
                if args.deadline and time.monotonic() - began + args.duration > args.deadline:
                    shown = ", ".join(f"{op} {b >> 10} KiB" for op, b in left)
                    emit({"skipped": f"{mode} process(es), {shown}: the {args.deadline} s deadline was reached"})
                    break
                op, block = left.pop(0)
                try:
                    emit({"point": point(init, target, op, block, sizes[block], args)})
                except Rejected as err:
                    emit({"skipped": f"{mode} process(es), {op} {block >> 10} KiB: {err}"})
        finally:
            target.close()


if __name__ == "__main__":
    try:
        status = main()
    except Failure as err:
        print(f"peer driver: {err}", file=sys.stderr)
        status = 1
    leave(status)
