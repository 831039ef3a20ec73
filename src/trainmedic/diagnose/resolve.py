"""Turn raw samples into costs: settle plain user code by position, and find tiny-op loops.

The sampler leaves two kinds of samples undecided (see ``probe/recorder.py``): user code run
before the step's model work began, and after. Before is batch preparation (``data``): reading
a pool, building a batch by hand. After is the loop's own code around the model (``compute``).
When a job never showed a forward, backward or optimizer step, position means nothing, and a
function's op count decides instead.

A function is a tiny-op loop when the op census saw it issue at least ``TINY_MIN_OPS`` torch
calls per step and the time spent in it divided by those calls is under ``TINY_MAX_S_PER_OP``:
dispatch, not arithmetic, is what it pays for.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from trainmedic.categories import CATEGORIES, COMPUTE, DATA, HOST_OTHER, TINY_OPS
from trainmedic.probe.recorder import AFTER_MODEL, BEFORE_MODEL, SLOTS, Aggregate

TINY_MIN_OPS = 100
TINY_MAX_S_PER_OP = 50e-6
BATCH_PREPARATION = "batch preparation"
# Kinds that say *what* is slow (a disk, a database); a tiny-op loop never overrides them.
_FIXED_KINDS = frozenset({"hdf5", "zarr", "database", "image decode", "disk"})


@dataclass(frozen=True)
class Cost:
    #: The raw sampler slot it came from (a category, or a user-code pseudo-category).
    slot: str
    category: str
    kind: str
    where: str | None
    function: str | None
    seconds: float


@dataclass(frozen=True)
class TinyLoop:
    function: str
    ops_per_step: float
    seconds_per_op: float


def anchors_seen(aggregate: Aggregate) -> bool:
    slots = dict(zip(SLOTS, aggregate.slots))
    return slots[COMPUTE] > 0 or slots[AFTER_MODEL] > 0


def tiny_loops(aggregate: Aggregate, steps: int, ops_by_function: dict[str, int], census_steps: int) -> dict[str, TinyLoop]:
    if not census_steps or not steps:
        return {}
    seconds: dict[str, float] = defaultdict(float)
    for (_slot, _kind, _where, function), weight in aggregate.lines.items():
        if function is not None:
            seconds[function] += weight
    loops = {}
    for function, ops in ops_by_function.items():
        per_step = ops / census_steps
        spent = seconds.get(function, 0.0) / steps
        if per_step >= TINY_MIN_OPS and spent > 0 and spent / per_step <= TINY_MAX_S_PER_OP:
            loops[function] = TinyLoop(function, per_step, spent / per_step)
    return loops


def resolve(
    aggregate: Aggregate, anchored: bool, loops: dict[str, TinyLoop], ops_by_function: dict[str, int]
) -> list[Cost]:
    costs = []
    for (slot, kind, where, function), weight in aggregate.lines.items():
        category = slot
        if slot == BEFORE_MODEL:
            category, kind = (DATA, BATCH_PREPARATION) if anchored else _unanchored(function, ops_by_function)
        elif slot == AFTER_MODEL:
            category, kind = COMPUTE, "user code"
        if function in loops and category in (COMPUTE, DATA) and kind not in _FIXED_KINDS:
            category, kind = TINY_OPS, "per-sample loop"
        costs.append(Cost(slot, category, kind, where, function, weight))
    return costs


def _unanchored(function: str | None, ops_by_function: dict[str, int]) -> tuple[str, str]:
    if function is not None and ops_by_function.get(function):
        return COMPUTE, "user code"
    return HOST_OTHER, "user code"


def slot_mapping(costs: list[Cost]) -> dict[str, dict[str, float]]:
    """For each raw slot, the fraction of its time that resolved into each category.

    Applied to per-step slot vectors, this gives the timeline the same resolution as the total.
    """
    by_slot: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for cost in costs:
        by_slot[cost.slot][cost.category] += cost.seconds
    mapping = {}
    for slot, spread in by_slot.items():
        total = sum(spread.values())
        mapping[slot] = {c: w / total for c, w in spread.items()} if total else {}
    for category in CATEGORIES:
        mapping.setdefault(category, {category: 1.0})
    return mapping
