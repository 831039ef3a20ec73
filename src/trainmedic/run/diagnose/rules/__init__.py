"""One rule per category: given a measured cost, the title, the fix, and what the fix buys.

Each rule returns an :class:`Advice`; ``factor`` is how many times faster the fix makes the
cost itself (from a measured case or a cited source), which ``amdahl`` turns into the
whole-step ``expected_speedup``.
"""

from __future__ import annotations

from collections.abc import Callable

from trainmedic.categories import COMPUTE, DATA, HOST_OTHER, MEMORY_BANDWIDTH, SYNC, TINY_OPS, TRANSFER
from trainmedic.run.diagnose.rules import (
    compute,
    data,
    host_other,
    memory_bandwidth,
    sync,
    tiny_ops,
    transfer,
)
from trainmedic.run.diagnose.rules.base import Advice, Context

RULES: dict[str, Callable[[str, Context], Advice]] = {
    COMPUTE: compute.advise,
    DATA: data.advise,
    HOST_OTHER: host_other.advise,
    MEMORY_BANDWIDTH: memory_bandwidth.advise,
    SYNC: sync.advise,
    TINY_OPS: tiny_ops.advise,
    TRANSFER: transfer.advise,
}

__all__ = ["RULES", "Advice", "Context"]
