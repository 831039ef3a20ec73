"""Time a training step honestly: warm it up, then repeated trials between device syncs.

- The first step is timed alone and reported apart: it holds torch.compile's compilation,
  cuDNN's algorithm search and lazy initialisation (the "first epoch is slower" of
  every compiled or autotuned step), which no steady-state number should contain.
- Further warm-up steps run until two in a row agree within ``SETTLED`` (allocator caches,
  CPU frequency, a recompile for the second call's shapes), at most ``MAX_WARMUP``.
- A trial is ``steps_per_trial`` steps between two syncs, sized to last ``min_trial_s``, so that
  timer resolution and the sync itself vanish and asynchronous GPU work is counted where it
  runs. Each trial gives samples/s; the median of the trials is the speed, their range the noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from trainmedic.tune.budget import OutOfTime
from trainmedic.tune.model import Measurement
from trainmedic.tune.step import TrainingStep

SETTLED = 0.10
MAX_WARMUP = 5
MIN_TRIALS = 3
#: Steps a GradScaler gets to settle its scale (it halves per overflowing step from 2**16).
MAX_SCALER_WARMUP = 40


def measure(
    step: TrainingStep,
    *,
    trials: int = 5,
    min_trial_s: float = 0.3,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Warm ``step`` up and time ``trials`` trials of it; fewer (never under 3) if ``deadline`` comes first.

    ``deadline`` is a reading of ``clock`` (``time.monotonic``, the search's clock). A step or
    trial that would end past it is not started: after 3 trials the measurement ends there,
    before that :class:`OutOfTime` says the configuration cannot be measured in the time left.
    """
    batch = step.config.batch_size or 1

    def fits(seconds: float) -> bool:
        return deadline is None or clock() + seconds <= deadline

    if not fits(0.0):
        raise OutOfTime
    step.sync()
    start = clock()
    step()
    step.sync()
    first = clock() - start
    previous, warmup = None, 0
    while warmup < MAX_WARMUP:
        # The first step's time holds compilation: no guide to the next one's.
        if not fits(previous or 0.0):
            raise OutOfTime
        start = clock()
        step()
        step.sync()
        took = clock() - start
        warmup += 1
        if previous is not None and abs(took - previous) <= SETTLED * max(took, previous):
            break
        previous = took
    if step.scaler is not None:
        # fp16: a GradScaler starts at 2**16 and skips the optimizer step while it halves the
        # scale on overflow; skipped steps are cheaper, so none may fall into the timed trials.
        for _ in range(MAX_SCALER_WARMUP):
            if not fits(took):
                raise OutOfTime
            scale = step.scaler.get_scale()
            step()
            warmup += 1
            if step.scaler.get_scale() == scale:
                break
        step.sync()
    per_step = max(took, 1e-6)
    steps = max(1, math.ceil(min_trial_s / per_step))
    speeds: list[float] = []
    while len(speeds) < trials:
        if not fits(steps * per_step):
            if len(speeds) >= MIN_TRIALS:
                break
            raise OutOfTime
        start = clock()
        for _ in range(steps):
            step()
        step.sync()
        speeds.append(batch * steps / (clock() - start))
    return Measurement(tuple(speeds), steps, first, warmup)
