"""What Python users rely on beyond the contract: fingerprints equal to Python's formula,
logging, pickling of errors, the GIL released while the library waits."""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import threading
import time

import numpy as np
import pytest
from helpers import settle

import blockwire


def python_fingerprint(fields):
    if not fields:
        return ""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    "fields",
    [
        None,
        {},
        {"model": "meta-llama/Llama-3-8B", "dtype": "bfloat16", "block_size": 16},
        {"z": 1, "a": {"y": [1, 2.5, None, True, False], "b": "é✓𝄞"}},
        {"floats": [0.1, 1e-05, 1e16, 1.5e16, -0.0, 1e300, 5e-324, 123456789.125]},
        {"big": 2**70, "neg": -(2**65), "zero": 0},
        {"tab\t": "quote\" backslash\\ nl\n ctl\x01 del\x7f"},
        {"tuple": (1, 2), "nested": [[[]]], "empty": {}},
    ],
)
def test_fingerprint_equals_pythons_formula(fields):
    assert blockwire.fingerprint(fields) == python_fingerprint(fields)
    if fields:
        t = blockwire.Transport(np.zeros((2, 64), np.uint8), config_fields=fields)
        assert t.config_fingerprint == python_fingerprint(fields)
        t.close()


@pytest.mark.parametrize(
    "fields, why",
    [
        ({1: "int key"}, "not a str"),
        ({"x": float("nan")}, "not JSON"),
        ({"x": float("inf")}, "not JSON"),
        ({"x": object()}, "not JSON serializable"),
        ([1, 2], "must be a dict"),
    ],
)
def test_fingerprint_refuses_what_it_cannot_match(fields, why):
    with pytest.raises(blockwire.errors.ConfigError, match=why):
        blockwire.fingerprint(fields)


def test_rust_events_reach_python_logging(caplog):
    """The library's tracing events arrive as records of loggers named after the Rust
    module (blockwire.*)."""
    caplog.set_level(logging.DEBUG, logger="blockwire")
    blockwire.reset_logging_cache()
    a = blockwire.Transport(np.zeros((4, 4096), np.uint8), name="log-a")
    b = blockwire.Transport(np.zeros((4, 4096), np.uint8), name="log-b")
    a.add_remote_peer("b", b.descriptor())
    settle(lambda: a.poll("b"), [a.write_blocks("b", [0], [0])])
    a.remove_remote_peer("b")
    a.close()
    b.close()
    names = {r.name for r in caplog.records}
    # The transport's own module, and the backend crate's, both under "blockwire".
    assert "blockwire.block_transport" in names, names
    assert any(n.startswith("blockwire.shm") for n in names), names
    assert all(n.startswith("blockwire") for n in names), names
    caplog.set_level(logging.WARNING, logger="blockwire")
    blockwire.reset_logging_cache()


def test_errors_pickle_with_their_kind():
    e = blockwire.UnknownPeerError('unknown peer "x"', "unknown_peer")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is blockwire.UnknownPeerError
    assert (back.kind, str(back)) == ("unknown_peer", 'unknown peer "x"')
    assert issubclass(blockwire.FingerprintMismatchError, blockwire.PeerMismatchError)
    assert issubclass(blockwire.PeerMismatchError, blockwire.Error)


def test_the_gil_is_released_while_close_waits():
    """close() waits for a large transfer to stop; a Python thread keeps running meanwhile."""
    block_len = 8 << 20
    # One chunk a transfer (its 16 blocks are one run of 128 MiB): close, which comes right
    # after the copy threads began, waits for their chunks in progress (an shm close waits for
    # nothing else: the transfers still queued stop at once).
    opts = {"chunk_bytes": str(16 * block_len)}
    a = blockwire.Transport(np.ones((16, block_len), np.uint8), options=opts, close_timeout=10.0)
    b = blockwire.Transport(np.zeros((16, block_len), np.uint8))
    a.add_remote_peer("b", b.descriptor())
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.0002)

    th = threading.Thread(target=tick)
    th.start()
    try:
        for _ in range(8):
            a.write_blocks("b", list(range(16)), list(range(16)))
        before = len(ticks)
        started = time.monotonic()
        a.close()
        took = time.monotonic() - started
        during = len(ticks) - before
    finally:
        stop.set()
        th.join()
        b.close()
    if took < 0.005:
        pytest.skip(f"close took {took * 1000:.1f} ms: too short to watch another thread run")
    # While close ran (it waited for chunks of 128 MiB), the other thread ran too.
    assert during > 0, f"no Python thread ran during a {took:.3f}s close"


def test_backends_lists_this_build():
    assert "shm" in blockwire.backends()
    assert blockwire.MAX_NOTIFICATION_LEN == 4096
