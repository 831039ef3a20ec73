"""How sure a plan is: the error its kind of plan showed against a real card, and why.

The planner's model of the GPU was held against steps recorded on real cards
(``tests/plan/gpu_truth``, where ``tests/plan/test_gpu_truth.py`` keeps these bounds honest):

- *checked*: every part of the build is modelled from a measurement on the target card (its
  kernels' workspaces, cuDNN's engines): the recorded steps were all within ``CHECKED`` of the card;
- *estimated*: some part is an estimate (a convolution no card recorded, an RNN's cuDNN
  reserve on a card it was not measured on, a card nobody has recorded yet): the recorded steps
  with such parts were within ``ESTIMATED``;
- *lower bound*: the step could not be traced to its end; no bound holds above the plan.

``--max-batch`` keeps the bound as a margin, on top of the headroom the user keeps free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CHECKED, ESTIMATED, LOWER_BOUND = "checked", "estimated", "lower bound"
#: Cards with steps recorded on them (``tests/plan/gpu_truth``): the card, and what recorded it.
RECORDED_CARDS = {"h200": "an H200 with torch 2.11"}


@dataclass(frozen=True)
class Bound:
    """The largest relative error a kind of plan showed against the card, on each counter."""

    peak: float
    reserved: float


#: 15 steps of 17 (all but two with estimated convolutions) on the H200, 2026-11-26: the largest
#: errors were 1.0 % on peak allocated (the 3D U-Net in bf16) and 4.3 % on reserved (the LSTM).
CHECKED_BOUND = Bound(peak=0.01, reserved=0.05)
#: The host: no caching allocator (reserved is what tensors ask for); benchmarks/plan_accuracy_cpu.py
#: measured the plan within 0.7 % of a real CPU step's peak resident memory.
HOST_BOUND = Bound(peak=0.01, reserved=0.01)
#: The two recorded steps whose cuDNN convolution workspaces were all estimated: the 3D U-Net in
#: fp32 (0.7 % on peak, 15.9 % on reserved) and the CNN in bf16 (exact).
ESTIMATED_BOUND = Bound(peak=0.03, reserved=0.16)


@dataclass(frozen=True)
class Confidence:
    level: str  # CHECKED, ESTIMATED or LOWER_BOUND
    bound: Bound
    reasons: tuple[str, ...] = ()

    @property
    def margin(self) -> float:
        """The share of the need ``--max-batch`` keeps in reserve for the plan's own error."""
        return self.bound.reserved if math.isfinite(self.bound.reserved) else 0.0

    def describe(self) -> str:
        if self.level == LOWER_BOUND:
            return "a lower bound: " + "; ".join(self.reasons)
        within = f"within {self.bound.peak:.0%} on peak and {self.bound.reserved:.0%} on reserved memory"
        why = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        if self.level == CHECKED:
            return f"checked: plans of this kind were {within} of the card{why}"
        return f"estimated: plans with estimated parts were {within} of the card{why}"

    def to_dict(self) -> dict[str, Any]:
        finite = math.isfinite(self.bound.peak)
        return {
            "level": self.level,
            "peak_error": self.bound.peak if finite else None,
            "reserved_error": self.bound.reserved if finite else None,
            "reasons": list(self.reasons),
        }


def confidence_of(device_key: str, is_gpu: bool, estimated: list[str], incomplete: str | None) -> Confidence:
    """The confidence of a plan for ``device_key`` whose estimated parts are ``estimated``."""
    if incomplete is not None:
        return Confidence(
            LOWER_BOUND, Bound(math.inf, math.inf), (f"the step was not traced past {incomplete}",)
        )
    if not is_gpu:
        # The CPU's allocator hands out what tensors ask for: the plan_accuracy_cpu benchmark's 0.7 %.
        return Confidence(
            CHECKED, HOST_BOUND, ("the host's allocator, measured by benchmarks/plan_accuracy_cpu.py",)
        )
    reasons = list(estimated)
    if device_key not in RECORDED_CARDS:
        reasons.insert(
            0,
            f"no step has been recorded on {device_key} yet: its kernels are modelled, not measured "
            "(`trainmedic plan --verify` on the card checks them)",
        )
    if reasons:
        return Confidence(ESTIMATED, ESTIMATED_BOUND, tuple(reasons))
    return Confidence(
        CHECKED, CHECKED_BOUND, (f"every kernel of this build measured on {RECORDED_CARDS[device_key]}",)
    )
