"""Step boundaries: where one training step ends and the next begins.

Boundaries come from several sources; the most explicit one wins. A user's ``trainmedic.step()``
marker beats a Keras training batch (``model.fit`` / ``train_on_batch``, see ``keras_hooks.py``),
which beats ``optimizer.step()``, which beats a data loader's ``next`` (Keras on the torch backend
feeds ``fit`` through a DataLoader of its own, so its ``next`` must not win), which beats the
iterations of the loop a run without any of those spends its time in (``loops.py``). When a better source
shows up mid-run (the first optimizer step after the loader's first ``next``), counting starts
over from there, so a step always means the same thing throughout a report.

Everything here runs on the training thread, once per step: it must stay a few microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from trainmedic.run.probe.decimate import Decimator

MARKER = "marker"
OPTIMIZER = "optimizer"
LOADER = "loader"
KERAS = "keras"
LOOP = "loop"
_PRIORITY = {LOOP: 1, LOADER: 2, OPTIMIZER: 3, KERAS: 4, MARKER: 5}


class StepLimitReached(BaseException):
    """Raised on the training thread after ``--steps N`` steady-state steps.

    A ``BaseException`` so that the user's ``except Exception`` cannot swallow it.
    """


class StepClock:
    def __init__(self, warmup: int = 3, max_steps: int | None = None, capacity: int = 2048) -> None:
        if warmup < 0:
            raise ValueError(f"warmup={warmup!r}; expected 0 or more steps")
        self.warmup = warmup
        self.max_steps = max_steps
        self.source: str | None = None
        #: Completed steps since the current source took over; samples taken now belong to step ``index``.
        #: -1 until the first boundary: time before it is set-up.
        self.index = -1
        #: True once the step's forward, backward or optimizer step has begun; user code seen
        #: before that is preparing the batch.
        self.anchored = False
        self.restarts = 0
        self.first_boundary_t: float | None = None
        self.last_boundary_t: float | None = None
        self.durations: Decimator[float] = Decimator(capacity)
        #: Process CPU seconds per steady step, same indices as ``durations``: a step that takes
        #: longer because a neighbour took the CPU is not a step that does more work.
        self.cpu_durations: Decimator[float] = Decimator(capacity)
        self.last_cpu_t: float | None = None
        #: Wall and CPU seconds from the step's first forward (or backward, or optimizer step) to
        #: its end, as the torch hooks saw it, same indices as ``durations``: the model's part of
        #: the step, timed exactly, which tells a step whose batch preparation grew from a
        #: machine that slowed under all of it (diagnose/growth.py).
        self.model_durations: Decimator[tuple[float, float]] = Decimator(capacity)
        self._model_began: tuple[float, float] | None = None
        self.warmup_durations: list[float] = []
        #: Called on each boundary with the new step index (the op census uses it).
        self.listeners: list[Callable[[int], None]] = []
        #: Called before a boundary is timed: on CUDA it waits for the step's queued kernels, so
        #: asynchronous work is charged to the step that launched it, not to a later sync point.
        self.before_boundary: Callable[[], None] | None = None
        #: Called once when ``max_steps`` is reached: it may return a callable that takes each
        #: further step's wall seconds and says when to stop (the confirmation, probe/confirm.py).
        #: Those steps are timed for it alone: the window's durations stay as they were.
        self.on_limit: Callable[[], Callable[[float], bool] | None] | None = None
        self.overtime: Callable[[float], bool] | None = None

    @property
    def steady_from(self) -> int:
        return self.warmup

    def boundary(self, source: str, now: float | None = None, cpu_now: float | None = None) -> None:
        current = _PRIORITY.get(self.source or "", 0)
        priority = _PRIORITY[source]
        if priority < current:
            return
        if self.before_boundary is not None:
            self.before_boundary()
        t = time.perf_counter() if now is None else now
        cpu = time.process_time() if cpu_now is None else cpu_now
        if self.overtime is not None:
            self._overtime_step(priority == current, t, cpu)
            return
        if priority > current:
            self._restart(source, t)
        else:
            duration = t - self.last_boundary_t if self.last_boundary_t is not None else 0.0
            if self.index >= self.steady_from:
                self.durations.add(self.index, duration)
                self.cpu_durations.add(
                    self.index, cpu - (self.last_cpu_t if self.last_cpu_t is not None else cpu)
                )
                if self._model_began is not None:
                    began_t, began_cpu = self._model_began
                    self.model_durations.add(self.index, (t - began_t, cpu - began_cpu))
            else:
                self.warmup_durations.append(duration)
            self.index += 1
            self.last_boundary_t = t
        self.last_cpu_t = cpu
        self.anchored = False
        self._model_began = None
        for listener in self.listeners:
            listener(self.index)
        if self.max_steps is not None and self.index - self.steady_from >= self.max_steps:
            if self.on_limit is not None:
                on_limit, self.on_limit = self.on_limit, None  # once
                self.overtime = on_limit()
                if self.overtime is not None:
                    # What on_limit took (a first diagnosis) is nobody's step.
                    self.last_boundary_t, self.last_cpu_t = time.perf_counter(), time.process_time()
                    return
            raise StepLimitReached(self.max_steps)

    def _overtime_step(self, same_source: bool, t: float, cpu: float) -> None:
        if not same_source:
            return  # a new step source now would count something else: the experiment's steps stay
        duration = t - self.last_boundary_t if self.last_boundary_t is not None else 0.0
        self.last_boundary_t, self.last_cpu_t = t, cpu
        self.index += 1
        self.anchored = False
        self._model_began = None
        if self.overtime is not None and self.overtime(duration):
            self.overtime = None
            raise StepLimitReached(self.max_steps)

    def restart(self, source: str) -> None:
        """Count again from step 0 with ``source`` (a loop clock moving to another loop)."""
        self._restart(source, time.perf_counter())

    def anchor(self, timed: bool = False) -> None:
        """The step's model work has begun. ``timed``: called on the training thread as it
        begins (a hook, not the sampler noticing it later), so the time is the model's start."""
        self.anchored = True
        if timed and self._model_began is None:
            self._model_began = (time.perf_counter(), time.process_time())

    def _restart(self, source: str, t: float) -> None:
        if self.source is not None:
            self.restarts += 1
        self.source = source
        self.index = 0
        self.first_boundary_t = self.last_boundary_t = t
        self.durations.clear()
        self.cpu_durations.clear()
        self.model_durations.clear()
        self._model_began = None
        self.warmup_durations.clear()
