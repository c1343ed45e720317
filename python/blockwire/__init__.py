"""blockwire: one-sided block transfers between peers, from Python.

A :class:`Transport` registers a 2-D buffer (``num_blocks x block_len`` bytes: a numpy array,
a ``memoryview``, anything with the buffer protocol) and moves blocks to and from peers'
buffers with WRITE and READ, over the backend named at construction (``"shm"`` always;
``"ucx"``, ``"libfabric"``, ``"nixl"`` when built with them: :func:`backends`).

Two adapters fit vLLM's data-transport interfaces signature for signature:
:class:`P2PTransport` (the P2P KV-offload tier's ``DataTransport``) and :class:`ECTransport`
(the encoder-cache connector's). :mod:`blockwire.vllm` makes them subclasses of vLLM's own
ABCs when vLLM is importable.

>>> import numpy as np, blockwire
>>> a = blockwire.Transport(np.zeros((8, 4096), np.uint8))
>>> b_mem = np.zeros((8, 4096), np.uint8)
>>> b = blockwire.Transport(b_mem)
>>> a.add_remote_peer("b", b.descriptor())
>>> tid = a.write_blocks("b", [0], [5])

The library logs through :mod:`logging` (loggers ``blockwire.*``); errors are
:class:`blockwire.Error` subclasses (:mod:`blockwire.errors`).
"""

from __future__ import annotations

from . import errors
from ._native import (
    MAX_NAME_LEN,
    MAX_NOTIFICATION_LEN,
    Transport,
    __version__,
    backends,
    describe,
    descriptor_from_nixl,
    fingerprint,
    nixl_agent_metadata,
)
from ._native import _logging as _logging_cache
from ._types import Notification, PollResult
from .ec import ECTransport, TransferHandle
from .errors import *  # noqa: F403 - every error class, listed in errors.__all__
from .p2p import P2PTransport


def reset_logging_cache() -> None:
    """Makes the library read Python's logging levels again.

    Levels are cached on the Rust side so that a disabled level costs nothing; call this
    after changing a ``blockwire`` logger's level at run time.
    """
    _logging_cache.reset()


__all__ = [
    "MAX_NAME_LEN",
    "MAX_NOTIFICATION_LEN",
    "ECTransport",
    "Notification",
    "P2PTransport",
    "PollResult",
    "TransferHandle",
    "Transport",
    "__version__",
    "backends",
    "describe",
    "descriptor_from_nixl",
    "errors",
    "fingerprint",
    "nixl_agent_metadata",
    "reset_logging_cache",
    *errors.__all__,
]
