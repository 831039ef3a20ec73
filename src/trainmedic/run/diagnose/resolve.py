"""Turn raw samples into costs: settle plain user code by position, and find tiny-op loops.

The sampler leaves two kinds of samples undecided (see ``probe/recorder.py``): user code run
before the step's model work began, and after. Before is batch preparation (``data``): reading
a pool, building a batch by hand. After is the loop's own code around the model (``compute``).
When a job never showed a forward, backward or optimizer step, position means nothing, and a
function's op count decides instead.

A function is a tiny-op loop when the op census saw it issue at least ``TINY_MIN_OPS`` torch
calls per step and the time spent in it divided by those calls is under ``TINY_MAX_S_PER_OP``:
dispatch, not arithmetic, is what it pays for. Time the host spent waiting inside synchronising
calls (``.item()``, ``.cpu()``, ... timed by ``probe/sync_waits.py`` on a GPU) is not launch time:
it is left out of that per-call time, and a line where most of the time was such waits is
``sync`` at that line (:func:`on_device`), whatever its text says.

On a GPU, the model's compute is ``memory_bandwidth`` when the op census's counted FLOPs and bytes
put most of the roofline time under the bandwidth slope (``diagnose/intensity.py``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from trainmedic.categories import CATEGORIES, COMPUTE, DATA, HOST_OTHER, MEMORY_BANDWIDTH, SYNC, TINY_OPS
from trainmedic.run.diagnose.intensity import Bound
from trainmedic.run.probe.recorder import AFTER_MODEL, BEFORE_MODEL, SLOTS, Aggregate
from trainmedic.run.probe.sync_waits import SyncWaits
from trainmedic.units import format_seconds

TINY_MIN_OPS = 100
#: When the steps are iterations of a loop the run repeats (no step of its own, probe/loops.py),
#: one step is one sample of a per-sample loop: seed 001 made 15 calls a sample, 70,000 a batch.
TINY_MIN_OPS_PER_ITERATION = 10
TINY_MAX_S_PER_OP = 50e-6
#: A line is a waiting line when the timed waits inside its synchronising calls are at least this
#: share of the time sampled there: the host sat in ``.item()``, not in Python around it.
WAIT_LINE_SHARE = 0.5
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


def tiny_loops(
    aggregate: Aggregate,
    steps: int,
    ops_by_function: dict[str, int],
    census_steps: int,
    min_ops: int = TINY_MIN_OPS,
    waits: SyncWaits | None = None,
) -> dict[str, TinyLoop]:
    if not census_steps or not steps:
        return {}
    seconds: dict[str, float] = defaultdict(float)
    waited: dict[str, float] = defaultdict(float)  # sampled inside sync calls: not launching
    for (slot, _kind, _where, function), weight in aggregate.lines.items():
        if function is not None:
            seconds[function] += weight
            if slot == SYNC:
                waited[function] += weight
    for function, timed in (waits.seconds_by_function() if waits is not None else {}).items():
        waited[function] = max(waited[function], timed)  # the same waits, seen twice
    loops = {}
    for function, ops in ops_by_function.items():
        per_step = ops / census_steps
        spent = max(seconds.get(function, 0.0) - waited.get(function, 0.0), 0.0) / steps
        if per_step >= min_ops and spent > 0 and spent / per_step <= TINY_MAX_S_PER_OP:
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


def waiting_lines(aggregate: Aggregate, waits: SyncWaits | None) -> dict[str, float]:
    """User lines where most of the sampled time was timed waits inside synchronising calls,
    with those waits in seconds over the same steps."""
    if waits is None or not waits.seconds_by_where:
        return {}
    sampled: dict[str, float] = defaultdict(float)
    for (_slot, _kind, where, _function), weight in aggregate.lines.items():
        if where is not None:
            sampled[where] += weight
    return {
        where: seconds
        for where, seconds in waits.seconds_by_where.items()
        if seconds > 0 and seconds >= WAIT_LINE_SHARE * sampled.get(where, 0.0)
    }


def on_device(costs: list[Cost], bound: Bound | None, waiting: dict[str, float]) -> list[Cost]:
    """What only a GPU run's measurements can say about the costs ``resolve`` settled.

    Plain user code sampled at a waiting line is ``sync`` there: the C call that blocked left no
    frame, and its text (``if loss < best:``) need not look like a read. The model's compute is
    ``memory_bandwidth`` when the counted ops are bandwidth-bound (``bound``).
    """
    if not waiting and not (bound is not None and bound.bandwidth_bound):
        return costs
    settled = []
    for cost in costs:
        if cost.where in waiting and cost.slot in (BEFORE_MODEL, AFTER_MODEL):
            cost = Cost(cost.slot, SYNC, "host read", cost.where, cost.function, cost.seconds)
        elif cost.category == COMPUTE and bound is not None and bound.bandwidth_bound:
            cost = Cost(cost.slot, MEMORY_BANDWIDTH, cost.kind, cost.where, cost.function, cost.seconds)
        settled.append(cost)
    return settled


def device_evidence(category: str, bound: Bound | None, waits: SyncWaits | None, steps: int) -> list[str]:
    """The GPU measurements behind a finding of ``category``, as evidence lines."""
    lines = []
    if bound is not None and category in (COMPUTE, MEMORY_BANDWIDTH):
        lines.append(bound.evidence())
    if waits is not None and waits.measured and steps > 0 and category in (SYNC, TINY_OPS):
        per_step = waits.total_s / steps
        if category == SYNC and waits.seconds_by_where:
            where = max(waits.seconds_by_where, key=lambda w: waits.seconds_by_where[w])
            call = waits.call_by_where.get(where, "item")
            lines.append(
                f"the host waited {format_seconds(per_step)} per step inside {waits.calls / steps:,.0f} "
                f"synchronising calls, most in {call}() at {where} "
                f"({format_seconds(waits.seconds_by_where[where] / steps)} per step)"
            )
        elif category == TINY_OPS:
            lines.append(
                f"the host waited only {format_seconds(per_step)} per step inside synchronising calls: "
                "the device waits for the launches, not the host for the device"
            )
    return lines


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
