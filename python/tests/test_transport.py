"""blockwire.Transport on every backend setting: bytes, errors, notifications, lifetime."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
from helpers import pattern, settle

import blockwire


def pair(setting, num_blocks=16, block_len=4096, **kw):
    a_mem, b_mem = setting.memory(num_blocks, block_len), setting.memory(num_blocks, block_len)
    a = setting.open(a_mem, name="a", **kw)
    b = setting.open(b_mem, name="b", **kw)
    a.add_remote_peer("b", b.descriptor())
    return a, a_mem, b, b_mem


def test_write_lands_where_asked_and_nowhere_else(setting):
    a, a_mem, b, b_mem = pair(setting)
    pattern(a_mem, 1)
    tid = a.write_blocks("b", [0, 3, 9], [5, 7, 15])
    done, failed, _ = settle(lambda: a.poll("b"), [tid])
    assert (done, failed) == ([tid], [])
    for src, dst in [(0, 5), (3, 7), (9, 15)]:
        assert np.array_equal(b_mem[dst], a_mem[src])
    untouched = [i for i in range(16) if i not in (5, 7, 15)]
    assert not b_mem[untouched].any(), "a block not written changed"


def test_read_lands_where_asked(setting):
    a, a_mem, b, b_mem = pair(setting)
    pattern(b_mem, 2)
    tid = a.read_blocks("b", [1, 2], [14, 0])
    assert settle(lambda: a.poll("b"), [tid])[:2] == ([tid], [])
    assert np.array_equal(a_mem[1], b_mem[14]) and np.array_equal(a_mem[2], b_mem[0])
    assert not a_mem[[0] + list(range(3, 16))].any()


def test_index_lists_of_any_kind(setting):
    a, a_mem, b, b_mem = pair(setting)
    pattern(a_mem, 3)
    ids = [
        a.write_blocks("b", (1,), (2,)),
        a.write_blocks("b", np.array([3], dtype=np.int64), np.array([4], dtype=np.uint32)),
        a.write_blocks("b", range(5, 6), iter([6])),
    ]
    assert len(set(ids)) == 3
    assert settle(lambda: a.poll("b"), ids)[1] == []
    assert np.array_equal(b_mem[[2, 4, 6]], a_mem[[1, 3, 5]])


@pytest.mark.parametrize(
    "local, remote, kind",
    [
        ([0, 1], [0], "length_mismatch"),
        ([], [], "empty_transfer"),
        ([16], [0], "local_index_out_of_range"),
        ([0], [16], "remote_index_out_of_range"),
        ([-1], [0], "local_index_out_of_range"),
        ([0], [2**40], "remote_index_out_of_range"),
        ([0, 1], [3, 3], "duplicate_destination"),
        ([0.5], [0], "local_index_out_of_range"),
    ],
)
def test_bad_indices_raise_and_move_nothing(setting, local, remote, kind):
    a, a_mem, b, b_mem = pair(setting)
    pattern(a_mem, 4)
    with pytest.raises(blockwire.InvalidTransferError) as e:
        a.write_blocks("b", local, remote)
    assert e.value.kind == kind
    assert isinstance(e.value, ValueError)
    assert a.inflight_count == 0
    assert not b_mem.any()


def test_unknown_peer(setting):
    a, a_mem, b, b_mem = pair(setting)
    with pytest.raises(blockwire.UnknownPeerError) as e:
        a.write_blocks("nobody", [0], [0])
    assert e.value.kind == "unknown_peer" and "nobody" in str(e.value)
    assert isinstance(e.value, KeyError)
    with pytest.raises(blockwire.UnknownPeerError):
        a.remove_remote_peer("nobody")


def test_altered_descriptor_is_refused(setting):
    a, _, b, _ = pair(setting)
    d = bytearray(b.descriptor())
    for broken in (bytes(d[:10]), b"", b"garbage" * 10, bytes(d) + b"x"):
        with pytest.raises(blockwire.DescriptorError) as e:
            a.add_remote_peer("x", broken)
        assert e.value.kind == "descriptor"
    assert a.peers == ["b"]


def test_geometry_must_agree_with_the_descriptor(setting):
    a, _, b, _ = pair(setting)
    desc = b.descriptor()
    with pytest.raises(blockwire.GeometryMismatchError) as e:
        a.add_remote_peer("x", desc, num_blocks=b.num_blocks + 1)
    assert "num_blocks" in str(e.value)
    with pytest.raises(blockwire.GeometryMismatchError):
        a.add_remote_peer("x", desc, base_addr=b.base_addr + 4096)
    with pytest.raises(blockwire.GeometryMismatchError):
        a.add_remote_peer("x", desc, block_len=b.block_len * 2)
    a.add_remote_peer("x", desc, base_addr=b.base_addr, num_blocks=16, block_len=4096)
    assert a.peers == ["b", "x"]


def test_block_len_and_fingerprint_mismatch(setting):
    a = setting.open(setting.memory(16, 4096), config_fields={"model": "m1"})
    other_len = setting.open(setting.memory(16, 8192), config_fields={"model": "m1"})
    other_cfg = setting.open(setting.memory(16, 4096), config_fields={"model": "m2"})
    with pytest.raises(blockwire.BlockLenMismatchError) as e:
        a.add_remote_peer("x", other_len.descriptor())
    assert e.value.kind == "block_len_mismatch"
    with pytest.raises(blockwire.FingerprintMismatchError) as e:
        a.add_remote_peer("y", other_cfg.descriptor())
    assert e.value.kind == "fingerprint_mismatch"
    assert a.peers == []


def test_notifications_follow_the_data_and_are_drained_once(setting):
    a, a_mem, b, b_mem = pair(setting)
    c = setting.open(setting.memory(), name="c")
    c.add_remote_peer("b", b.descriptor())
    pattern(a_mem, 5)
    tid = a.write_blocks("b", [2], [3], notification=b"blocks ready")
    assert settle(lambda: a.poll("b"), [tid])[:2] == ([tid], [])
    nid = c.notify("b", b"from c")
    assert settle(lambda: c.poll("b"), [nid])[:2] == ([nid], [])
    # The WRITE's notification is delivered before its transfer is reported done, and after
    # its bytes are in place.
    got = b.notifications("a")
    assert got == [blockwire.Notification("a", b"blocks ready")]
    assert np.array_equal(b_mem[3], a_mem[2])
    assert b.notifications("a") == []
    assert b.notifications() == [("c", b"from c")]
    stats = b.notification_stats()
    assert (stats["received"], stats["drained"], stats["queued"]) == (2, 2, 0)


def test_poll_wait_sleeps_until_transfers_end(setting):
    a, a_mem, b, b_mem = pair(setting, num_blocks=16, block_len=1 << 20)
    pattern(a_mem, 5)
    ids = [a.write_blocks("b", [i, i + 8], [i + 8, i]) for i in range(4)]
    seen = []
    t0 = time.monotonic()
    while len(seen) < len(ids):
        r = a.poll_wait("b", timeout=30.0)
        assert r.failed == [] and r.done, f"poll_wait returned {r} with transfers in flight"
        seen += r.done
    assert time.monotonic() - t0 < 15, "poll_wait slept through a transfer's end"
    assert sorted(seen) == sorted(ids)
    for i in range(4):
        assert np.array_equal(b_mem[i + 8], a_mem[i]) and np.array_equal(b_mem[i], a_mem[i + 8])
    # Nothing in flight: at once, empty.
    t0 = time.monotonic()
    assert a.poll_wait("b", timeout=30.0) == ([], [], None)
    assert time.monotonic() - t0 < 15
    with pytest.raises(ValueError):
        a.poll_wait("b", timeout=-1)
    with pytest.raises(ValueError):
        a.poll_wait("b", timeout=float("nan"))


def test_notification_too_long_moves_nothing(setting):
    a, a_mem, b, b_mem = pair(setting)
    pattern(a_mem, 6)
    with pytest.raises(blockwire.InvalidTransferError) as e:
        a.write_blocks("b", [0], [0], notification=b"x" * (blockwire.MAX_NOTIFICATION_LEN + 1))
    assert e.value.kind == "notification_too_long"
    assert not b_mem.any() and b.notifications() == []


def test_buffer_must_be_writable_2d_contiguous():
    with pytest.raises(blockwire.InvalidBufferError, match="read-only"):
        blockwire.Transport(memoryview(bytes(4096)).cast("B", (1, 4096)))
    with pytest.raises(blockwire.InvalidBufferError, match="2-D"):
        blockwire.Transport(np.zeros(4096, np.uint8))
    with pytest.raises(blockwire.InvalidBufferError, match="contiguous"):
        blockwire.Transport(np.zeros((8, 4096), np.uint8)[::2])
    with pytest.raises(blockwire.InvalidBufferError, match="buffer protocol"):
        blockwire.Transport([[0] * 16])
    with pytest.raises(blockwire.InvalidBufferError, match="empty"):
        blockwire.Transport(np.zeros((0, 4096), np.uint8))
    with pytest.raises(blockwire.UnknownBackendError) as e:
        blockwire.Transport(np.zeros((2, 64), np.uint8), "carrier-pigeon")
    assert "shm" in str(e.value)
    with pytest.raises(blockwire.BadNameError):
        blockwire.Transport(np.zeros((2, 64), np.uint8), name="")


def test_block_len_counts_bytes_of_any_dtype(setting):
    mem = np.zeros((4, 512), dtype=np.float16)
    t = setting.open(mem)
    assert (t.num_blocks, t.block_len) == (4, 1024)
    assert t.base_addr == mem.ctypes.data


def test_buffer_stays_referenced_until_close(setting):
    """The transport keeps the memory exported (a bytearray cannot be resized meanwhile);
    a close that revoked every peer's access releases it."""
    raw = bytearray(16 * 4096)
    t = setting.open(memoryview(raw).cast("B", (16, 4096)))
    with pytest.raises(BufferError):
        raw.extend(b"x")
    t.close()
    gc.collect()
    if t.revokes_access:
        raw.extend(b"x")  # released
    else:
        with pytest.raises(BufferError):
            raw.extend(b"x")  # kept for the process's lifetime: a peer may still reach it


