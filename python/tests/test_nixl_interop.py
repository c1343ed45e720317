"""Wire compatibility with plain NIXL agents (issue 17): a blockwire P2PTransport on the nixl
backend (this process) against a plain NIXL agent driven from NIXL's own Python API in another
process (nixl_plain_agent.py: the ``nixl_cu12`` package of target/nixl-runtime, numpy only,
set up the way vLLM 0.33.0's NixlTransport does it).

The handshake is vLLM's: each side hands the other ``(agent_metadata, base_addr, num_blocks,
block_len)``, blockwire's ``get_agent_metadata()`` being NIXL's raw metadata. Then WRITE and
READ in both directions, each with a notification, bytes verified, at 4 KiB and 1 MiB
blocks, with UCX's default transports, with ``UCX_TLS=cma,tcp`` and with ``UCX_TLS=tcp`` on
both sides; then the names: a second peer with a name already loaded, a
peer named like this transport, a restarted peer re-added after its remove.

Runs where the build has the nixl backend and the runtime is unpacked; otherwise skipped
with the reason, never passed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import selected_backends

import blockwire
from blockwire import P2PTransport

HERE = Path(__file__).resolve().parent
AGENT = HERE / "nixl_plain_agent.py"


def runtime_root() -> Path:
    """The unpacked nixl-cu12 wheel: where blockwire-nixl finds its libraries, and where the
    ``nixl_cu12`` Python package is."""
    lib_dir = os.environ.get("BLOCKWIRE_NIXL_LIB_DIR")
    if lib_dir:
        return Path(lib_dir).resolve().parent
    return HERE.parents[1] / "target" / "nixl-runtime"


def skip_reason() -> str | None:
    if "nixl" not in blockwire.backends():
        return "this build of blockwire has no nixl backend (feature `nixl`)"
    if "nixl" not in selected_backends():
        return "nixl not among BLOCKWIRE_TEST_BACKENDS (it runs in a pytest of its own)"
    root = runtime_root()
    if not (root / "nixl_cu12").is_dir():
        return f"no NIXL runtime at {root} (run scripts/setup-backends.sh)"
    return None


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

#: ``UCX_TLS`` on both sides: UCX's defaults, cma (RMA of host memory by cross-memory
#: attach; tcp for the rest: NIXL 1.5.1's UCX plugin does not open with shared memory alone,
#: it fails to connect its agent to itself), and TCP only. (The plugin's ``engine_config``
#: parameter cannot carry a list: ``TLS=cma,tcp`` there fails, ``UCX_TLS`` does not.)
TLS = {"default": None, "cma": "cma,tcp", "tcp": "tcp"}


def pattern(seed: int, n: int) -> np.ndarray:
    # The same bytes nixl_plain_agent.py writes for a seed.
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def digest(block: np.ndarray) -> str:
    return hashlib.sha256(block.tobytes()).hexdigest()


class PlainAgent:
    """The child process: one plain NIXL agent."""

    def __init__(
        self, name: str, num_blocks: int, block_len: int, tls: str | None, pieces: int = 1
    ) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(runtime_root())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env.setdefault("UCX_MODULES", "^ib*")
        if tls:
            env["UCX_TLS"] = tls
        else:
            env.pop("UCX_TLS", None)
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), name, str(num_blocks), str(block_len), str(pieces)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        hello = self._answer(timeout=60)
        if hello.get("unavailable"):
            self.close()
            pytest.skip(f"the plain NIXL agent cannot start here: {hello['error']}")
        self.hello = hello
        self.name = hello["name"]
        self.metadata = bytes.fromhex(hello["metadata"])

    def _answer(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("@@"):
                answer = json.loads(line[2:])
                assert "error" not in answer or answer.get("unavailable"), self._fail(answer)
                return answer
        raise AssertionError(self._fail({"error": "no answer (exited or timed out)"}))

    def _fail(self, answer: dict) -> str:
        self.log.seek(0)
        return f"plain agent: {answer.get('error')}\n--- its stderr ---\n{self.log.read()[-4000:]}"

    def request(self, cmd: str, **kw) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def add(self, t: P2PTransport) -> str:
        """The blockwire transport as this agent's peer, from vLLM's tuple."""
        r = self.request(
            "add",
            metadata=t.get_agent_metadata().hex(),
            base_addr=t.base_addr,
            num_blocks=t.num_blocks,
            block_len=t.block_len,
        )
        return r["name"]

    def xfer(self, op: str, peer: str, local, remote, notif: bytes) -> None:
        r = self.request("xfer", op=op, peer=peer, local=local, remote=remote, notif=notif.hex())
        assert r["state"] == "DONE", r

    def notifs(self, want: int) -> dict[str, list[bytes]]:
        got = self.request("notifs", want=want)["notifs"]
        return {k: [bytes.fromhex(m) for m in v] for k, v in got.items()}

    def kill(self) -> None:
        """As a crashed peer: no goodbye."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def agents():
    started: list[PlainAgent] = []

    def start(name, num_blocks, block_len, tls=None, pieces=1):
        a = PlainAgent(name, num_blocks, block_len, tls, pieces)
        started.append(a)
        return a

    yield start
    for a in started:
        a.close()


