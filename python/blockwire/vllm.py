"""blockwire's transports as vLLM data transports.

When vLLM is importable, :class:`BlockwireP2PTransport` subclasses the P2P tier's
``vllm.v1.kv_offload.tiering.p2p.data.base.DataTransport`` and :class:`BlockwireECTransport`
the encoder-cache connector's ``vllm.distributed.ec_transfer.ec_connector.cpu.data.base.
DataTransport``, so ``isinstance`` holds and vLLM's code takes them where it takes its NIXL
transports. Without vLLM the same classes stand alone (``VLLM_P2P_BASE`` and
``VLLM_EC_BASE`` are then ``None``). vLLM is never a dependency of blockwire.

:func:`use_in_vllm` makes vLLM's P2P tier construct blockwire's transport where it constructs
``NixlTransport``.

Example::

    import numpy as np
    from blockwire.vllm import BlockwireP2PTransport

    transport = BlockwireP2PTransport("prefill-0", np.zeros((1024, 65536), np.uint8),
                                      config_fields={"model": "m", "block_size": 16},
                                      backend="ucx")
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from .ec import ECTransport
from .p2p import P2PTransport

logger = logging.getLogger(__name__)

#: Where vLLM 0.33 defines the P2P tier's data-transport ABC.
P2P_BASE_MODULE = "vllm.v1.kv_offload.tiering.p2p.data.base"
#: Where vLLM 0.33 defines the encoder-cache connector's data-transport ABC.
EC_BASE_MODULE = "vllm.distributed.ec_transfer.ec_connector.cpu.data.base"


def _base(module: str) -> type | None:
    try:
        base: type = importlib.import_module(module).DataTransport
        return base
    except ImportError:
        return None
    except Exception as exc:  # vLLM present but failing to import: stand alone, say why
        logger.warning("blockwire.vllm: importing %s failed (%s); standing alone", module, exc)
        return None


#: vLLM's P2P ``DataTransport``, or ``None`` when vLLM is not importable.
VLLM_P2P_BASE = _base(P2P_BASE_MODULE)
#: vLLM's encoder-cache ``DataTransport``, or ``None`` when vLLM is not importable.
VLLM_EC_BASE = _base(EC_BASE_MODULE)


class BlockwireP2PTransport(P2PTransport, *((VLLM_P2P_BASE,) if VLLM_P2P_BASE else ())):  # type: ignore[misc]
    """:class:`blockwire.P2PTransport`, a subclass of vLLM's P2P ``DataTransport`` when vLLM
    is importable."""


class BlockwireECTransport(ECTransport, *((VLLM_EC_BASE,) if VLLM_EC_BASE else ())):  # type: ignore[misc]
    """:class:`blockwire.ECTransport`, a subclass of vLLM's encoder-cache ``DataTransport``
    when vLLM is importable."""


#: Where vLLM 0.33's P2P tier constructs its data transport (``NixlTransport(...)``).
P2P_MANAGER_MODULE = "vllm.v1.kv_offload.tiering.p2p.manager"


def use_in_vllm(
    backend: str = "shm",
    options: dict[str, Any] | None = None,
    **transport_options: Any,
) -> type[BlockwireP2PTransport]:
    """Makes vLLM's P2P tier use blockwire: where its manager constructs ``NixlTransport``,
    it gets a :class:`BlockwireP2PTransport` over ``backend`` instead.

    vLLM builds its transport in one place, as ``NixlTransport(agent_name, view,
    config_fields=..., backends=..., num_threads=...)``; this replaces that name in the
    manager's module by a subclass taking the same arguments (``backends`` and
    ``num_threads``, NIXL's, are accepted and not used: blockwire's backend and options are
    the ones given here). Call it before vLLM starts its KV-offload tier, for example in a
    plugin or a ``sitecustomize``. Returns the class installed.

    Raises:
        ImportError: vLLM (0.33's P2P tier) is not importable.
    """
    manager = importlib.import_module(P2P_MANAGER_MODULE)

    class VllmP2PTransport(BlockwireP2PTransport):
        """:class:`BlockwireP2PTransport` constructed the way vLLM constructs
        ``NixlTransport``."""

        def __init__(
            self,
            agent_name: str,
            view: Any,
            config_fields: dict[str, Any] | None = None,
            backends: list[str] | None = None,
            num_threads: int = 4,
        ) -> None:
            logger.debug(
                "blockwire.vllm: %s over %s (NIXL's backends=%s, num_threads=%s not used)",
                agent_name,
                backend,
                backends,
                num_threads,
            )
            super().__init__(
                agent_name, view, config_fields, backend, options, **transport_options
            )

    setattr(manager, "NixlTransport", VllmP2PTransport)  # noqa: B010 - a module of vLLM
    logger.info("blockwire.vllm: vLLM's P2P tier now uses blockwire over %s", backend)
    return VllmP2PTransport


__all__ = [
    "BlockwireECTransport",
    "BlockwireP2PTransport",
    "EC_BASE_MODULE",
    "P2P_BASE_MODULE",
    "P2P_MANAGER_MODULE",
    "VLLM_EC_BASE",
    "VLLM_P2P_BASE",
    "use_in_vllm",
]