def test_memory_outlives_the_callers_reference(setting):
    a, a_mem, b, b_mem = pair(setting)
    del b_mem
    gc.collect()
    pattern(a_mem, 7)
    tid = a.write_blocks("b", [1], [1])
    assert settle(lambda: a.poll("b"), [tid])[:2] == ([tid], [])
    back = a.read_blocks("b", [2], [1])
    assert settle(lambda: a.poll("b"), [back])[:2] == ([back], [])
    assert np.array_equal(a_mem[2], a_mem[1])


def test_close_is_idempotent_and_refuses_every_later_call(setting):
    a, _, b, _ = pair(setting)
    a.close()
    a.close()
    assert a.closed
    calls = [
        lambda: a.descriptor(),
        lambda: a.add_remote_peer("b", b.descriptor()),
        lambda: a.remove_remote_peer("b"),
        lambda: a.write_blocks("b", [0], [0]),
        lambda: a.read_blocks("b", [0], [0]),
        lambda: a.notify("b", b"x"),
        lambda: a.poll(),
        lambda: a.poll("b"),
        lambda: a.poll_wait("b", 1.0),
        lambda: a.cancel([1], "wait"),
        lambda: a.notifications(),
    ]
    for call in calls:
        with pytest.raises(blockwire.ClosedError) as e:
            call()
        assert e.value.kind == "closed"
    fut = a.add_remote_peer_async("b", b.descriptor())
    with pytest.raises(blockwire.ClosedError):
        fut.result(timeout=10)
    assert (a.num_blocks, a.block_len) == (16, 4096)  # properties stay readable


