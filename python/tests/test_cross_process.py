"""Two Python processes (multiprocessing, spawn), descriptors over a pipe: bytes both ways,
READ, notifications, the EC READ + notification round trip, and the target's side (a
target that closes or dies fails the initiator's transfers in bounded time)."""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np
import pytest
from helpers import pattern, settle

import blockwire
from blockwire import ECTransport, P2PTransport
from blockwire.ec import mem_descriptor

CTX = mp.get_context("spawn")


def serve(conn, backend: str, options: dict) -> None:
    """The child: one transport named "child", driven by the parent's commands."""
    mem = np.zeros((16, 4096), np.uint8)
    t = blockwire.Transport(mem, backend, name="child", options=options, stall_timeout=3.0)
    conn.send(t.descriptor())
    while True:
        cmd, *args = conn.recv()
        try:
            if cmd == "add":
                t.add_remote_peer(*args)
                reply = None
            elif cmd == "fill":
                mem[args[0]] = args[1]
                reply = None
            elif cmd == "get":
                reply = bytes(mem[args[0]])
            elif cmd in ("write", "read"):
                peer, local, remote, note = args
                post = t.write_blocks if cmd == "write" else t.read_blocks
                tid = post(peer, local, remote, notification=note)
                done, failed, _ = settle(lambda: t.poll(peer), [tid])
                reply = "done" if done else "failed"
            elif cmd == "notifs":
                deadline = time.monotonic() + 10
                got = []
                while len(got) < args[0] and time.monotonic() < deadline:
                    got += [tuple(n) for n in t.notifications()]
                reply = got
            elif cmd == "close":
                t.close()
                reply = None
            elif cmd == "exit":
                conn.send(None)
                return
            else:
                reply = f"unknown command {cmd}"
        except Exception as e:  # noqa: BLE001 - the parent asserts on it
            reply = ("error", type(e).__name__, str(e))
        conn.send(reply)


class Child:
    def __init__(self, setting):
        self.conn, theirs = CTX.Pipe()
        self.proc = CTX.Process(target=serve, args=(theirs, setting.backend, setting.options))
        self.proc.start()
        self.descriptor = self.answer("start")

    def answer(self, what):
        deadline = time.monotonic() + 60
        while not self.conn.poll(0.1):
            assert self.proc.is_alive(), f"the child died ({self.proc.exitcode}) before {what}"
            assert time.monotonic() < deadline, f"the child did not answer {what}"
        return self.conn.recv()

    def __call__(self, *cmd):
        self.conn.send(cmd)
        return self.answer(cmd[0])

    def stop(self):
        if self.proc.is_alive():
            try:
                self("exit")
            except (AssertionError, OSError, EOFError):
                pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


@pytest.fixture
def child(setting):
    c = Child(setting)
    yield c
    c.stop()


def parent(setting):
    mem = setting.memory()
    return setting.open(mem, name="parent"), mem


def test_write_into_the_other_process(setting, child):
    t, mem = parent(setting)
    t.add_remote_peer("child", child.descriptor)
    pattern(mem, 31)
    tid = t.write_blocks("child", [1, 2], [10, 12])
    assert settle(lambda: t.poll("child"), [tid])[:2] == ([tid], [])
    assert child("get", 10) == bytes(mem[1]) and child("get", 12) == bytes(mem[2])
    assert child("get", 11) == bytes(4096), "a block not written changed"


def test_read_from_the_other_process(setting, child):
    t, mem = parent(setting)
    t.add_remote_peer("child", child.descriptor)
    child("fill", 5, 0x5A)
    tid = t.read_blocks("child", [0], [5])
    assert settle(lambda: t.poll("child"), [tid])[:2] == ([tid], [])
    assert (mem[0] == 0x5A).all() and not mem[1:].any()


def test_the_other_process_writes_with_a_notification(setting, child):
    t, mem = parent(setting)
    assert child("add", "parent", t.descriptor()) is None
    child("fill", 3, 0x33)
    assert child("write", "parent", [3], [7], b"written") == "done"
    got = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        got = t.notifications("child")
    assert got == [("child", b"written")]
    assert (mem[7] == 0x33).all() and not mem[:7].any()


def test_ec_read_with_notification_across_processes(setting, child):
    mem = setting.memory()
    consumer = ECTransport("consumer", mem, **setting.kwargs(), stall_timeout=3.0)
    setting.opened.append(consumer.transport)
    child("fill", 9, 0x99)
    # The child's layout, as its ECTransport.get_mem_descriptor() would give it.
    name = consumer.add_remote_peer(child.descriptor, mem_descriptor(child.descriptor))
    assert name == "child"
    h = consumer.post_read([4], name, [9], b"request-42")
    deadline = time.monotonic() + 20
    while (state := consumer.check_xfer_state(h)) == "PROC":
        assert time.monotonic() < deadline
    assert state == "DONE" and (mem[4] == 0x99).all()
    assert child("notifs", 1) == [("consumer", b"request-42")]


def test_target_closing_fails_transfers_in_bounded_time(setting, child):
    """After the target's close, the initiator's WRITEs fail (or are refused once the peer is
    faulted), and the target's memory, which it may now free, stays as it was."""
    mem = setting.memory()
    mem[:] = 0xAB
    p2p = P2PTransport("parent", mem, **setting.kwargs(), stall_timeout=1.0)
    setting.opened.append(p2p.transport)
    d = blockwire.describe(child.descriptor)
    p2p.add_remote_peer("child", child.descriptor, d["base_addr"], 16, 4096)
    assert child("close") is None
    started = time.monotonic()
    while True:
        tid = p2p.write_blocks("child", [0], [0])
        if tid is None:
            break  # refused: the peer is faulted
        done, failed, _ = settle(lambda: p2p.poll("child"), [tid])
        assert done == [], "a WRITE to a closed target was reported done"
        assert time.monotonic() - started < 20, "the closed target was never judged faulted"
    # The target's side: nothing landed after its close returned.
    assert child("get", 0) == bytes(4096)


def test_target_killed_fails_transfers_in_bounded_time(setting, child):
    t, _ = parent(setting)
    t.add_remote_peer("child", child.descriptor)
    tid = t.write_blocks("child", [0], [0])
    settle(lambda: t.poll("child"), [tid])
    child.proc.kill()
    child.proc.join()
    started = time.monotonic()
    fault = None
    while fault is None:
        try:
            tid = t.write_blocks("child", [1], [1])
            settle(lambda: t.poll("child"), [tid])
        except blockwire.Error:
            pass  # refused: the peer is faulted
        fault = t.poll("child").peer_fault
        assert time.monotonic() - started < 30, "a dead target was never judged faulted"
    assert fault
