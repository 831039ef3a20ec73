"""Op census: how many tensor operations each user function issues per step.

Tiny-op loops (seed 001: 70,000 tiny launches for one batch) look like ordinary user code to a
stack sampler; what gives them away is the count. For a few warm-up steps a
``TorchFunctionMode`` counts every torch call and charges it to the innermost user frame.
It runs only during warm-up, so steady-state timings never carry its cost. On a CUDA run the
same steps also count each op's FLOPs and bytes (``costs``, see ``op_costs.py``).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.op_costs import OpCostCounter
from trainmedic.run.probe.recorder import function_key


class OpCensus:
    def __init__(self, classifier: FrameClassifier, start_step: int, steps: int) -> None:
        self.classifier = classifier
        self.start_step = start_step
        self.end_step = start_step + steps
        self.steps_counted = 0
        self.by_function: Counter[str] = Counter()
        self._mode: Any = None
        self._last_index = start_step
        #: Set before the census starts to count FLOPs and bytes over the same steps.
        self.costs: OpCostCounter | None = None

    @property
    def started(self) -> bool:
        """True once the census has begun counting (it may have finished since)."""
        return self._mode is not None or bool(self.steps_counted)

    def on_step(self, index: int) -> None:
        """Called at every step boundary with the index of the step that starts now."""
        self._last_index = index
        if index == self.start_step and self._mode is None and not self.steps_counted:
            self._start()
        elif index >= self.end_step and self._mode is not None:
            self.stop()

    def _start(self) -> None:
        from torch.overrides import TorchFunctionMode

        census = self

        class _Counting(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                census._count(sys._getframe(1))
                return func(*args, **(kwargs or {}))

        self._mode = _Counting()
        self._mode.__enter__()
        if self.costs is not None:
            self.costs.start()

    def _count(self, frame: Any) -> None:
        code_info = self.classifier.code_info
        while frame is not None:
            if code_info(frame)[0]:
                self.by_function[function_key(frame.f_code)] += 1
                return
            if _framework_step(frame.f_code, frame.f_globals):
                return  # the framework's own train step, not a loop the user wrote (see below)
            frame = frame.f_back

    def stop(self) -> None:
        if self._mode is None:
            return
        mode, self._mode = self._mode, None
        self.steps_counted = max(1, self._last_index - self.start_step)
        if self.costs is not None:
            self.costs.stop(self.steps_counted)
        try:
            mode.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - the user's code may have left another mode on top
            pass


# Keras's fit runs the whole train step itself: metrics, loss tracking and the optimizer's
# per-variable updates issued ~580 torch calls a step for a two-layer Dense model (torch
# backend), which, charged to the user's `model.fit(...)` line, read as a tiny-op loop there.
# Ops reached through Keras's trainer with no user frame in between are the framework's; a
# user's own train_step or layer call() sits inside the trainer and is still counted.
_FRAMEWORK: dict[Any, bool] = {}


def _framework_step(code: Any, globals_: dict) -> bool:
    known = _FRAMEWORK.get(code)
    if known is None:
        module = globals_.get("__name__")
        known = _FRAMEWORK[code] = isinstance(module, str) and (
            module.startswith("keras.src.trainers.")
            or (module.startswith("keras.src.backend.") and module.endswith(".trainer"))
        )
    return known
