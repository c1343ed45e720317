"""The encoder-cache connector's data transport, over a blockwire :class:`~blockwire.Transport`.

:class:`ECTransport` has the methods of vLLM's
``vllm.distributed.ec_transfer.ec_connector.cpu.data.base.DataTransport``: the consumer READs
the producer's blocks with a notification message (``post_read``), and the producer learns
from ``get_new_notifs`` that it may free them. The message reaches the producer only after
the READ is complete, and a READ that failed or was cancelled sends none (the Rust
transport's rules).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, NamedTuple

from ._native import Transport, describe
from .errors import DescriptorError, UnknownPeerError

logger = logging.getLogger(__name__)

__all__ = ["ECTransport", "TransferHandle", "mem_descriptor"]

#: What ``check_xfer_state`` returns for a finished transfer.
DONE = "DONE"
#: What ``check_xfer_state`` returns for a transfer still running.
PROC = "PROC"


def mem_descriptor(agent_metadata: bytes) -> bytes:
    """The block layout :meth:`ECTransport.get_mem_descriptor` gives, for the transport whose
    metadata (descriptor) this is."""
    d = describe(agent_metadata)
    layout = {k: d[k] for k in ("base_addr", "num_blocks", "block_len")}
    return json.dumps(layout, sort_keys=True).encode()


class TransferHandle(NamedTuple):
    """A READ posted by :meth:`ECTransport.post_read`."""

    transfer_id: int
    agent_name: str


class ECTransport:
    """vLLM's encoder-cache ``DataTransport`` over blockwire.

    Args:
        agent_name: This transport's name: the key under which peers' ``get_new_notifs``
            list the messages it sends.
        view: The local block memory, ``num_blocks x block_size_bytes``, 2-D, writable and
            C-contiguous (a numpy array, a ``memoryview``).
        backend: As for :class:`blockwire.Transport`.
        options: The backend's options.
        **transport_options: Passed to :class:`blockwire.Transport`.

    Example::

        import numpy as np
        from blockwire import ECTransport

        producer = ECTransport("encoder-0", np.zeros((16, 4096), np.uint8))
        consumer = ECTransport("llm-0", np.zeros((16, 4096), np.uint8))
        name = consumer.add_remote_peer(producer.get_agent_metadata(),
                                        producer.get_mem_descriptor())
        h = consumer.post_read([0, 1], name, [4, 5], b"req-7")
        while consumer.check_xfer_state(h) == "PROC":
            pass
        consumer.release_xfer_handle(h)
        assert producer.get_new_notifs() == {"llm-0": [b"req-7"]}
    """

    def __init__(
        self,
        agent_name: str,
        view: Any,
        backend: str = "shm",
        options: dict[str, Any] | None = None,
        **transport_options: Any,
    ) -> None:
        self._agent_name = agent_name
        self._transport = Transport(
            view, backend, name=agent_name, options=options, **transport_options
        )
        self._lock = threading.Lock()
        # Posted and not yet seen finished; finished: id -> "DONE" or the failure's text,
        # until released.
        self._posted: set[int] = set()
        self._finished: dict[int, str] = {}

    @property
    def transport(self) -> Transport:
        """The underlying :class:`blockwire.Transport`."""
        return self._transport

    @property
    def agent_name(self) -> str:
        """This transport's name."""
        return self._agent_name

    def get_agent_metadata(self) -> bytes:
        """This transport's metadata, for a peer's ``add_remote_peer``."""
        return self._transport.descriptor()

    def get_mem_descriptor(self) -> bytes:
        """The block layout (address, count, length), for a peer's ``add_remote_peer``."""
        return mem_descriptor(self._transport.descriptor())

    def add_remote_peer(self, metadata: bytes, mem_descriptor: bytes) -> str:
        """Registers a peer from its metadata and block layout; returns its agent name.

        Raises:
            DescriptorError: malformed metadata or layout.
            GeometryMismatchError: the layout disagrees with the metadata.
        """
        try:
            layout = json.loads(mem_descriptor)
            base_addr, num_blocks, block_len = (
                int(layout["base_addr"]),
                int(layout["num_blocks"]),
                int(layout["block_len"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise DescriptorError(f"malformed memory descriptor: {exc}", "descriptor") from exc
        agent_name = str(describe(metadata)["name"])
        self._transport.add_remote_peer(
            agent_name,
            metadata,
            base_addr=base_addr,
            num_blocks=num_blocks,
            block_len=block_len,
        )
        return agent_name

    def remove_remote_peer(self, agent_name: str) -> None:
        """Unregisters a peer (an unknown one is logged and ignored)."""
        try:
            self._transport.remove_remote_peer(agent_name)
        except UnknownPeerError:
            logger.warning("ECTransport %s: remove of unknown peer %s", self._agent_name, agent_name)

    def post_read(
        self,
        local_indices: list[int],
        agent_name: str,
        remote_indices: list[int],
        notif_msg: bytes,
    ) -> TransferHandle:
        """READs the peer's ``remote_indices`` into ``local_indices``; the peer receives
        ``notif_msg`` once the READ is complete.

        Raises:
            InvalidTransferError: the lists differ in length, are empty, or name a block out
                of range (a :class:`ValueError`).
            UnknownPeerError: ``agent_name`` is not registered (a :class:`KeyError`).
        """
        with self._lock:
            tid = self._transport.read_blocks(
                agent_name, local_indices, remote_indices, notification=bytes(notif_msg)
            )
            self._posted.add(tid)
        return TransferHandle(tid, agent_name)

    def get_new_notifs(self) -> dict[str, list[bytes]]:
        """Notifications received since the last call, by sender, in arrival order."""
        out: dict[str, list[bytes]] = {}
        for n in self._transport.notifications():
            out.setdefault(n.sender, []).append(n.message)
        return out

    def check_xfer_state(self, handle: TransferHandle) -> str:
        """``"DONE"``, ``"PROC"``, or the failure's text (for an unknown handle too)."""
        with self._lock:
            state = self._finished.get(handle.transfer_id)
            if state is None and handle.transfer_id in self._posted:
                # Drains the peer's completions: the other handles' are kept for them.
                done, failed, _fault = self._transport.poll_detailed(handle.agent_name)
                for tid in done:
                    self._record(tid, DONE)
                for tid, reason, message in failed:
                    self._record(tid, f"ERR: {reason}: {message}")
                state = self._finished.get(handle.transfer_id)
                if state is None:
                    return PROC
        return state or f"ERR: unknown transfer handle {handle.transfer_id}"

    def _record(self, tid: int, state: str) -> None:
        if tid in self._posted:
            self._posted.discard(tid)
            self._finished[tid] = state

    def release_xfer_handle(self, handle: TransferHandle) -> None:
        """Forgets a transfer; one still running is cancelled (it sends no notification)."""
        with self._lock:
            self._finished.pop(handle.transfer_id, None)
            running = handle.transfer_id in self._posted
            self._posted.discard(handle.transfer_id)
        if running:
            self._transport.cancel([handle.transfer_id], "immediate")

    def deregister(self) -> None:
        """Closes the transport: nothing lands in the memory afterwards. Idempotent."""
        self._transport.close()

    def __repr__(self) -> str:
        # `getattr`: a traceback or debugger may show an instance whose `__init__` raised.
        t = getattr(self, "_transport", None)
        if t is None:
            name = getattr(self, "_agent_name", None)
            return f"ECTransport(agent_name={name!r}, not initialized)"
        return (
            f"ECTransport(agent_name={self._agent_name!r}, backend={t.backend!r}, "
            f"blocks={t.num_blocks} x {t.block_len} B, peers={len(t.peers)}, closed={t.closed})"
        )
