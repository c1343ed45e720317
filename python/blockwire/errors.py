"""The exceptions blockwire raises: every one is a :class:`blockwire.Error`.

Each carries ``kind``, a stable snake_case name of what went wrong (one per error of the Rust
library, for example ``"unknown_peer"``, ``"fingerprint_mismatch"``, ``"closed"``), and a
message with the whole chain of causes. Classes that mean "the argument is wrong" also derive
from :class:`ValueError`, and :class:`UnknownPeerError` from :class:`KeyError`, so code that
catches the built-in kinds keeps working.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "ClosedError",
    "UnknownPeerError",
    "SupersededError",
    "InvalidTransferError",
    "InvalidBufferError",
    "ConfigError",
    "DescriptorError",
    "PeerMismatchError",
    "BackendMismatchError",
    "BlockLenMismatchError",
    "FingerprintMismatchError",
    "GeometryMismatchError",
    "ConnectError",
    "NameInUseError",
    "PeerFaultedError",
    "SubmitError",
    "NotifyError",
    "UnsupportedError",
    "BadNameError",
    "UnknownBackendError",
    "OpenError",
    "RegionError",
    "ResourceError",
]


class Error(Exception):
    """Base class of every blockwire error.

    Attributes:
        kind: What went wrong, as a stable snake_case name.
        message: The error and its causes, as one line.
    """

    kind: str
    message: str

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[Error], tuple[str, str]]:  # picklable (multiprocessing)
        return (type(self), (self.message, self.kind))


class ClosedError(Error):
    """The transport was closed: every call after ``close()`` raises this."""


class UnknownPeerError(Error, KeyError):
    """No peer of that id is registered (never added, removed, or its registration failed)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class SupersededError(Error):
    """An asynchronous registration lost the race: the peer was removed or added again."""


class InvalidTransferError(Error, ValueError):
    """The block lists are wrong: lengths differ, empty, an index out of range, a destination
    named twice, or a notification message too long. Nothing moved."""


class InvalidBufferError(Error, ValueError):
    """The block memory is not a writable, C-contiguous, 2-D buffer."""


class ConfigError(Error, ValueError):
    """An option or the config fields cannot be used (not JSON, a bad timeout, ...)."""


class DescriptorError(Error, ValueError):
    """A peer's metadata (descriptor bytes) is malformed or altered."""


class PeerMismatchError(Error, ValueError):
    """The peer cannot exchange blocks with this transport."""


class BackendMismatchError(PeerMismatchError):
    """The peer's metadata belongs to another backend."""


class BlockLenMismatchError(PeerMismatchError):
    """The peer's blocks have another length."""


class FingerprintMismatchError(PeerMismatchError):
    """The peer's config fingerprint differs: its blocks do not mean the same."""


class GeometryMismatchError(PeerMismatchError):
    """``base_addr``, ``num_blocks`` or ``block_len`` given disagree with the metadata."""


class ConnectError(Error):
    """The backend could not connect to the peer."""


class NameInUseError(ConnectError):
    """The peer's name is taken here: it is this transport's own name, or another connected
    peer's (with other connection data). NIXL keys remote agents by name, so the nixl backend
    cannot hold both; a peer restarted under its old name is added again once its former
    registration is removed. ``kind`` is ``"name_in_use"``."""


class PeerFaultedError(Error):
    """The peer was judged unusable; posts are refused until it is removed."""


class SubmitError(Error):
    """The backend refused to post the transfer; nothing is tracked."""


class NotifyError(Error):
    """The backend refused to post a notification; nothing is tracked."""


class UnsupportedError(Error):
    """The backend does not support this operation."""


class BadNameError(Error, ValueError):
    """The transport name is not acceptable (1 to 128 bytes, no control characters)."""


class UnknownBackendError(Error, ValueError):
    """No backend of that name is compiled into this build (see ``blockwire.backends()``)."""


class OpenError(Error):
    """Opening the backend failed."""


class RegionError(Error, ValueError):
    """The block memory cannot be used as a region (empty, overflowing)."""


class ResourceError(Error):
    """The operating system refused a resource the transport needs (a thread)."""
