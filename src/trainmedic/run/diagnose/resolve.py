"""Turn raw samples into costs: settle plain user code by what it does, and find tiny-op loops.

The sampler leaves plain user code undecided: samples whose stack holds the user's lines and no
library that says what they wait on (see ``probe/recorder.py``). What such a line *does* decides
it, never where it sits in the step (nanoGPT fetches its next batch between forward and
backward; a position rule called that compute). The op census (``probe/census.py``) saw the
torch calls each line and function made itself:

- a function issuing many calls per step whose own work costs less than starting them, and
  whose sampled time per call is within a small multiple of this machine's measured call floor,
  is a tiny-op loop (``tiny_ops``): dispatch, not arithmetic, is what it pays for;
- a line whose calls touch tensors that require grad works on the model (``compute``, "user
  code": a loss computed outside the model, a hand-written update);
- a line whose calls touch no such tensor prepares data (``data``, "batch preparation"), and so
  does a line of a helper function whose calls all do;
- a line that makes no torch call in a function that makes none either is the loop's own
  bookkeeping (``host_other``), unless its text reads a file.

Only when no census ran (a run too short for one) does position decide, as a fallback the
report notes. Time the host spent waiting inside synchronising calls (``.item()``, ``.cpu()``,
... timed by ``probe/sync_waits.py`` on a GPU) is not launch time: it is left out of a loop's
per-call time, and a line where most of the time was such waits is ``sync`` at that line
(:func:`on_device`), whatever its text says.

On a GPU, the model's compute is ``memory_bandwidth`` when the op census's counted FLOPs and bytes
put most of the roofline time under the bandwidth slope (``diagnose/intensity.py``).
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
from collections import defaultdict
from dataclasses import dataclass

from trainmedic.categories import CATEGORIES, COMPUTE, DATA, HOST_OTHER, MEMORY_BANDWIDTH, SYNC, TINY_OPS
from trainmedic.run.diagnose.intensity import Bound
from trainmedic.run.probe.census import CallTally, Census
from trainmedic.run.probe.frames import read_tree
from trainmedic.run.probe.recorder import (
    AFTER_MODEL,
    BEFORE_MODEL,
    SLOTS,
    Aggregate,
    LineKey,
    split_function_key,
)
from trainmedic.run.probe.sync_waits import SyncWaits
from trainmedic.units import format_seconds

TINY_MIN_OPS = 100
#: Plain user code is compute when at least this share of its calls' work touched grad tensors.
GRAD_WORK_SHARE = 0.5
#: When the steps are iterations of a loop the run repeats (no step of its own, probe/loops.py),
#: one step is one sample of a per-sample loop: a generator of IQ samples made 15 calls a sample, 70,000 a batch.
TINY_MIN_OPS_PER_ITERATION = 10
#: Without a measured call floor (hand-built measurements), the old fixed cut-off per call.
TINY_MAX_S_PER_OP = 50e-6
#: A loop's sampled time per call within this multiple of the measured floor is overhead: the
#: interpreter's and the dispatcher's work around each call. Per-sample loops ran at 5-10x the
#: floor on an idle 2-core VM and up to twice that beside a busy neighbour (the floor is the
#: fastest of a few rounds, the loop's time an average); a function whose time goes to Python
#: work between a few calls runs at 100x and more.
TINY_MAX_FLOORS_PER_CALL = 25.0
#: A line of such a loop's function that makes at most this many calls a step runs outside the
#: loop's body (a ``torch.cat`` of a replay pool before the per-row draw). When its own time per
#: call is past the same multiple of the floor, its calls do work, not overhead: it is judged by
#: what its calls touch, and neither its time nor its calls are the loop's. Python 3.12 inlines
#: a list comprehension into its function, so a pool's cat and the per-row draw beside it became
#: one function there: on a 16-core Xeon the cat's 40 ms a step was averaged over 1,029 calls
#: (46 us each, under 25 floors of 2.6 us) and read as a per-sample loop at the ``def`` line.
OUTSIDE_LOOP_CALLS = 4
#: ...and its function makes at least this many times as many calls (a loop inside the step; when
#: each step is one sample, every line of the loop makes a few calls a step).
OUTSIDE_LOOP_RATIO = 50
PLAIN = (BEFORE_MODEL, AFTER_MODEL)
_NESTED_CODES = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>", "<lambda>"})
_READS = re.compile(r"(^|[^\w.])open\s*\(|\.read(lines|_text|_bytes)?\s*\(|\.readline\s*\(")
#: A line is a waiting line when the timed waits inside its synchronising calls are at least this
#: share of the time sampled there: the host sat in ``.item()``, not in Python around it.
WAIT_LINE_SHARE = 0.5
BATCH_PREPARATION = "batch preparation"
#: Plain user code sampled from outside: no census, so whether it is tiny tensor ops, NumPy work
#: or Python bookkeeping is not known, and is not guessed.
OWN_CODE = "own code"
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
    #: The model's phase (forward, backward, optimizer) of a model cost that was relabelled
    #: (``diagnose/launches.py``): kept for the finding's split.
    phase: str | None = None


@dataclass(frozen=True)
class TinyLoop:
    function: str
    ops_per_step: float
    seconds_per_op: float
    #: This machine's measured cost of starting one call, and the calls' own work per call.
    floor_s: float = 0.0
    work_per_op_s: float = 0.0
    #: Seconds per step the loop's own lines took (the time its fix acts on).
    seconds_per_step: float = 0.0
    #: Lines of the function outside the loop whose few calls do real work (OUTSIDE_LOOP_CALLS).
    working_lines: frozenset[str] = frozenset()

    def holds(self, where: str | None) -> bool:
        """Whether the line's time is the loop's."""
        return where not in self.working_lines


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
    census: Census | None = None,
) -> dict[str, TinyLoop]:
    if census is not None and census.counted:
        return _measured_loops(aggregate, steps, census, min_ops, waits)
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
            loops[function] = TinyLoop(function, per_step, spent / per_step, seconds_per_step=spent)
    return loops


def _measured_loops(
    aggregate: Aggregate, steps: int, census: Census, min_ops: int, waits: SyncWaits | None
) -> dict[str, TinyLoop]:
    """Loops whose calls cost more to start than to run, on this machine's measured floor."""
    if not steps:
        return {}
    own: dict[str, dict[str | None, float]] = defaultdict(lambda: defaultdict(float))
    for key, weight in aggregate.lines.items():
        if key[3] is not None and _own_time(key, census):
            own[key[3]][key[2]] += weight
    timed = waits.seconds_by_function() if waits is not None else {}
    loops = {}
    for function, whole in census.by_function.items():
        calls = whole.calls / census.steps
        if calls < min_ops:
            continue
        by_line = own.get(function, {})
        working = _working_lines(by_line, census, steps, calls)
        # The loop is what is left without the lines outside it: its calls, their starts and work.
        tally = whole.without([census.by_line[w] for w in working])
        per_step = tally.calls / census.steps
        if per_step < min_ops or not tally.overhead_bound:
            continue
        outside = sum(by_line[w] for w in working)
        spent = max(sum(by_line.values()) - outside - timed.get(function, 0.0), 0.0) / steps
        floor = tally.floor_s / tally.calls
        if spent > 0 and spent / per_step <= TINY_MAX_FLOORS_PER_CALL * floor:
            loops[function] = TinyLoop(
                function, per_step, spent / per_step, floor, tally.work_s / tally.calls, spent, working
            )
    return loops


