"""How long the host waits inside synchronising calls, at the user's line that made them.

A stack sample inside ``loss.item()`` says where the host is, not why: on a GPU the same line
may return at once (the queue was already empty, the host is the slow side: launch-bound) or
block until every queued kernel has run (the host waits on the device: sync-bound). Only the
time spent inside the call tells the two apart, so the calls that make the host wait for the
device — ``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``bool()``/``float()``/``int()``
of a tensor, ``nonzero`` (its output size lives on the device) and ``torch.cuda.synchronize()``
— are wrapped and timed on the training thread.

Cost: only those calls pay, ~0.3 µs each (two clock reads and a thread check); nothing per
tensor op. The stack is walked to the user's line only for a call that really waited
(``min_attributed_s``), so a script that reads thousands of host scalars a step from CPU tensors
pays no frame walks. Installed by the watch session on CUDA runs only: on a CPU, ``.item()``
has nothing to wait for.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.patches import Patches
from trainmedic.run.probe.recorder import function_key

#: Tensor methods that copy a device value to the host, or need one to decide their output size.
SYNC_METHODS = ("item", "cpu", "tolist", "numpy", "nonzero", "__bool__", "__float__", "__int__", "__index__")
#: A call shorter than this did not wait for the device (a D2H copy of a scalar alone takes
#: ~10 µs on a PCIe GPU): it is counted, but the stack is not walked to find its line.
MIN_ATTRIBUTED_S = 20e-6


@dataclass
class SyncWaits:
    """Steady-state time inside synchronising calls, per user line (``path:line``)."""

    seconds_by_where: dict[str, float] = field(default_factory=dict)
    calls_by_where: dict[str, int] = field(default_factory=dict)
    #: ``where`` -> the user function it is in (``probe.recorder.function_key``).
    function_by_where: dict[str, str] = field(default_factory=dict)
    #: Which call waited at each line (``"item"``, ``"synchronize"``), the longest-waiting one.
    call_by_where: dict[str, str] = field(default_factory=dict)
    #: All timed calls, attributed or not.
    total_s: float = 0.0
    calls: int = 0
    #: True when the timer ran (a CUDA run): zero waits then mean "measured, none".
    measured: bool = False

    def seconds_by_function(self) -> dict[str, float]:
        spent: dict[str, float] = defaultdict(float)
        for where, seconds in self.seconds_by_where.items():
            function = self.function_by_where.get(where)
            if function is not None:
                spent[function] += seconds
        return dict(spent)


class SyncWaitTimer:
    """Wraps the synchronising entry points of torch and times them on one thread."""

    def __init__(
        self,
        classifier: FrameClassifier,
        counting: Callable[[], bool] | None = None,
        thread_id: int | None = None,
        min_attributed_s: float = MIN_ATTRIBUTED_S,
    ) -> None:
        self.classifier = classifier
        #: Says whether a call now belongs to the measured steps (the session: steady state).
        self.counting = counting
        self.thread_id = thread_id if thread_id is not None else threading.get_ident()
        self.min_attributed_s = min_attributed_s
        self.installed = False
        self._patches = Patches()
        self._inside = False  # a sync call made inside another one (print -> item) counts once
        self._seconds: dict[str, float] = defaultdict(float)
        self._calls: Counter[str] = Counter()
        self._functions: dict[str, str] = {}
        self._longest: dict[str, tuple[float, str]] = {}
        self._total_s = 0.0
        self._total_calls = 0

    def install(self, torch: Any) -> None:
        if self.installed:
            return
        self.installed = True
        for name in SYNC_METHODS:
            original = getattr(torch.Tensor, name, None)
            if original is not None:
                self._patches.replace(torch.Tensor, name, self._wrap(original, name))
        self._patches.replace(torch, "nonzero", self._wrap(torch.nonzero, "nonzero"))
        self._patches.replace(torch.cuda, "synchronize", self._wrap(torch.cuda.synchronize, "synchronize"))

    def uninstall(self) -> None:
        self._patches.undo()
        self.installed = False

    def snapshot(self) -> SyncWaits:
        calls = dict(self._calls)
        return SyncWaits(
            seconds_by_where=dict(self._seconds),
            calls_by_where=calls,
            function_by_where=dict(self._functions),
            call_by_where={where: name for where, (_, name) in self._longest.items()},
            total_s=self._total_s,
            calls=self._total_calls,
            measured=self.installed or bool(self._total_calls),
        )

    def _wrap(self, original: Callable, name: str) -> Callable:
        timer = self
        clock = time.perf_counter
        get_ident = threading.get_ident

        def timed(*args: Any, **kwargs: Any) -> Any:
            if timer._inside or get_ident() != timer.thread_id:
                return original(*args, **kwargs)
            timer._inside = True
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = clock() - start
                timer._inside = False
                if timer.counting is None or timer.counting():
                    timer._record(elapsed, name, sys._getframe(1))

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        timed.__name__ = getattr(original, "__name__", name)
        timed.__doc__ = getattr(original, "__doc__", None)
        return timed

    def _record(self, elapsed: float, name: str, frame: Any) -> None:
        self._total_s += elapsed
        self._total_calls += 1
        if elapsed < self.min_attributed_s:
            return
        code_info = self.classifier.code_info
        depth = 0
        while frame is not None and depth < 256:
            if code_info(frame)[0]:
                code = frame.f_code
                where = self.classifier.where(code.co_filename, frame.f_lineno or 0)
                self._seconds[where] += elapsed
                self._calls[where] += 1
                if where not in self._functions:
                    self._functions[where] = function_key(code) or ""
                if elapsed > self._longest.get(where, (0.0, ""))[0]:
                    self._longest[where] = (elapsed, name)
                return
            frame = frame.f_back
            depth += 1
