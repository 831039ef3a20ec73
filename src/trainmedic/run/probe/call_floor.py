"""This machine's cost of one torch call, measured: what separates a tiny op from real work.

A call whose own arithmetic and memory traffic take less time than the interpreter, the
dispatcher (and on a GPU the launch) spend getting it started is paid for in overhead: a loop of
thousands of such calls is ``tiny_ops``, however long it takes in all. Whether an op is tiny is
therefore not a fixed number of microseconds (nanoGPT's backward averaged 45-47 µs an op, across
a fixed 50 µs cut-off that noise decided) but the op's work, in this machine's seconds, against
this machine's floor, both measured in the same process a moment apart.

The floor is the fastest of a few rounds of a trivial call, so a busy neighbour slows it no more
than it slows the user's ops; bytes and FLOPs are priced from one large elementwise op and one
matmul in the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

_ROUNDS = 5
_CALLS = 200


@dataclass(frozen=True)
class CallCost:
    """Seconds per call, per byte moved and per FLOP on one device of this machine."""

    device: str
    floor_s: float
    byte_s: float
    flop_s: float

    def work_s(self, moved: float, flops: float) -> float:
        """The time an op's own work takes here: its memory traffic or its arithmetic."""
        return max(moved * self.byte_s, flops * self.flop_s)


def measure(torch: Any, device: str = "cpu") -> CallCost:
    """Time a trivial call, a large add and a matmul on ``device`` (the fastest of a few rounds)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tiny = torch.zeros((), device=device)
    big = torch.ones(1 << 20, device=device)  # 4 MiB: out of L2, like a real activation
    square = torch.ones(256, 256, device=device)

    def best(call: Any, count: int) -> float:
        fastest = float("inf")
        for _ in range(_ROUNDS):
            sync()
            started = time.perf_counter()
            for _ in range(count):
                call()
            sync()
            fastest = min(fastest, (time.perf_counter() - started) / count)
        return fastest

    floor = best(lambda: torch.add(tiny, tiny), _CALLS)
    add = best(lambda: torch.add(big, big), 4)
    matmul = best(lambda: torch.mm(square, square), 4)
    moved = 3 * big.numel() * big.element_size()
    return CallCost(
        device=device,
        floor_s=floor,
        byte_s=max(add - floor, floor * 0.01) / moved,
        flop_s=max(matmul - floor, floor * 0.01) / (2 * 256**3),
    )