def test_context_manager_closes(setting):
    with setting.open() as t:
        assert not t.closed
    assert t.closed


def test_repr_shows_backend_geometry_and_peers(setting):
    a, _, _, _ = pair(setting)
    r = repr(a)
    assert f"backend='{setting.backend}'" in r and "16 x 4096 B" in r and "peers=1" in r


def test_threads_share_one_transport(setting):
    """Python threads post and poll their own peers on one transport at once: every id is
    reported once, to its own peer's poll, and every byte lands."""
    a_mem = setting.memory(32, 4096)
    pattern(a_mem, 8)
    a = setting.open(a_mem, name="hub")
    targets = []
    for i in range(4):
        mem = setting.memory(32, 4096)
        t = setting.open(mem, name=f"t{i}")
        a.add_remote_peer(f"t{i}", t.descriptor())
        targets.append(mem)
    errors: list[BaseException] = []

    def run(i):
        try:
            ids = [a.write_blocks(f"t{i}", [k], [31 - k]) for k in range(32)]
            done, failed, _ = settle(lambda: a.poll(f"t{i}"), ids)
            assert sorted(done) == sorted(ids) and failed == []
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    for mem in targets:
        assert np.array_equal(mem[::-1], a_mem)


def test_telemetry(setting):
    a, a_mem, b, _ = pair(setting, telemetry=True)
    tid = a.write_blocks("b", [0, 1], [0, 1])
    settle(lambda: a.poll("b"), [tid])
    stats = a.telemetry()["b"]
    assert stats["done"] == 1 and stats["bytes"] == 2 * 4096 and stats["failed"] == {}
    assert stats["latency"]["count"] == 1 and stats["latency"]["max"] > 0
    assert setting.open().telemetry() is None


def test_describe(setting):
    a, _, b, _ = pair(setting)
    d = blockwire.describe(b.descriptor())
    assert d["backend"] == setting.backend and d["name"] == "b"
    assert (d["base_addr"], d["num_blocks"], d["block_len"]) == (b.base_addr, 16, 4096)


def test_nixl_handshake_helpers_need_the_nixl_backend():
    if "nixl" in blockwire.backends():
        pytest.skip("this build has nixl: test_nixl_interop.py covers the NIXL handshake")
    with pytest.raises(blockwire.UnsupportedError):
        blockwire.descriptor_from_nixl(b"nixlSerDes|", 0x1000, 1, 4096)
    with pytest.raises(blockwire.UnsupportedError):
        blockwire.nixl_agent_metadata(b"BWPD")
