"""Step clock of benchmarks/wild.py's truth runs (plain ``python``, no trainmedic).

Imported by ``sitecustomize`` beside it, which is on the child's PYTHONPATH only in truth runs.
``tick()`` records ``time.perf_counter()`` and ``time.process_time()`` (CPU seconds of the
process: on a shared 2-core machine the truth is taken from it, the wall clock is kept beside it); with ``WILD_TICK=optimizer`` every ``step()`` of the
first optimizer that steps ticks (a global post-hook: one tick per training step, also where a
step runs two optimizers, as in DCGAN). At exit the ticks go to ``$WILD_TIMES`` as JSON."""

from __future__ import annotations

import atexit
import json
import os
import time

ticks: list[float] = []
cpu: list[float] = []


def tick() -> None:
    ticks.append(time.perf_counter())
    cpu.append(time.process_time())


def _dump() -> None:
    with open(os.environ["WILD_TIMES"], "w", encoding="utf-8") as f:
        json.dump({"ticks": ticks, "cpu": cpu}, f)


if os.environ.get("WILD_TIMES"):
    atexit.register(_dump)

if os.environ.get("WILD_TICK") == "optimizer":
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _first: list[int] = []

    def _hook(optimizer, args, kwargs) -> None:
        if not _first:
            _first.append(id(optimizer))
        if id(optimizer) == _first[0]:
            tick()

    register_optimizer_step_post_hook(_hook)
