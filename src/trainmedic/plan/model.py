"""What a memory plan says: the peak, where it comes from, whether it fits, and what to change.

``Plan.to_dict()`` is the fixed ``trainmedic.plan/1`` contract that ``trainmedic plan --json``
writes; fields beyond the contract (reserved memory, notes) follow it and never replace it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainmedic._document import JsonDocument
from trainmedic.plan.confidence import Confidence

SCHEMA = "trainmedic.plan/1"

#: The breakdown's keys, in the order the contract and the console list them.
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "cuda_context")


@dataclass(frozen=True)
class Hotspot:
    """One place in the user's code that holds a large share of the peak."""

    op: str
    #: "file:line" of the user's code (a backward op is charged to the forward line it
    #: differentiates), or "<unknown>:0" when no line of the user's made it.
    where: str
    bytes: int
    formula: str  # closed form with the numbers filled in: "B·H·S²·bytes = 64·4·6272²·4"
    advice: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "where": self.where,
            "bytes": self.bytes,
            "formula": self.formula,
            "advice": self.advice,
        }


@dataclass(frozen=True)
class Breakdown:
    """Bytes live at the peak by what they are; ``cuda_context`` lies outside the caching allocator."""

    parameters: int = 0
    gradients: int = 0
    optimizer_state: int = 0
    activations: int = 0
    temporaries: int = 0
    cuda_context: int = 0

    @property
    def allocated(self) -> int:
        """What ``torch.cuda.max_memory_allocated`` would count: everything but the context."""
        return self.parameters + self.gradients + self.optimizer_state + self.activations + self.temporaries

    def to_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in CATEGORIES}


@dataclass
class Plan(JsonDocument):
    """A memory plan of one training step at one batch size on one device."""

    device: str
    capacity_bytes: int
    batch_size: int
    precision: str
    peak_bytes: int  # like torch.cuda.max_memory_allocated: the allocator's blocks, no context
    breakdown: Breakdown
    reserved_bytes: int  # like torch.cuda.max_memory_reserved: the allocator's segments
    headroom: float = 0.0
    max_batch: int | None = None
    hotspots: list[Hotspot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: False when an op could not be traced and part of the plan is a stated estimate.
    exact: bool = True
    #: Peak bytes the fitted memory model gives per extra sample, when --max-batch solved for it.
    bytes_per_sample: float | None = None
    #: Reserved bytes without the workspaces cuDNN gives up under memory pressure (its fastest
    #: convolution engines' buffers: with less room it picks engines that need less); None: none.
    floor_reserved_bytes: int | None = None
    #: How sure the plan is (plan.confidence), and the share of the need --max-batch kept for it.
    confidence: Confidence | None = None
    margin: float = 0.0
    #: The plan held against a recording of the same step on a card (``--verify``).
    verification: dict[str, Any] | None = None

    @property
    def usable_bytes(self) -> int:
        """Capacity left for the process after the headroom the user asked to keep free."""
        return int(self.capacity_bytes * (1.0 - self.headroom))

    @property
    def needed_bytes(self) -> int:
        """What the card must hold: the allocator's reserved segments plus the CUDA context."""
        return self.reserved_bytes + self.breakdown.cuda_context

    @property
    def needed_floor_bytes(self) -> int:
        """What the card must hold at the least: cuDNN falls back to smaller workspaces before an OOM."""
        floor = self.reserved_bytes if self.floor_reserved_bytes is None else self.floor_reserved_bytes
        return floor + self.breakdown.cuda_context

    @property
    def required_bytes(self) -> int:
        """The floor with the margin kept for the plan's own error: what ``fits`` holds to the card."""
        return int(self.needed_floor_bytes * (1.0 + self.margin))

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.usable_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "device": self.device,
            "capacity_bytes": int(self.capacity_bytes),
            "batch_size": int(self.batch_size),
            "precision": self.precision,
            "peak_bytes": int(self.peak_bytes),
            "breakdown": self.breakdown.to_dict(),
            "fits": self.fits,
            "max_batch": self.max_batch,
            "hotspots": [h.to_dict() for h in self.hotspots],
            "reserved_bytes": int(self.reserved_bytes),
            "needed_bytes": int(self.needed_bytes),
            "headroom": self.headroom,
            "exact": self.exact,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            **(
                {"needed_floor_bytes": int(self.needed_floor_bytes)}
                if self.floor_reserved_bytes is not None
                else {}
            ),
            **(
                {
                    "confidence": self.confidence.to_dict(),
                    "margin": self.margin,
                    "required_bytes": int(self.required_bytes),
                }
                if self.confidence is not None
                else {}
            ),
            **({"verification": self.verification} if self.verification is not None else {}),
        }
