"""blockwire.vllm against vLLM 0.33.0's own ABC files, loaded by path as the modules vLLM
defines them in: the adapters subclass them (isinstance holds, nothing abstract is left) and
every method has the ABC's signature, so a drift on either side fails here.

The files are found in ``$BLOCKWIRE_VLLM_REFERENCE`` (a folder holding
``vllm-0.33.0-p2p-data-base.py`` and ``vllm-0.33.0-ec-data-base.py``), in ``target/vllm-reference``
(``scripts/setup-python.sh`` extracts them from the vLLM 0.33.0 wheel) or in
``../shared/reference`` beside the repository.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import inspect
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from helpers import settle

import blockwire
import blockwire.vllm

P2P_FILE = "vllm-0.33.0-p2p-data-base.py"
EC_FILE = "vllm-0.33.0-ec-data-base.py"


def reference_dir() -> Path | None:
    candidates = []
    if os.environ.get("BLOCKWIRE_VLLM_REFERENCE"):
        candidates.append(Path(os.environ["BLOCKWIRE_VLLM_REFERENCE"]))
    repo = Path(__file__).resolve().parents[2]
    candidates.append(repo / "target" / "vllm-reference")  # scripts/setup-python.sh
    candidates.append(repo.parent / "shared" / "reference")
    for c in candidates:
        if (c / P2P_FILE).is_file() and (c / EC_FILE).is_file():
            return c
    return None


REFERENCE = reference_dir()


def load_as(module_name: str, path: Path) -> types.ModuleType:
    """Executes ``path`` as ``module_name``, with empty parent packages."""
    parts = module_name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            m = types.ModuleType(pkg)
            m.__path__ = []
            sys.modules[pkg] = m
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def vllm_abcs():
    """vLLM's ABC modules in sys.modules, and blockwire.vllm reloaded over them."""
    if REFERENCE is None:
        pytest.skip(
            "vLLM 0.33.0's ABC files not found: run scripts/setup-python.sh "
            "or set BLOCKWIRE_VLLM_REFERENCE"
        )
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    if saved:
        pytest.skip("a real vLLM is imported in this process")
    p2p = load_as(blockwire.vllm.P2P_BASE_MODULE, REFERENCE / P2P_FILE)
    ec = load_as(blockwire.vllm.EC_BASE_MODULE, REFERENCE / EC_FILE)
    adapters = importlib.reload(blockwire.vllm)
    try:
        yield p2p.DataTransport, ec.DataTransport, adapters
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        importlib.reload(blockwire.vllm)


def public_members(abc: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(abc)
        if not name.startswith("_") and name in {n for k in abc.__mro__[:-1] for n in vars(k)}
    }


def assert_same_signatures(ours: type, abc: type) -> None:
    members = public_members(abc)
    assert members, "the ABC lists nothing public"
    for name, member in members.items():
        mine = inspect.getattr_static(ours, name)
        theirs = inspect.getattr_static(abc, name)
        if isinstance(theirs, property):
            assert isinstance(mine, property), f"{name} is a property in the ABC"
            continue
        if isinstance(theirs, (staticmethod, classmethod)):
            continue
        got = inspect.signature(getattr(ours, name))
        want = inspect.signature(member)
        describe = lambda sig: [(p.name, p.kind, p.default) for p in sig.parameters.values()]
        assert describe(got) == describe(want), f"{ours.__name__}.{name}{got} != ABC {want}"


def test_p2p_subclasses_vllm_and_matches_every_signature(vllm_abcs, setting):
    p2p_abc, _, adapters = vllm_abcs
    assert adapters.VLLM_P2P_BASE is p2p_abc
    assert issubclass(adapters.BlockwireP2PTransport, p2p_abc)
    assert_same_signatures(adapters.BlockwireP2PTransport, p2p_abc)
    assert not getattr(adapters.BlockwireP2PTransport, "__abstractmethods__", set())
    mem_a = np.zeros((8, 4096), np.uint8)
    mem_b = np.zeros((8, 4096), np.uint8)
    a = adapters.BlockwireP2PTransport("a", mem_a, {"model": "m"}, **setting.kwargs())
    b = adapters.BlockwireP2PTransport("b", mem_b, {"model": "m"}, **setting.kwargs())
    try:
        assert isinstance(a, p2p_abc)
        # The ABC's own fingerprint formula gives the same string.
        assert a.config_fingerprint == p2p_abc._compute_fingerprint({"model": "m"})
        a.add_remote_peer_async(
            "b", b.get_agent_metadata(), b.base_addr, b.num_blocks, b.block_len
        ).result(timeout=20)
        mem_a[2] = 9
        tid = a.write_blocks("b", [2], [6])
        done, _, _ = settle(lambda: a.poll("b"), [tid])
        assert done == [tid] and (mem_b[6] == 9).all()
        result = a.poll("b")
        assert isinstance(result, tuple) and result._fields == ("done", "failed", "peer_fault")
    finally:
        a.close()
        b.close()


def test_ec_subclasses_vllm_and_matches_every_signature(vllm_abcs, setting):
    _, ec_abc, adapters = vllm_abcs
    assert issubclass(adapters.BlockwireECTransport, ec_abc)
    assert_same_signatures(adapters.BlockwireECTransport, ec_abc)
    t = adapters.BlockwireECTransport("ec", np.zeros((4, 4096), np.uint8), **setting.kwargs())
    try:
        assert isinstance(t, ec_abc)
    finally:
        t.deregister()


def test_without_vllm_the_classes_stand_alone():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    assert blockwire.vllm.VLLM_P2P_BASE is None and blockwire.vllm.VLLM_EC_BASE is None
    assert blockwire.vllm.BlockwireP2PTransport.__mro__[1] is blockwire.P2PTransport
    t = blockwire.vllm.BlockwireP2PTransport("alone", np.zeros((2, 64), np.uint8))
    t.close()


def test_use_in_vllm_replaces_the_managers_transport(vllm_abcs, setting):
    """vLLM's manager builds ``NixlTransport(name, view, config_fields=..., backends=...,
    num_threads=...)``; after use_in_vllm that call site builds a blockwire transport."""
    p2p_abc, _, adapters = vllm_abcs
    manager = types.ModuleType(adapters.P2P_MANAGER_MODULE)
    manager.NixlTransport = object
    sys.modules[adapters.P2P_MANAGER_MODULE] = manager
    installed = adapters.use_in_vllm(setting.backend, setting.options)
    assert manager.NixlTransport is installed
    view = memoryview(bytearray(8 * 4096)).cast("B", (8, 4096))
    # The shape of vLLM 0.33's call site.
    t = manager.NixlTransport(
        "3b8f6a52-5d1e-4c1a-9a56-0c1f2a7b9e11",
        view,
        config_fields={"model": "m", "block_size": 16},
        backends=["UCX"],
        num_threads=4,
    )
    try:
        assert isinstance(t, p2p_abc) and t.transport.backend == setting.backend
        assert t.config_fingerprint == p2p_abc._compute_fingerprint({"model": "m", "block_size": 16})
        # The address the ABC's own constructor computes for this view.
        assert t.base_addr == ctypes.addressof(ctypes.c_char.from_buffer(view))
        assert (t.num_blocks, t.block_len) == (8, 4096)
    finally:
        t.close()