def _working_lines(
    by_line: dict[str | None, float], census: Census, steps: int, function_calls: float
) -> frozenset[str]:
    """A function's lines outside its loop whose few calls each take far past the floor. Only
    where the function makes many times more calls than such a line (a loop inside the step):
    when each step is one sample, every line of the loop makes a few calls a step."""
    working: set[str] = set()
    for where, seconds in by_line.items():
        line = census.by_line.get(where) if where is not None else None
        if where is None or line is None or not line.calls:
            continue
        line_calls = line.calls / census.steps
        if line_calls > OUTSIDE_LOOP_CALLS or line_calls * OUTSIDE_LOOP_RATIO > function_calls:
            continue
        per_call = seconds / steps / line_calls
        if per_call > TINY_MAX_FLOORS_PER_CALL * line.floor_s / line.calls:
            working.add(where)
    return frozenset(working)


def _own_time(key: LineKey, census: Census) -> bool:
    """A sample in the user's own code: plain, or inside a module's forward at a line that
    made torch calls itself (a per-sample loop in a layer's call()). Backward, optimizer and
    library waits at the same line are not the loop's."""
    slot, kind, where, _function = key
    if slot in PLAIN:
        return True
    return slot == COMPUTE and kind == "forward" and where in census.by_line


def resolve(
    aggregate: Aggregate,
    anchored: bool,
    loops: dict[str, TinyLoop],
    ops_by_function: dict[str, int],
    census: Census | None = None,
    outside: bool = False,
) -> list[Cost]:
    """Each sampled line's cost, its category settled. ``outside``: the samples were read from
    outside the process (``trainmedic attach``): no census saw the calls of plain user code and
    its position is no evidence, so it stays what it is, the user's own code (:data:`OWN_CODE`),
    unless its text reads a file."""
    measured = census is not None and census.counted
    costs = []
    for key, weight in aggregate.lines.items():
        slot, kind, where, function = key
        category = slot
        in_loop = function in loops and loops[function].holds(where)
        if slot in PLAIN:
            if in_loop:
                category, kind = TINY_OPS, "per-sample loop"
            elif measured and census is not None:
                category, kind = _by_calls(where, function, census)
            elif outside:
                category, kind = (
                    (DATA, "disk") if where is not None and _reads_a_file(where) else (HOST_OTHER, OWN_CODE)
                )
            elif slot == BEFORE_MODEL:
                category, kind = (
                    (DATA, BATCH_PREPARATION) if anchored else _unanchored(function, ops_by_function)
                )
            else:
                category, kind = COMPUTE, "user code"
        elif (
            in_loop
            and (not measured or census is None or _own_time(key, census))
            and kind not in _FIXED_KINDS
        ):
            if category in (COMPUTE, DATA):
                category, kind = TINY_OPS, "per-sample loop"
        costs.append(Cost(slot, category, kind, where, function, weight))
    return costs


