"""Aggregates stack samples into seconds per category, per user line and per step.

Fed by the sampler thread. Samples are buffered per step and folded when the step index moves
on, so the unfinished last step is never counted and warm-up steps stay out of steady state.
Memory is bounded: lines are keyed by source location (finite), steps are decimated.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from types import CodeType
from typing import overload

from trainmedic.categories import CATEGORIES
from trainmedic.run.probe.by_code import ByCode
from trainmedic.run.probe.decimate import Decimator
from trainmedic.run.probe.frames import Classified

#: Pseudo-categories for samples in plain user code, resolved once the whole run is known:
#: before the step's forward/backward began (preparing the batch) or after it.
BEFORE_MODEL = "user:before_model"
AFTER_MODEL = "user:after_model"
SLOTS: tuple[str, ...] = CATEGORIES + (BEFORE_MODEL, AFTER_MODEL)
_SLOT = {name: i for i, name in enumerate(SLOTS)}

# (slot, kind, where, function) -> seconds
LineKey = tuple[str, str, "str | None", "str | None"]


@overload
def function_key(code: CodeType) -> str: ...
@overload
def function_key(code: CodeType | None) -> str | None: ...
def function_key(code: CodeType | None) -> str | None:
    if code is None:
        return None
    return f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"


def split_function_key(key: str) -> tuple[str | None, int, str]:
    """``(file, first line, name)`` of a :func:`function_key` (a path may hold colons); the file
    is None when the key has no line number."""
    head, _, name = key.rpartition(":")
    path, _, first = head.rpartition(":")
    if not path or not first.isdigit():
        return None, 0, name
    return path, int(first), name


@dataclass
class Aggregate:
    seconds: float = 0.0
    samples: int = 0
    lines: dict[LineKey, float] = field(default_factory=lambda: defaultdict(float))
    slots: list[float] = field(default_factory=lambda: [0.0] * len(SLOTS))

    def add(self, key: LineKey, weight: float, samples: int = 1) -> None:
        self.seconds += weight
        self.samples += samples
        self.lines[key] += weight
        self.slots[_SLOT[key[0]]] += weight

    def merge(self, other: Aggregate) -> None:
        self.seconds += other.seconds
        self.samples += other.samples
        for key, weight in other.lines.items():
            self.lines[key] += weight
        for i, weight in enumerate(other.slots):
            self.slots[i] += weight


class Recorder:
    def __init__(self, warmup: int, capacity: int = 2048) -> None:
        self.warmup = warmup
        self._lock = threading.Lock()
        self.setup = Aggregate()
        self.warm = Aggregate()
        self.steady = Aggregate()
        self.steady_steps = 0
        self.per_step: Decimator[list[float]] = Decimator(capacity)
        self._open = Aggregate()
        self._open_step = -1
        self._generation = 0
        self._function_keys: ByCode[str] = ByCode()  # built once per code object, not per sample

    def add(self, step: int, generation: int, anchored: bool, sample: Classified, weight: float) -> None:
        with self._lock:
            if generation != self._generation:
                # The step source changed (see StepClock): what was counted meant something else.
                self._generation = generation
                self.warm, self.steady, self.steady_steps = Aggregate(), Aggregate(), 0
                self.per_step.clear()
                self._open, self._open_step = Aggregate(), step
            elif step != self._open_step:
                self._fold()
                self._open_step = step
            slot = sample.category or (AFTER_MODEL if anchored else BEFORE_MODEL)
            code = sample.user_code
            key = self._function_keys.get(code) if code is not None else None
            if key is None and code is not None:
                key = self._function_keys[code] = function_key(code)
            self._open.add((slot, sample.kind, sample.where, key), weight)

    def _fold(self) -> None:
        step, done = self._open_step, self._open
        self._open = Aggregate()
        if step < 0:
            self.setup.merge(done)
        elif step < self.warmup:
            self.warm.merge(done)
        else:
            self.steady.merge(done)
            self.steady_steps += 1
            self.per_step.add(step, list(done.slots))

    def close(self) -> Aggregate:
        """Stop recording; return the unfinished last step's samples (not folded anywhere)."""
        with self._lock:
            tail, self._open = self._open, Aggregate()
            if self._open_step < 0:
                self.setup.merge(tail)
                tail = Aggregate()
            return tail
