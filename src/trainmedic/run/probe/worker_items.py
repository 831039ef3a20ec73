"""Where a DataLoader's workers spend their time, measured in this process after the run.

With ``num_workers > 0`` the dataset's ``__getitem__`` and its transforms run in worker
processes that the stack sampler (a thread of this process) never sees: the training loop only
waits in the loader's ``next()``, and the report could name nothing better than the ``for``
line. pytorch/examples' MNIST on a GPU uses one worker; with a heavy NumPy transform in its
``Compose`` (96 % of the step, ×26 by ablation) the report said "data at main.py:39", the loop.

After the script has finished (nothing of this lands in its steps), a few of the dataset's items
are fetched again here: timed plainly first, then once more under ``cProfile``, whose per-function
cumulative times give the innermost function of the user's holding most of an item's time: the
code the workers run. A map-style dataset only (an iterable one has no item to ask for); any
error leaves the profile empty with its reason, and the run's report goes on without it.
"""

from __future__ import annotations

import cProfile
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from trainmedic.run.probe.frames import FrameClassifier

#: Items fetched for each of the two passes, at most, and the time either may take.
MAX_ITEMS = 16
BUDGET_S = 1.0
#: The function named is the innermost one of the user's holding at least this share of an item.
HOLDS = 0.5


@dataclass(frozen=True)
class ItemProfile:
    """One dataset item's cost as a worker pays it, and the user's code that pays most of it."""

    num_workers: int
    batch_size: int | None
    items: int = 0
    seconds_per_item: float = 0.0
    #: ``path:line`` of the user's function's ``def``, its name, and its share of an item's time.
    where: str | None = None
    function: str | None = None
    share: float = 0.0
    #: The cores this process may use (the workers' ceiling).
    cores: int = 1
    problem: str | None = None

    @property
    def measured(self) -> bool:
        return self.items > 0

    @property
    def seconds_per_batch(self) -> float:
        return self.seconds_per_item * (self.batch_size or 1)


def profile_items(
    dataset: Any, classifier: FrameClassifier, num_workers: int, batch_size: int | None
) -> ItemProfile:
    empty = ItemProfile(num_workers, batch_size, cores=_cores())
    try:
        length = len(dataset)
        dataset.__getitem__  # noqa: B018 - a map-style dataset, or nothing to fetch
    except (TypeError, AttributeError, NotImplementedError):
        return replace(empty, problem="an iterable dataset: no item to fetch outside its workers")
    if length <= 0:
        return replace(empty, problem="an empty dataset")
    indices = [i * length // MAX_ITEMS for i in range(min(MAX_ITEMS, length))]
    try:
        items, seconds = _timed(dataset, indices)
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            _timed(dataset, indices[:items])
        finally:
            profiler.disable()
    except Exception as exc:  # noqa: BLE001 - the user's dataset, outside its worker
        return replace(empty, problem=f"fetching an item here raised {type(exc).__name__}: {exc}")
    per_item = seconds / items
    found = _innermost_holder(profiler, classifier)
    if found is None:
        return replace(empty, items=items, seconds_per_item=per_item)
    code, share = found
    return replace(
        empty,
        items=items,
        seconds_per_item=per_item,
        where=classifier.where(code.co_filename, code.co_firstlineno),
        function=code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
        share=share,
    )


def _timed(dataset: Any, indices: list[int]) -> tuple[int, float]:
    started = time.perf_counter()
    done = 0
    for index in indices:
        dataset[index]
        done += 1
        if time.perf_counter() - started > BUDGET_S:
            break
    return done, time.perf_counter() - started


def _innermost_holder(profiler: cProfile.Profile, classifier: FrameClassifier) -> tuple[Any, float] | None:
    """The user's function with the least cumulative time among those holding ``HOLDS`` of it all."""
    # (code, cumulative seconds) of Python functions: a built-in's entry names it with a str
    entries = [(e.code, e.totaltime) for e in profiler.getstats() if not isinstance(e.code, str)]
    timed = _timed.__code__
    total = max((seconds for code, seconds in entries if code is timed), default=0.0)
    if total <= 0:
        return None
    holders = [
        (code, seconds)
        for code, seconds in entries
        if seconds >= HOLDS * total and code is not timed and classifier.is_user_file(code.co_filename)
    ]
    if not holders:
        return None
    code, seconds = min(holders, key=lambda holder: holder[1])
    return code, seconds / total


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