def _by_calls(where: str | None, function: str | None, census: Census) -> tuple[str, str]:
    """Plain user code, settled by the torch calls its line (or else its function) made."""
    line = census.by_line.get(where) if where is not None else None
    if line is not None and line.calls:
        return _of(line)
    owner = enclosing_function(function) if function is not None else None
    tally = census.by_function.get(owner) if owner is not None else None
    if owner is not None and tally is not None and tally.calls and not owner.endswith(":<module>"):
        return _of(tally)  # a helper's line between its calls (a tokenizer's loop in get_batch)
    if where is not None and _reads_a_file(where):
        return DATA, "disk"
    return HOST_OTHER, "user code"


@functools.lru_cache(maxsize=1024)
def enclosing_function(function: str) -> str:
    """The function a comprehension or lambda runs for (``get_batch`` for the ``[stoi[c] for c
    in text]`` in it): its own code object makes no torch call, its owner's do."""
    path, first, name = split_function_key(function)
    if path is None or name not in _NESTED_CODES:
        return function
    tree = read_tree(path)
    owner: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= first <= (
            node.end_lineno or node.lineno
        ):
            if owner is None or node.lineno > owner.lineno:
                owner = node
    if owner is None:
        return f"{path}:1:<module>"
    start = min([owner.lineno, *(d.lineno for d in owner.decorator_list)])
    return f"{path}:{start}:{owner.name}"


def _of(tally: CallTally) -> tuple[str, str]:
    # Work on the model's tensors (a loss, an update) is compute; a line that only detaches them
    # and does its work elsewhere (vae's `torch.cat([seen, recon.detach()])` pool) is not.
    if tally.grad_calls and tally.grad_work_s >= GRAD_WORK_SHARE * tally.work_s:
        return COMPUTE, "user code"
    return DATA, BATCH_PREPARATION


def _reads_a_file(where: str) -> bool:
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return False
    return bool(_READS.search(linecache.getline(path, int(line)).split("#", 1)[0]))


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
