"""blockwire's transports as vLLM data transports.

When vLLM is importable, :class:`BlockwireP2PTransport` subclasses the P2P tier's
``vllm.v1.kv_offload.tiering.p2p.data.base.DataTransport`` and :class:`BlockwireECTransport`
the encoder-cache connector's ``vllm.distributed.ec_transfer.ec_connector.cpu.data.base.
DataTransport``, so ``isinstance`` holds and vLLM's code takes them where it takes its NIXL
transports. Without vLLM the same classes stand alone (``VLLM_P2P_BASE`` and
``VLLM_EC_BASE`` are then ``None``). vLLM is never a dependency of blockwire.

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


__all__ = [
    "BlockwireECTransport",
    "BlockwireP2PTransport",
    "EC_BASE_MODULE",
    "P2P_BASE_MODULE",
    "VLLM_EC_BASE",
    "VLLM_P2P_BASE",
]
