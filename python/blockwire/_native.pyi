"""Type stubs of the extension module blockwire._native (Rust, PyO3)."""

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Literal, final

from ._types import Notification, PollResult

__all__ = [
    "Transport",
    "LoggingCache",
    "_logging",
    "backends",
    "fingerprint",
    "describe",
    "descriptor_from_nixl",
    "nixl_agent_metadata",
    "MAX_NOTIFICATION_LEN",
    "MAX_NAME_LEN",
    "__version__",
]

__version__: str
MAX_NOTIFICATION_LEN: int
MAX_NAME_LEN: int

def backends() -> list[str]: ...
def fingerprint(config_fields: Mapping[str, Any] | None = None) -> str: ...
def describe(descriptor: bytes) -> dict[str, Any]: ...
def descriptor_from_nixl(
    agent_metadata: bytes,
    base_addr: int,
    num_blocks: int,
    block_len: int,
    fingerprint: str = "",
) -> bytes: ...
def nixl_agent_metadata(descriptor: bytes) -> bytes: ...

@final
class LoggingCache:
    def reset(self) -> None: ...

_logging: LoggingCache

_Indices = Iterable[int]

@final
class Transport:
    def __new__(
        cls,
        view: Any,
        backend: str = "shm",
        *,
        name: str | None = None,
        config_fields: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        stall_timeout: float | None = None,
        close_timeout: float | None = None,
        max_consecutive_failures: int | None = None,
        notification_capacity: int | None = None,
        telemetry: bool = False,
    ) -> Transport: ...
    @property
    def backend(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def base_addr(self) -> int: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def block_len(self) -> int: ...
    @property
    def config_fingerprint(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def inflight_count(self) -> int: ...
    @property
    def peers(self) -> list[str]: ...
    @property
    def revokes_access(self) -> bool: ...
    def in_flight(self, peer_id: str | None = None) -> int: ...
    def descriptor(self) -> bytes: ...
    def add_remote_peer(
        self,
        peer_id: str,
        descriptor: bytes,
        *,
        base_addr: int | None = None,
        num_blocks: int | None = None,
        block_len: int | None = None,
    ) -> None: ...
    def add_remote_peer_async(
        self,
        peer_id: str,
        descriptor: bytes,
        *,
        base_addr: int | None = None,
        num_blocks: int | None = None,
        block_len: int | None = None,
    ) -> Future[None]: ...
    def remove_remote_peer(self, peer_id: str) -> None: ...
    def write_blocks(
        self,
        peer_id: str,
        local_idxs: _Indices,
        remote_idxs: _Indices,
        notification: bytes | None = None,
    ) -> int: ...
    def read_blocks(
        self,
        peer_id: str,
        local_idxs: _Indices,
        remote_idxs: _Indices,
        notification: bytes | None = None,
    ) -> int: ...
    def notify(self, peer_id: str, message: bytes) -> int: ...
    def poll(self, peer_id: str | None = None) -> PollResult: ...
    def poll_wait(self, peer_id: str | None = None, timeout: float = 1.0) -> PollResult: ...
    def poll_detailed(
        self, peer_id: str | None = None
    ) -> tuple[list[int], list[tuple[int, str, str]], str | None]: ...
    def cancel(
        self, transfer_ids: Iterable[int], mode: Literal["immediate", "wait"] = "immediate"
    ) -> list[int]: ...
    def notifications(self, sender: str | None = None) -> list[Notification]: ...
    def notification_stats(self) -> dict[str, int]: ...
    def telemetry(self) -> dict[str, dict[str, Any]] | None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Transport: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
