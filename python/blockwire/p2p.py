"""The P2P KV-offload tier's data transport, over a blockwire :class:`~blockwire.Transport`.

:class:`P2PTransport` has the methods and properties of vLLM's
``vllm.v1.kv_offload.tiering.p2p.data.base.DataTransport``, signature for signature, with
that interface's failure model: ``write_blocks`` returns ``None`` (and logs why) instead of
raising for a transfer it could not submit, ``poll`` reports failures in ``failed`` and a
peer judged unusable in ``peer_fault`` (sticky until ``remove_remote_peer``). The rules
(unique ids, per-peer polling, cancel-wait, registration generations, peer faults, close)
are the Rust transport's, the same on every backend.

Unlike NIXL's, the transport is safe to share between Python threads, and every call that
can wait runs without the GIL.

On the nixl backend it speaks NIXL's own handshake, so it joins a fleet of vLLM
``NixlTransport`` nodes: ``get_agent_metadata()`` returns the NIXL agent's metadata exactly as
a ``NixlTransport`` (or any plain NIXL agent's ``add_remote_agent``) accepts it, and
``add_remote_peer`` takes a ``NixlTransport`` peer's ``(agent_metadata, base_addr,
num_blocks, block_len)`` as they are (as well as a blockwire descriptor). The agent's name is
``agent_name``: it must be unique in the fleet (NIXL keys agents by name; a peer whose name is
taken raises :class:`~blockwire.NameInUseError`). As with ``NixlTransport``, config
fingerprints are the control plane's to compare: raw NIXL metadata carries none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Literal

from ._native import Transport, descriptor_from_nixl, nixl_agent_metadata
from ._types import PollResult
from .errors import ClosedError, Error, UnknownPeerError

#: How a blockwire descriptor starts; NIXL's metadata starts with ``nixlSerDes|``.
_DESCRIPTOR_MAGIC = b"BWPD"

logger = logging.getLogger(__name__)

CancelMode = Literal["immediate", "wait"]

__all__ = ["P2PTransport", "CancelMode"]


class P2PTransport:
    """vLLM's P2P ``DataTransport`` over blockwire.

    Args:
        agent_name: This transport's name (1 to 128 bytes); peers see it as the sender of
            notifications. On nixl it is the NIXL agent's name, which must be unique among
            the agents that load this one's metadata.
        view: The local block memory, ``num_blocks x block_len`` bytes, 2-D, writable and
            C-contiguous (a numpy array, a ``memoryview``). It stays referenced while a peer
            may reach it.
        config_fields: The model configuration the fingerprint is computed from (``None``:
            no fingerprint, compatible with every peer).
        backend: ``"shm"``, ``"ucx"``, ``"libfabric"`` or ``"nixl"``
            (:func:`blockwire.backends` lists this build's).
        options: The backend's options (for example ``{"tls": "tcp"}`` for ucx).
        **transport_options: Passed to :class:`blockwire.Transport` (``stall_timeout``,
            ``close_timeout``, ``max_consecutive_failures``, ``notification_capacity``,
            ``telemetry``).

    Example::

        import numpy as np
        from blockwire import P2PTransport

        prefill = P2PTransport("prefill-0", np.zeros((64, 65536), np.uint8))
        decode_mem = np.zeros((64, 65536), np.uint8)
        decode = P2PTransport("decode-0", decode_mem)
        prefill.add_remote_peer("decode-0", decode.get_agent_metadata(),
                                decode.base_addr, decode.num_blocks, decode.block_len)
        tid = prefill.write_blocks("decode-0", [0, 1], [7, 8])
        while tid not in prefill.poll("decode-0").done:
            pass
    """

    def __init__(
        self,
        agent_name: str,
        view: Any,
        config_fields: dict[str, Any] | None = None,
        backend: str = "shm",
        options: Mapping[str, Any] | None = None,
        **transport_options: Any,
    ) -> None:
        self._agent_name = agent_name
        self._transport = Transport(
            view,
            backend,
            name=agent_name,
            config_fields=config_fields,
            options=dict(options) if options else None,
            **transport_options,
        )
        logger.info(
            "P2PTransport %s: %s, %d blocks of %d bytes",
            agent_name,
            backend,
            self._transport.num_blocks,
            self._transport.block_len,
        )

    # -- the region ----------------------------------------------------------------------

    @property
    def transport(self) -> Transport:
        """The underlying :class:`blockwire.Transport` (notifications, telemetry, READ)."""
        return self._transport

    @property
    def agent_name(self) -> str:
        """This transport's name."""
        return self._agent_name

    @property
    def available(self) -> bool:
        """Whether the transport is open (mirrors ``NixlTransport.available``)."""
        return not self._transport.closed

    @property
    def base_addr(self) -> int:
        """Base address of the local block memory region."""
        return self._transport.base_addr

    @property
    def num_blocks(self) -> int:
        """Number of blocks in the local region."""
        return self._transport.num_blocks

    @property
    def block_len(self) -> int:
        """Size of each block in bytes."""
        return self._transport.block_len

    @property
    def config_fingerprint(self) -> str:
        """Content hash of the model configuration (``""``: none, always compatible)."""
        return self._transport.config_fingerprint

    @property
    def inflight_count(self) -> int:
        """Transfers submitted and not yet reported by ``poll``."""
        return self._transport.inflight_count

    def get_agent_metadata(self) -> bytes:
        """The bytes a peer passes to its ``add_remote_peer``: on nixl, the NIXL agent's own
        metadata (what a vLLM ``NixlTransport`` peer accepts); elsewhere the descriptor."""
        descriptor = self._transport.descriptor()
        if self._transport.backend == "nixl":
            return nixl_agent_metadata(descriptor)
        return descriptor

    def _peer_descriptor(
        self, agent_metadata: bytes, base_addr: int, num_blocks: int, block_len: int
    ) -> bytes:
        """A blockwire descriptor as is; on nixl, raw NIXL metadata made into one."""
        raw = self._transport.backend == "nixl" and not bytes(agent_metadata[:4]).startswith(
            _DESCRIPTOR_MAGIC
        )
        if not raw:
            return agent_metadata
        descriptor = descriptor_from_nixl(bytes(agent_metadata), base_addr, num_blocks, block_len)
        logger.debug(
            "P2PTransport %s: peer metadata is raw NIXL metadata (%d bytes)",
            self._agent_name,
            len(agent_metadata),
        )
        return descriptor

    # -- peers ---------------------------------------------------------------------------

    def add_remote_peer(
        self,
        peer_id: str,
        agent_metadata: bytes,
        base_addr: int,
        num_blocks: int,
        block_len: int,
    ) -> None:
        """Registers a peer, blocking until it is usable.

        ``agent_metadata`` is a peer's ``get_agent_metadata()``; on nixl also a plain NIXL
        agent's (a vLLM ``NixlTransport``'s), whose region is then ``num_blocks`` blocks of
        ``block_len`` bytes at ``base_addr``.

        Raises:
            GeometryMismatchError: ``base_addr``, ``num_blocks`` or ``block_len`` disagree
                with ``agent_metadata`` (raw NIXL metadata: NIXL refuses a region outside
                what the agent registered, as a ``ConnectError``).
            BlockLenMismatchError: the peer's blocks are not ``block_len`` long here.
            FingerprintMismatchError: the configs differ.
            DescriptorError: ``agent_metadata`` is malformed.
            NameInUseError: the peer's agent name is this transport's or another connected
                peer's (nixl).
            ConnectError: the backend could not reach the peer.
        """
        self._transport.add_remote_peer(
            peer_id,
            self._peer_descriptor(agent_metadata, base_addr, num_blocks, block_len),
            base_addr=base_addr,
            num_blocks=num_blocks,
            block_len=block_len,
        )

    def add_remote_peer_async(
        self,
        peer_id: str,
        agent_metadata: bytes,
        base_addr: int,
        num_blocks: int,
        block_len: int,
    ) -> Future[None]:
        """Starts registering a peer; the future resolves once it is usable.

        A registration overtaken by ``remove_remote_peer`` or a later add of the same peer
        fails with :class:`~blockwire.SupersededError` and publishes nothing. Arguments as
        for :meth:`add_remote_peer`; bad ones fail the future.
        """
        try:
            descriptor = self._peer_descriptor(agent_metadata, base_addr, num_blocks, block_len)
        except Error as exc:
            failed: Future[None] = Future()
            failed.set_exception(exc)
            return failed
        return self._transport.add_remote_peer_async(
            peer_id,
            descriptor,
            base_addr=base_addr,
            num_blocks=num_blocks,
            block_len=block_len,
        )

    def remove_remote_peer(self, peer_id: str) -> None:
        """Unregisters a peer. Its transfers in flight are reported failed once they stopped;
        nothing lands in its memory afterwards. An unknown peer is ignored."""
        try:
            self._transport.remove_remote_peer(peer_id)
        except UnknownPeerError:
            logger.debug("P2PTransport %s: remove of unknown peer=%s", self._agent_name, peer_id)

    # -- transfers -----------------------------------------------------------------------

    def write_blocks(
        self,
        peer_id: str,
        local_idxs: list[int],
        remote_idxs: list[int],
    ) -> int | None:
        """Submits a WRITE of local blocks to the peer's blocks.

        Returns:
            The transfer id, or ``None`` (with the reason logged at warning) when the peer is
            not registered, is faulted, the indices are wrong, or the backend refused.

        Raises:
            ClosedError: after ``close()``.
        """
        return self._submit("write_blocks", peer_id, local_idxs, remote_idxs)

    def read_blocks(
        self,
        peer_id: str,
        local_idxs: list[int],
        remote_idxs: list[int],
    ) -> int | None:
        """Submits a READ of the peer's blocks into local blocks; as :meth:`write_blocks`."""
        return self._submit("read_blocks", peer_id, local_idxs, remote_idxs)

    def _submit(
        self, op: str, peer_id: str, local_idxs: list[int], remote_idxs: list[int]
    ) -> int | None:
        post = self._transport.write_blocks if op == "write_blocks" else self._transport.read_blocks
        try:
            return post(peer_id, local_idxs, remote_idxs)
        except ClosedError:
            raise
        except Error as exc:
            logger.warning(
                "P2PTransport %s: %s to peer=%s not submitted (%s): %s",
                self._agent_name,
                op,
                peer_id,
                exc.kind,
                exc,
            )
            return None

    def poll(self, peer_id: str | None = None) -> PollResult:
        """Completions since the last poll, of ``peer_id``'s transfers only (every peer's:
        ``None``, for the shutdown drain). Each id is reported once, in ``done`` or
        ``failed``; ``peer_fault`` is set on a scoped poll once the peer is faulted."""
        return self._transport.poll(peer_id)

    def cancel(
        self,
        transfer_ids: Iterable[int],
        mode: CancelMode = "immediate",
    ) -> list[int]:
        """Cancels transfers.

        ``"immediate"``: stop tracking them and return ``[]`` (their bytes may still land
        while the backend stops them). ``"wait"``: release only those that stopped; the ids
        returned are still running and surface in a later ``poll``. Unknown ids are ignored.
        """
        return self._transport.cancel(list(transfer_ids), mode)

    def close(self) -> None:
        """Releases everything: stops registrations, cancels transfers, waits until none
        runs, revokes peers' access. Idempotent; every later call raises ``ClosedError``."""
        self._transport.close()

    def __enter__(self) -> P2PTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        # `getattr`: a traceback or debugger may show an instance whose `__init__` raised.
        t = getattr(self, "_transport", None)
        if t is None:
            name = getattr(self, "_agent_name", None)
            return f"{type(self).__name__}(agent_name={name!r}, not initialized)"
        return (
            f"{type(self).__name__}(agent_name={self._agent_name!r}, backend={t.backend!r}, "
            f"blocks={t.num_blocks} x {t.block_len} B, peers={len(t.peers)}, "
            f"inflight={t.inflight_count}, closed={t.closed})"
        )
