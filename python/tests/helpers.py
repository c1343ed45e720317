"""Shared test helpers."""

from __future__ import annotations

import time

import numpy as np

TIMEOUT = 20.0


def settle(poll, ids, timeout: float = TIMEOUT):
    """Polls until every id in ``ids`` surfaced; returns (done, failed, faults) as lists.

    Fails if an id surfaces twice or one not asked about surfaces.
    """
    want = set(ids)
    done: list[int] = []
    failed: list[int] = []
    faults: list[str] = []
    deadline = time.monotonic() + timeout
    while want - set(done) - set(failed):
        r = poll()
        for tid in list(r.done) + list(r.failed):
            assert tid in want, f"transfer {tid} surfaced, not one of {sorted(want)}"
            assert tid not in done and tid not in failed, f"transfer {tid} surfaced twice"
        done.extend(r.done)
        failed.extend(r.failed)
        if r.peer_fault:
            faults.append(r.peer_fault)
        if time.monotonic() > deadline:
            raise AssertionError(
                f"transfers {sorted(want - set(done) - set(failed))} did not surface in {timeout}s"
            )
        time.sleep(0.0005)
    return done, failed, faults


def pattern(mem: np.ndarray, seed: int) -> None:
    """Fills every block with bytes depending on the block and the seed."""
    rows, cols = mem.shape
    mem[:] = ((np.arange(rows * cols, dtype=np.uint64).reshape(rows, cols) * 7 + seed * 131 + 1)
              % 251).astype(np.uint8)
