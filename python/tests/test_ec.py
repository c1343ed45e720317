"""The encoder-cache connector's DataTransport (vllm-0.33.0-ec-data-base.py) through
blockwire.ECTransport: READ with a notification, on every backend setting."""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers import TIMEOUT, pattern

import blockwire
from blockwire import ECTransport


def ec(setting, name, num_blocks=16, block_len=4096):
    mem = setting.memory(num_blocks, block_len)
    t = ECTransport(name, mem, **setting.kwargs(), stall_timeout=3.0)
    setting.opened.append(t.transport)
    return t, mem


def wait_state(t, h):
    deadline = time.monotonic() + TIMEOUT
    while (state := t.check_xfer_state(h)) == "PROC":
        assert time.monotonic() < deadline, "the READ never finished"
        time.sleep(0.0005)
    return state


def test_read_with_notification_round_trip(setting):
    producer, p_mem = ec(setting, "encoder-0")
    consumer, c_mem = ec(setting, "llm-0")
    pattern(p_mem, 21)
    name = consumer.add_remote_peer(producer.get_agent_metadata(), producer.get_mem_descriptor())
    assert name == "encoder-0"
    h = consumer.post_read([0, 1, 2], name, [9, 4, 15], b"mm-hash-1234")
    # No notification before the READ is complete.
    early = producer.get_new_notifs()
    assert early in ({}, {"llm-0": [b"mm-hash-1234"]})
    assert wait_state(consumer, h) == "DONE"
    assert consumer.check_xfer_state(h) == "DONE", "a finished state stays until released"
    notifs = early or producer.get_new_notifs()
    assert notifs == {"llm-0": [b"mm-hash-1234"]}
    assert producer.get_new_notifs() == {}, "each notification is drained once"
    assert np.array_equal(c_mem[[0, 1, 2]], p_mem[[9, 4, 15]])
    assert not c_mem[3:].any()
    consumer.release_xfer_handle(h)
    assert consumer.check_xfer_state(h).startswith("ERR")


def test_many_reads_each_notified_once(setting):
    producer, p_mem = ec(setting, "enc")
    consumer, _ = ec(setting, "llm")
    name = consumer.add_remote_peer(producer.get_agent_metadata(), producer.get_mem_descriptor())
    handles = [consumer.post_read([i], name, [i], f"m{i}".encode()) for i in range(16)]
    for h in handles:
        assert wait_state(consumer, h) == "DONE"
        consumer.release_xfer_handle(h)
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 16:
        got += producer.get_new_notifs().get("llm", [])
        assert time.monotonic() < deadline
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(16))


def test_post_read_refuses_bad_input(setting):
    producer, _ = ec(setting, "enc")
    consumer, c_mem = ec(setting, "llm")
    name = consumer.add_remote_peer(producer.get_agent_metadata(), producer.get_mem_descriptor())
    with pytest.raises(ValueError):
        consumer.post_read([0, 1], name, [0], b"x")
    with pytest.raises(KeyError):
        consumer.post_read([0], "nobody", [0], b"x")
    with pytest.raises(blockwire.InvalidTransferError):
        consumer.post_read([0], name, [99], b"x")
    with pytest.raises(blockwire.DescriptorError):
        consumer.add_remote_peer(producer.get_agent_metadata(), b"not a layout")
    with pytest.raises(blockwire.GeometryMismatchError):
        consumer.add_remote_peer(
            producer.get_agent_metadata(), consumer.get_mem_descriptor().replace(b"16", b"17")
        )
    time.sleep(0.05)
    assert producer.get_new_notifs() == {}


def test_remove_and_deregister(setting):
    producer, _ = ec(setting, "enc")
    consumer, _ = ec(setting, "llm")
    name = consumer.add_remote_peer(producer.get_agent_metadata(), producer.get_mem_descriptor())
    consumer.remove_remote_peer(name)
    consumer.remove_remote_peer(name)  # unknown now: logged, ignored
    with pytest.raises(KeyError):
        consumer.post_read([0], name, [0], b"x")
    consumer.deregister()
    consumer.deregister()
    with pytest.raises(blockwire.ClosedError):
        consumer.get_new_notifs()


def test_repr_of_an_instance_whose_init_raised():
    # What a traceback or a debugger shows for `self` inside a failed `__init__`.
    t = ECTransport.__new__(ECTransport)
    with pytest.raises(blockwire.InvalidBufferError):
        t.__init__("x", "not a buffer")
    assert repr(t) == "ECTransport(agent_name='x', not initialized)"