def blockwire_side(name: str, num_blocks: int, block_len: int, tls: str | None):
    mem = np.zeros((num_blocks, block_len), dtype=np.uint8)
    # UCX reads UCX_TLS when NIXL creates the agent's UCX backend, at open.
    saved = os.environ.pop("UCX_TLS", None)
    if tls:
        os.environ["UCX_TLS"] = tls
    try:
        t = P2PTransport(name, mem, backend="nixl", stall_timeout=20.0)
    finally:
        os.environ.pop("UCX_TLS", None)
        if saved is not None:
            os.environ["UCX_TLS"] = saved
    return t, mem


def wait_done(t: P2PTransport, peer: str, tid: int | None) -> None:
    assert tid is not None, "not submitted (see the warning logged)"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = t.poll(peer)
        assert tid not in r.failed, f"transfer {tid} failed: {r}"
        if tid in r.done:
            return
        time.sleep(0.001)
    raise AssertionError(f"transfer {tid} never finished")


def wait_notifications(t: P2PTransport, sender: str, want: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < want and time.monotonic() < deadline:
        got += [n.message for n in t.transport.notifications(sender)]
        time.sleep(0.001)
    return got


@pytest.mark.parametrize("block_len", [4096, 1 << 20], ids=["4KiB", "1MiB"])
@pytest.mark.parametrize("tls", list(TLS), ids=list(TLS))
def test_blocks_and_notifications_both_ways(agents, tls, block_len):
    n = 8
    bw, mem = blockwire_side(f"bw-interop-{tls}-{block_len}", n, block_len, TLS[tls])
    try:
        plain = agents(f"plain-interop-{tls}-{block_len}", n, block_len, TLS[tls])
        print(f"NIXL on the plain agent's side: nixl-cu12 {plain.hello['nixl_version']}")
        # vLLM's handshake, both ways, with the tuples as they are.
        bw.add_remote_peer(
            "plain", plain.metadata, plain.hello["base_addr"], n, block_len
        )
        me = plain.add(bw)
        assert me == bw.agent_name

        # The plain agent WRITEs into blockwire with a notification.
        for i, seed in [(0, 10), (1, 11)]:
            plain.request("fill", block=i, seed=seed)
        plain.xfer("WRITE", me, [0, 1], [2, 3], b"wrote 2,3")
        assert wait_notifications(bw, plain.name, 1) == [b"wrote 2,3"]
        assert np.array_equal(mem[2], pattern(10, block_len))
        assert np.array_equal(mem[3], pattern(11, block_len))

        # The plain agent READs blockwire's block with a notification (the EC connector's
        # post_read): blockwire, whose blocks were read, is told.
        mem[4] = pattern(12, block_len)
        plain.xfer("READ", me, [5], [4], b"read 4")
        assert plain.request("digest", block=5)["digest"] == digest(mem[4])
        assert wait_notifications(bw, plain.name, 1) == [b"read 4"]

        # blockwire WRITEs into the plain agent: vLLM's write_blocks, then with a notification.
        mem[6] = pattern(13, block_len)
        wait_done(bw, "plain", bw.write_blocks("plain", [6], [6]))
        assert plain.request("digest", block=6)["digest"] == digest(mem[6])
        mem[0] = pattern(14, block_len)
        wait_done(bw, "plain", bw.transport.write_blocks("plain", [0], [0], notification=b"w0"))
        assert plain.request("digest", block=0)["digest"] == digest(mem[0])

        # blockwire READs the plain agent's block with a notification, then notifies alone.
        plain.request("fill", block=7, seed=15)
        wait_done(bw, "plain", bw.transport.read_blocks("plain", [7], [7], notification=b"r7"))
        assert np.array_equal(mem[7], pattern(15, block_len))
        wait_done(bw, "plain", bw.transport.notify("plain", b"hello"))
        # The payloads exactly as given, under blockwire's agent name, in order.
        assert plain.notifs(want=3) == {me: [b"w0", b"r7", b"hello"]}
    finally:
        bw.close()


def test_a_peer_registered_in_pieces(agents):
    """A plain agent that registered its region as two descriptors (blocks 0 to 3, 4 to 7):
    scattered blocks and runs of adjacent blocks, within a piece and across the two, move both
    ways and land where they should, and nowhere else."""
    n, block_len = 8, 4096
    bw, mem = blockwire_side("bw-pieces", n, block_len, None)
    try:
        plain = agents("plain-pieces", n, block_len, pieces=2)
        bw.add_remote_peer("plain", plain.metadata, plain.hello["base_addr"], n, block_len)
        for i in range(n):
            mem[i] = pattern(30 + i, block_len)
        # One block in each piece; a run in the first piece; a run across the two.
        for blocks in ([0, 5], [1, 2], [3, 4]):
            wait_done(bw, "plain", bw.write_blocks("plain", blocks, blocks))
        for i in range(6):
            assert plain.request("digest", block=i)["digest"] == digest(mem[i]), f"block {i}"
        zeros = digest(np.zeros(block_len, dtype=np.uint8))
        for i in (6, 7):
            assert plain.request("digest", block=i)["digest"] == zeros, f"block {i} written"

        # READs: a run across the pieces into a run here, and scattered blocks.
        for i in (3, 4, 0, 7):
            plain.request("fill", block=i, seed=40 + i)
        wait_done(bw, "plain", bw.transport.read_blocks("plain", [6, 7], [3, 4]))
        wait_done(bw, "plain", bw.transport.read_blocks("plain", [0, 1], [0, 7]))
        for local, remote in ((6, 3), (7, 4), (0, 0), (1, 7)):
            assert np.array_equal(mem[local], pattern(40 + remote, block_len)), f"block {local}"
        for i in range(2, 6):
            assert np.array_equal(mem[i], pattern(30 + i, block_len)), f"block {i} overwritten"
    finally:
        bw.close()

def test_names_loaded_twice_own_name_and_a_restarted_peer(agents):
    n, block_len = 4, 4096
    bw, mem = blockwire_side("bw-names", n, block_len, None)
    try:
        first = agents("plain-names", n, block_len)
        # The helpers under P2PTransport: a descriptor from vLLM's tuple names the agent, and
        # this side's raw NIXL metadata is what get_agent_metadata() hands out.
        d = blockwire.describe(
            blockwire.descriptor_from_nixl(first.metadata, first.hello["base_addr"], n, block_len)
        )
        assert (d["backend"], d["name"], d["num_blocks"]) == ("nixl", "plain-names", n)
        raw = blockwire.nixl_agent_metadata(bw.transport.descriptor())
        assert raw == bw.get_agent_metadata() and raw.startswith(b"nixlSerDes|")
        bw.add_remote_peer("a", first.metadata, first.hello["base_addr"], n, block_len)
        assert first.add(bw) == "bw-names"

        # The peer restarts under its name (a new process, new metadata) before this side
        # removed its former self: NIXL keys agents by name, so it is refused, typed.
        first.kill()
        second = agents("plain-names", n, block_len)
        with pytest.raises(blockwire.NameInUseError) as e:
            bw.add_remote_peer("a2", second.metadata, second.hello["base_addr"], n, block_len)
        assert e.value.kind == "name_in_use" and "plain-names" in str(e.value)
        assert isinstance(e.value, blockwire.ConnectError)

        # A peer named like this transport: refused, typed.
        twin = agents("bw-names", n, block_len)
        with pytest.raises(blockwire.NameInUseError):
            bw.add_remote_peer("twin", twin.metadata, twin.hello["base_addr"], n, block_len)
        assert sorted(bw.transport.peers) == ["a"]

        # Removed, the restarted peer is added again and works both ways.
        bw.remove_remote_peer("a")
        bw.add_remote_peer("a", second.metadata, second.hello["base_addr"], n, block_len)
        assert second.add(bw) == "bw-names"
        mem[1] = pattern(21, block_len)
        wait_done(bw, "a", bw.transport.write_blocks("a", [1], [2], notification=b"again"))
        assert second.request("digest", block=2)["digest"] == digest(mem[1])
        assert second.notifs(want=1) == {"bw-names": [b"again"]}
        second.request("fill", block=3, seed=22)
        second.xfer("WRITE", "bw-names", [3], [0], b"back")
        assert wait_notifications(bw, "plain-names", 1) == [b"back"]
        assert np.array_equal(mem[0], pattern(22, block_len))
    finally:
        bw.close()
