"""WRITE throughput through the Python binding against the Rust bench, in one run.

Per backend and block size: a WRITE throughput point of the Rust bench (``blockwire-bench
--ops write --measures throughput``, its JSON read from a ``--results`` folder), then the
same point through ``blockwire.Transport``: two transports in this process over numpy
regions of ``--region-mib`` MiB, ``--depth`` transfers of ``--batch`` blocks kept in flight
for ``--duration`` s as ``pump`` in benches/src/measure/pump.rs does (transfer ``n`` moves
the blocks of group ``n % (blocks // batch)`` to the same indices on the peer; GB/s counts
the transfers ``poll(peer)`` reported done, the wait for the last ones included). The regions
are page-aligned and without numpy's huge-page madvise (``--numpy-hugepages`` keeps it), as
the Rust bench's ``Region::new``. ``--rounds N`` runs N pairs back to back, Rust first in
every other one, and shows medians: the machines are shared, compare ratios of one run.
Columns: GB/s of each, Python/Rust, the average time in ``write_blocks`` of each, and
Python's overhead per transfer, the extra wall time a transfer costs at Python's rate,
``bytes_per_transfer * (1/py - 1/rust)``, in µs.

Build the extension in release first, then run it from anywhere::

    cd python && maturin develop --release [--features ucx,libfabric]
    python python/bench/bench_write.py                       # shm, 64 KiB and 1 MiB
    python python/bench/bench_write.py --duration 0.2        # a quick run
    python python/bench/bench_write.py --backends ucx --opt ucx:tls=posix,cma,peer_errors=false

The Rust bench runs as ``cargo run --release -q -p blockwire-bench`` from the repository
root (building it first, quietly), with the features ucx/libfabric this extension has (and
those asked for), or as ``--bench-bin PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import blockwire

ROOT = Path(__file__).resolve().parents[2]
PEER = "b"  # the Rust bench's id for the remote side (benches/src/remote.rs)


def parse_opts(opts: list[str], backend: str) -> dict[str, str]:
    """``BACKEND:k=v,...`` settings for ``backend``, as the Rust CLI reads them (an item
    without ``=`` continues the previous value: ``tls=posix,cma``)."""
    out: dict[str, str] = {}
    for o in opts:
        head, sep, items = o.partition(":")
        if head != backend or not sep:
            continue
        last = None
        for item in (i.strip() for i in items.split(",")):
            if "=" in item:
                k, v = item.split("=", 1)
                last = k.strip()
                out[last] = v.strip()
            elif item and last is not None:
                out[last] += "," + item
            elif item:
                raise SystemExit(f"--opt {o!r}: {item!r} is not key=value")
    return out


def bench_command(args) -> list[str]:
    if args.bench_bin:  # a path is taken from the caller's folder (the bench runs in ROOT)
        return [os.path.abspath(args.bench_bin) if os.sep in args.bench_bin else args.bench_bin]
    extra = {b for b in blockwire.backends() if b in ("ucx", "libfabric")}
    extra |= {b for b in args.backends if b != "shm"}
    features = ["--features", ",".join(sorted(extra))] if extra else []
    return ["cargo", "run", "--release", "-q", "-p", "blockwire-bench", *features, "--"]


def rust_point(args, backend: str, kib: int) -> dict:
    """One WRITE throughput point of the Rust bench (its `Point` JSON)."""
    with tempfile.TemporaryDirectory(prefix="bw-pybench-") as tmp:
        cmd = bench_command(args) + [
            f"--backends={backend}", "--ops=write", "--measures=throughput",
            f"--sizes-kib={kib}", f"--batch={args.batch}", f"--depth={args.depth}",
            f"--duration={args.duration}", f"--region-mib={args.region_mib}",
            f"--results={tmp}", *(f"--opt={o}" for o in args.opt),
        ]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"Rust bench failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        runs = sorted(Path(tmp).glob("run-*/results.json"))
        if not runs:
            sys.exit(f"Rust bench wrote no results.json: {' '.join(cmd)}\n{p.stdout}")
        run = json.loads(runs[-1].read_text())
    points = [q for q in run["points"] if q["backend"] == backend and q["op"] == "WRITE"]
    if not points:
        sys.exit(f"Rust bench measured no {backend} WRITE point: {run.get('skipped')}")
    return points[0]


def region(blocks: int, block: int) -> np.ndarray:
    """Zeroed, page-aligned memory as Region::new allocates (numpy's is 16 B past a page)."""
    raw = np.zeros(blocks * block + 4096, np.uint8)
    off = -raw.ctypes.data % 4096
    return raw[off:off + blocks * block].reshape(blocks, block)


def python_point(args, backend: str, kib: int) -> dict:
    """The same point through blockwire.Transport (as the bench's `throughput` and `pump`)."""
    block = kib << 10
    blocks = max((args.region_mib << 20) // block, 1)
    batch = min(args.batch, blocks)
    groups = max(blocks // batch, 1)
    options = parse_opts(args.opt, backend)
    mems, ts = [], []
    for pattern in (241, 251):  # as the Rust bench: the remote side first, then filled
        mems.append(region(blocks, block))
        ts.append(blockwire.Transport(mems[-1], backend, options=dict(options)))
        mems[-1][:] = (np.arange(blocks) % pattern).astype(np.uint8)[:, None]
    (b_mem, a_mem), (b, a) = mems, ts
    a.add_remote_peer(PEER, b.descriptor())
    clock = time.perf_counter
    submits, completes, inflight, nxt = [], [], {}, 0  # inflight: transfer id -> submit time
    start = clock()
    while True:
        running = clock() - start < args.duration
        while running and len(inflight) < args.depth:
            first = (nxt % groups) * batch
            nxt += 1
            idx = list(range(first, first + batch))
            t = clock()
            tid = a.write_blocks(PEER, idx, idx)
            submits.append(clock() - t)
            inflight[tid] = t
        if not inflight:
            break
        r = a.poll(PEER)
        if r.failed or r.peer_fault:
            raise SystemExit(f"{backend} {kib} KiB: transfers {list(r.failed)} failed "
                             f"(peer fault: {r.peer_fault})")
        if not r.done:
            os.sched_yield()  # leave the cores to the data path, as the Rust pump does
        now = clock()
        for tid in r.done:
            t = inflight.pop(tid, None)
            if t is not None:
                completes.append(now - t)
    secs = clock() - start
    gbps = len(completes) * batch * block / secs / 1e9
    verify(a, a_mem, b_mem, backend)
    a.close()
    b.close()
    return {"gbps": gbps, "transfers": len(completes), "blocks": blocks, "batch": batch,
            "submit_avg_us": 1e6 * sum(submits) / max(len(submits), 1),
            "complete_avg_us": 1e6 * sum(completes) / max(len(completes), 1)}


def verify(a, a_mem, b_mem, backend: str, timeout: float = 10.0) -> None:
    """Nothing left in flight, and the bytes of one block land where they were sent."""
    if a.in_flight(PEER):
        raise SystemExit(f"{backend}: {a.in_flight(PEER)} transfers still in flight")
    last = len(a_mem) - 1
    a_mem[0] = (np.arange(a_mem.shape[1]) * 7 + 3).astype(np.uint8)
    b_mem[last] = 0
    tid = a.write_blocks(PEER, [0], [last])
    deadline = time.monotonic() + timeout
    while tid not in (r := a.poll(PEER)).done:
        if tid in r.failed or r.peer_fault or time.monotonic() > deadline:
            raise SystemExit(f"{backend}: the check transfer failed or took over {timeout}s "
                             f"(failed {list(r.failed)}, peer fault {r.peer_fault})")
        time.sleep(0.0001)
    if not np.array_equal(a_mem[0], b_mem[last]):
        raise SystemExit(f"{backend}: block 0 did not land in the peer's block {last}")


def median(points: list[dict]) -> dict:
    """The point of median GB/s (the lower middle one of an even count)."""
    return sorted(points, key=lambda q: q["gbps"])[(len(points) - 1) // 2]


def numpy_hugepages(on: bool) -> None:
    """Turns numpy's MADV_HUGEPAGE on large allocations on or off (a private switch)."""
    core = np._core if hasattr(np, "_core") else np.core  # numpy 2, numpy 1
    core.multiarray._set_madvise_hugepage(on)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    csv = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    p.add_argument("--backends", type=csv, default=["shm"], help="comma-separated (default shm)")
    p.add_argument("--sizes-kib", type=lambda s: [int(x) for x in csv(s)], default=[64, 1024],
                   help="block sizes in KiB (default 64,1024)")
    p.add_argument("--batch", type=int, default=16, help="blocks per transfer (default 16)")
    p.add_argument("--depth", type=int, default=4, help="transfers in flight (default 4)")
    p.add_argument("--duration", type=float, default=1.0, help="seconds per point (default 1)")
    p.add_argument("--region-mib", type=int, default=256, help="MiB per region (default 256)")
    p.add_argument("--rounds", type=int, default=1, help="Rust/Python pairs per point (medians)")
    p.add_argument("--opt", action="append", default=[], metavar="BACKEND:k=v,...",
                   help="backend options (repeatable), given to both benches")
    p.add_argument("--bench-bin", help="a built blockwire-bench (default: cargo run --release)")
    p.add_argument("--numpy-hugepages", action="store_true",
                   help="keep numpy's huge-page madvise for the Python regions")
    p.add_argument("--json", metavar="OUT", help="also write the rows as JSON to OUT")
    args = p.parse_args()
    if min(args.batch, args.depth, args.region_mib, args.rounds) < 1 or args.duration <= 0:
        p.error("--batch, --depth, --region-mib, --rounds must be at least 1, --duration > 0")
    missing = [b for b in args.backends if b not in blockwire.backends()]
    if missing:
        p.error(f"{missing}: not in this build of blockwire ({blockwire.backends()})")

    numpy_hugepages(args.numpy_hugepages)
    print(f"WRITE, batch {args.batch}, depth {args.depth}, {args.duration} s per point, "
          f"regions of {args.region_mib} MiB, {args.rounds} round(s) (medians); "
          f"opts {args.opt or 'none'}{'; numpy huge pages' if args.numpy_hugepages else ''}")
    print(f"{'backend':>10} {'block':>7} {'rust GB/s':>10} {'py GB/s':>8} {'py/rust':>8} "
          f"{'rust sub':>9} {'py sub':>8} {'py ovh/xfer':>12}")
    rows = []
    for backend in args.backends:
        for kib in args.sizes_kib:
            rust, py = [], []
            pair = [lambda: rust.append(rust_point(args, backend, kib)),
                    lambda: py.append(python_point(args, backend, kib))]
            for i in range(args.rounds):  # Rust first in even rounds, Python in odd ones
                for measure in pair if i % 2 == 0 else pair[::-1]:
                    measure()
            r, q = median(rust), median(py)
            xfer_bytes = q["batch"] * (kib << 10)
            overhead_us = xfer_bytes * (1 / q["gbps"] - 1 / r["gbps"]) / 1e3
            row = {"backend": backend, "block_kib": kib, "batch": q["batch"],
                   "depth": args.depth, "duration": args.duration,
                   "region_mib": args.region_mib, "numpy_hugepages": args.numpy_hugepages,
                   "options": parse_opts(args.opt, backend), "rounds": args.rounds,
                   "rust_gbps": r["gbps"], "python_gbps": q["gbps"],
                   "ratio": q["gbps"] / r["gbps"], "python_overhead_us": overhead_us,
                   "rust_submit_avg_us": r["submit_avg_us"],
                   "python_submit_avg_us": q["submit_avg_us"],
                   "rust_complete_avg_us": r["complete_avg_us"],
                   "python_complete_avg_us": q["complete_avg_us"],
                   "rust_rounds_gbps": [x["gbps"] for x in rust],
                   "python_rounds_gbps": [x["gbps"] for x in py], "rust_points": rust}
            rows.append(row)
            print(f"{backend:>10} {kib:>6}K {r['gbps']:>10.2f} {q['gbps']:>8.2f} "
                  f"{row['ratio']:>8.3f} {r['submit_avg_us']:>7.1f}us "
                  f"{q['submit_avg_us']:>6.1f}us {overhead_us:>10.1f}us", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=2) + "\n")
        print(f"JSON: {args.json}")


if __name__ == "__main__":
    main()
