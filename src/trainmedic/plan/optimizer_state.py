"""Optimizer state in closed form: how many parameter-sized tensors each optimizer keeps.

The trace measures optimizer state by running two steps; this table is the independent check
of that number (tests compare the two) and the fallback when a step cannot be traced.
"""

from __future__ import annotations

from typing import Any

import torch

#: name -> (hyper-parameter, slots when it is truthy) pairs added to the base number of slots.
_SLOTS: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {
    "SGD": (0, (("momentum", 1),)),
    "Adam": (2, (("amsgrad", 1),)),
    "AdamW": (2, (("amsgrad", 1),)),
    "Adamax": (2, ()),
    "NAdam": (2, ()),
    "RAdam": (2, ()),
    "Adadelta": (2, ()),
    "Adagrad": (1, ()),
    "RMSprop": (1, (("momentum", 1), ("centered", 1))),
    "Rprop": (2, ()),
    "ASGD": (1, ()),
}
#: Optimizers that keep a scalar ``step`` tensor per parameter (on the host unless capturable/fused):
#: every one in the table but SGD.
_STEP_COUNTERS = set(_SLOTS) - {"SGD"}


def state_slots(optimizer: torch.optim.Optimizer) -> int | None:
    """Parameter-sized state tensors per parameter, or None for an optimizer not in the table."""
    entry = _SLOTS.get(type(optimizer).__name__)
    if entry is None:
        return None
    base, extras = entry
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    return base + sum(n for key, n in extras if group.get(key))


def analytic_state_bytes(trace: Any) -> int:
    """Optimizer state of the traced optimizer, from its type, hyper-parameters and parameters."""
    slots = trace.optimizer_slots or 0
    return slots * trace.trainable_bytes + trace.step_counter_bytes


def step_counter_bytes(optimizer: torch.optim.Optimizer, on_gpu: bool) -> int:
    """Bytes of per-parameter ``step`` scalars that live on the planned device."""
    if type(optimizer).__name__ not in _STEP_COUNTERS:
        return 0
    on_device = any(g.get("capturable") or g.get("fused") for g in optimizer.param_groups)
    if on_gpu and not on_device:
        return 0
    count = sum(1 for g in optimizer.param_groups for p in g["params"] if p.requires_grad)
    return count * (512 if on_gpu else 4)
