"""Result types shared by the native transport and the adapters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["PollResult", "Notification"]


class PollResult(NamedTuple):
    """What a poll reports, shaped as vLLM's P2P ``PollResult``.

    Attributes:
        done: Transfer ids that completed since the last poll.
        failed: Transfer ids that failed since the last poll.
        peer_fault: On a peer-scoped poll, why that peer was judged unusable (sticky until
            ``remove_remote_peer``); ``None`` while it is healthy.
    """

    done: Sequence[int]
    failed: Sequence[int]
    peer_fault: str | None = None


class Notification(NamedTuple):
    """A message a peer sent with a transfer, or on its own.

    Attributes:
        sender: The sending transport's name.
        message: The bytes it sent.
    """

    sender: str
    message: bytes
