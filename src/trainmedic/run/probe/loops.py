"""The loop a run without steps spends its time in, and its iterations counted as the steps.

A script with no ``optimizer.step()``, no Keras fit, no DataLoader and no ``trainmedic.step()``
(a hand-written SGD update, a per-sample generation job) gives the step clock nothing to
count. Such a script still repeats something: the loop its stack samples sit in. While no step
source has shown up, :class:`LoopFinder` looks at each sample's user frames, and once one loop
holds nearly every sample it is chosen: the innermost such loop, so an epoch loop around a
per-sample loop gives the per-sample loop. "Nearly every" is read with the samples' own error: a
loop nested in the chosen one (a multipath loop, inside each sample's generation) can
hold 80 % of 30 samples by chance when it holds 60 % of the time. So a loop is chosen early only
when its share is clearly above the line, passed over when clearly below, and a share within
noise of the line waits for more samples, up to :data:`LONG_WINDOW`, where its estimate decides.

:class:`LoopClock` then makes each iteration a step boundary. Counting needs code on the training
thread, which the sampler thread cannot run, so it sends that thread a signal: the handler (run by
the interpreter on the main thread between bytecodes) installs a line tracer on the loop's frame,
which calls the step clock each time the loop's head runs. ``sys.settrace`` needs a global trace
function too; ours returns at once, except for new frames of the loop's own code (a function
called once per epoch), which it traces as well. That costs each Python call on the training
thread a few hundred nanoseconds, only in runs that have no steps of their own, and it stops when
a real step source takes over. Only the main thread takes signals: a script run elsewhere, or
under a tracer already in place (a debugger, coverage), gets no loop clock and is told why.
"""

from __future__ import annotations

import ast
import functools
import math
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from trainmedic.run.probe.clock import LOOP, StepClock
from trainmedic.run.probe.frames import FrameClassifier, read_tree

#: Samples looked at before any choice: about 0.3 s of a run at the default 10 ms interval.
WINDOW = 30
#: The most samples looked at together: a share still within noise of SHARE after this many
#: (1.2 s) is judged by its estimate, which is then within about 7 points of the true share.
LONG_WINDOW = 120
#: A loop is the run's when this share of the samples sit inside it.
SHARE = 0.8
#: Standard errors between a loop's sampled share and SHARE for a choice before LONG_WINDOW.
#: A loop holding 62 % of the time reaches 80 % of 30 samples 2.9 % of the time (binomial); read
#: so, none of 3,000 simulated runs chose it, and a loop holding 95 % is still chosen at 30
#: samples in half of them (75 at most in 99 %).
Z = 2.0
#: A counted loop with no iteration for this long has ended: another loop holding the window
#: takes over, unless the counted one was seen running the model (then it is the training loop,
#: and an evaluation loop after it must not take its place).
IDLE_S = 1.0
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_COMPREHENSION_CODES = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})
# Python 3.12 runs list, set and dict comprehensions inline, in the enclosing function's frame.
_INLINED = (ast.ListComp, ast.SetComp, ast.DictComp) if sys.version_info >= (3, 12) else ()


@dataclass(frozen=True)
class Loop:
    """One loop of the user's code, as the interpreter runs it."""

    code: CodeType
    #: The line executed once at the start of every iteration (the ``for``/``while`` line; the
    #: body's first line for ``while True``, whose test the compiler drops).
    line: int
    #: Shown to the user: ``train.py:42`` (the loop's own first line).
    where: str


@dataclass(frozen=True)
class _Site:
    first: int
    last: int
    line: int
    body: tuple[int, int] | None  # a ``for``: only its body and head repeat, not its iterable


class LoopFinder:
    """Votes, sample by sample, for the loops the training thread's user frames are inside."""

    def __init__(
        self,
        classifier: FrameClassifier,
        window: int = WINDOW,
        share: float = SHARE,
        long_window: int = LONG_WINDOW,
    ) -> None:
        self.classifier = classifier
        self.window = window
        self.share = share
        self.long_window = max(long_window, window)
        self._recent: deque[tuple[Loop, ...]] = deque(maxlen=self.long_window)
        self._votes: Counter[Loop] = Counter()
        self._depth: dict[Loop, int] = {}  # how many loops enclose it, as last seen
        # The sample a loop was first seen in (since it last dropped out of the window): a loop
        # is judged on the samples since it began, not on the imports and set-up before it. A
        # generation job of 1.3 s on a fast VM spent 0.5 s importing torch; its loop held every
        # sample after that, under 80 % of the whole window, and was never chosen.
        self._first: dict[Loop, int] = {}
        self._samples = 0
        self._sites: dict[str, dict[Any, list[_Site]]] = {}

    def observe(self, frame: FrameType | None) -> Loop | None:
        """Count one sample; return the loop once one clearly holds ``share`` of the samples."""
        loops = self.loops_on_stack(frame)
        self._samples += 1
        if len(self._recent) == self.long_window:
            self._votes.subtract(self._recent[0])
            for gone in [loop for loop, votes in self._votes.items() if votes <= 0]:
                del self._votes[gone]
                self._first.pop(gone, None)
        self._recent.append(loops)
        self._votes.update(loops)
        for depth, loop in enumerate(reversed(loops)):
            self._depth[loop] = depth
            self._first.setdefault(loop, self._samples)

        def since(loop: Loop) -> int:
            """The samples looked at for ``loop``: those of the window since it began."""
            return min(len(self._recent), self._samples - self._first[loop] + 1)

        # Loops holding over half the samples share samples, so they nest, and an inner loop
        # holds no more samples than the one around it: fewest votes first is innermost first
        # (the per-sample loop inside an epoch loop, not the epoch loop), whether or not this
        # sample is inside it.
        candidates = sorted(
            (
                loop
                for loop, votes in self._votes.items()
                if share_bounds(votes, since(loop))[1] >= self.share
            ),
            key=lambda loop: (self._votes[loop], -self._depth.get(loop, 0)),
        )
        for loop in candidates:
            n = since(loop)
            if n < self.window:
                return None  # a loop that may hold the share has not been seen long enough
            if share_bounds(self._votes[loop], n)[0] < self.share:  # within noise of the line
                if n < self.long_window:
                    return None  # more samples decide, not this window's luck
                if self._votes[loop] < self.share * n:
                    continue  # as many samples as are looked at: the estimate decides
            return loop if loop in loops else None  # chosen while running, so the clock finds it
        return None

    def loops_on_stack(self, frame: FrameType | None) -> tuple[Loop, ...]:
        """The loops around each user frame's current line, innermost frame and loop first."""
        found: list[Loop] = []
        while frame is not None:
            if self.classifier.code_info(frame)[0]:
                code = frame.f_code
                for site in self._sites_of(code):
                    if _inside(site, frame.f_lineno):
                        found.append(
                            Loop(code, site.line, self.classifier.where(code.co_filename, site.first))
                        )
            frame = frame.f_back
        return tuple(dict.fromkeys(found))  # a recursive function's loop counts once a sample

    def _sites_of(self, code: CodeType) -> list[_Site]:
        by_function = self._sites.get(code.co_filename)
        if by_function is None:
            by_function = self._sites[code.co_filename] = _loop_sites(code.co_filename)
        if code.co_name == "<module>":
            key: Any = "<module>"
        elif code.co_name in _COMPREHENSION_CODES:
            key = ("comprehension", code.co_firstlineno)
        else:
            key = code.co_firstlineno
        # Innermost loop first: a nested loop starts later than the loop around it.
        return sorted(by_function.get(key, ()), key=lambda s: -s.first)


def share_bounds(hits: int, samples: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of a share seen in ``hits`` of ``samples`` samples: unlike the
    normal approximation it stays inside [0, 1] and is not zero-width at 30 of 30."""
    if samples <= 0:
        return 0.0, 1.0
    p = hits / samples
    z2 = z * z
    centre = (p + z2 / (2 * samples)) / (1 + z2 / samples)
    half = z * math.sqrt(p * (1 - p) / samples + z2 / (4 * samples * samples)) / (1 + z2 / samples)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def body_position(loop: Loop, line: int) -> int:
    """Where ``line`` sits within one iteration of ``loop``: the line itself, or the first line of
    the outermost loop nested in ``loop`` that holds it, so that a nested loop's wrap-around
    does not read as the outer loop's next iteration (``trainmedic attach`` counts steps so)."""
    if line == loop.line:
        return line
    code = loop.code
    key: Any = "<module>" if code.co_name == "<module>" else code.co_firstlineno
    sites = _loop_sites_cached(code.co_filename).get(key, [])
    outer = next((s for s in sites if s.line == loop.line), None)
    if outer is None:
        return line
    nested = [s.first for s in sites if outer.first < s.first and s.last <= outer.last and _inside(s, line)]
    return min(nested, default=line)


@functools.lru_cache(maxsize=64)
def _loop_sites_cached(filename: str) -> dict[Any, list[_Site]]:
    return _loop_sites(filename)


def _inside(site: _Site, line: int | None) -> bool:
    if line is None or not site.first <= line <= site.last:
        return False
    if site.body is None or line == site.line:
        return True
    return site.body[0] <= line <= site.body[1]


def _loop_sites(filename: str) -> dict[Any, list[_Site]]:
    """Every function's own loops (not those of functions nested in it), by the key
    :meth:`LoopFinder._sites_of` looks code objects up with."""
    tree = read_tree(filename)
    if tree is None:
        return {}
    sites: dict[Any, list[_Site]] = {}

    def visit(node: ast.AST, keys: tuple[Any, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # co_firstlineno is the first decorator's line for a decorated function.
                visit(child, (child.lineno, *(d.lineno for d in child.decorator_list)))
                continue
            if isinstance(child, (ast.Lambda, ast.ClassDef)):
                visit(child, (("elsewhere", id(child)),))
                continue
            site = _site(child)
            if site is not None:
                if isinstance(child, _COMPREHENSIONS) and not isinstance(child, _INLINED):
                    sites.setdefault(("comprehension", child.lineno), []).append(site)
                else:
                    for key in keys:
                        sites.setdefault(key, []).append(site)
            visit(child, keys)

    visit(tree, ("<module>",))
    return sites


def _site(node: ast.AST) -> _Site | None:
    if isinstance(node, (ast.For, ast.AsyncFor)):
        last = _last(node)
        return _Site(node.lineno, last, node.lineno, (node.body[0].lineno, node.body[-1].end_lineno or last))
    if isinstance(node, ast.While):
        forever = isinstance(node.test, ast.Constant) and bool(node.test.value)
        return _Site(node.lineno, _last(node), node.body[0].lineno if forever else node.lineno, None)
    if isinstance(node, _COMPREHENSIONS):
        return _Site(node.lineno, _last(node), node.lineno, None)
    return None


def _last(node: ast.stmt | ast.expr) -> int:
    return node.end_lineno or node.lineno


def _signal_number() -> int | None:
    """A signal nobody else listens to: one near the top of the real-time range on Linux,
    SIGUSR2 elsewhere; None where threads cannot be signalled (Windows)."""
    if not hasattr(signal, "pthread_kill"):
        return None
    rtmax = getattr(signal, "SIGRTMAX", None)
    return int(rtmax) - 2 if rtmax is not None else int(signal.SIGUSR2)


class LoopClock:
    """Makes each iteration of a chosen loop a step boundary on the training thread."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.loop: Loop | None = None
        #: Why no loop could be counted, for the report (None while nothing went wrong).
        self.problem: str | None = None
        self._signal = _signal_number()
        self._previous: Any = None
        self._armed = False
        self._thread = threading.main_thread()
        self._tracing = False
        self._local: Callable[..., Any] | None = None
        self._global: Callable[..., Any] | None = None
        self._traced: Loop | None = None

    def arm(self) -> bool:
        """Take the signal now, on the main thread, before the script runs (False: cannot)."""
        if threading.current_thread() is not self._thread:
            self.problem = "the script does not run on the main thread, so no loop could be timed"
        elif self._signal is None:
            self.problem = "this platform cannot signal a thread, so no loop could be timed"
        elif signal.getsignal(self._signal) not in (signal.SIG_DFL, None):
            self.problem = "the signal the loop clock needs is taken by the script, so no loop could be timed"
        else:
            self._previous = signal.signal(self._signal, self._on_signal)
            self._armed = True
            return True
        return False

    def count(self, loop: Loop) -> None:
        """From the sampler thread: start counting ``loop``'s iterations (or move to ``loop``
        from one that stopped iterating: see :meth:`LoopWatch.observe`)."""
        if loop == self.loop or not self._armed or self._signal is None:
            return
        if signal.getsignal(self._signal) != self._on_signal:
            self.problem = (
                "the script replaced the signal handler the loop clock needs, so no loop could be timed"
            )
            return
        self.loop = loop
        ident = self._thread.ident
        if ident is not None:  # None only before the thread starts
            signal.pthread_kill(ident, self._signal)

    def _on_signal(self, _signum: int, frame: FrameType | None) -> None:
        loop = self.loop
        if loop is None or self.clock.source not in (None, LOOP):
            return
        if self._tracing:
            if self._traced is loop:
                return
            # The counted loop ended (a set-up loop: tokenizing a corpus before training): its
            # iterations say nothing about the loop that runs now, so counting starts over.
            self.untrace()
            self.clock.restart(LOOP)
        if sys.gettrace() is not None:
            self.problem = "another tracer (a debugger or coverage) is active, so the loop could not be timed"
            return
        line, code, boundary = loop.line, loop.code, self._boundary

        def local(frame: FrameType, event: str, _arg: Any) -> Any:
            if event == "line" and frame.f_lineno == line:
                boundary()
            return local

        def global_(frame: FrameType, event: str, _arg: Any) -> Any:
            # New frames of the loop's code (its function called again) are counted as well.
            return local if event == "call" and frame.f_code is code else None

        self._local, self._global = local, global_
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        if frame is not None:
            frame.f_trace_lines = True
            frame.f_trace = local
        sys.settrace(global_)
        self._tracing = True
        self._traced = loop

    def _boundary(self) -> None:
        if self.clock.source not in (None, LOOP):
            self.untrace()  # a real step source took over: iterations mean nothing more
            return
        self.clock.boundary(LOOP)

    def untrace(self) -> None:
        """Stop counting (on the main thread: the tracer belongs to it)."""
        if not self._tracing or threading.current_thread() is not self._thread:
            return
        self._tracing = False
        if sys.gettrace() is self._global:
            sys.settrace(None)
        frame: FrameType | None = sys._getframe()
        while frame is not None:
            if frame.f_trace is self._local:
                frame.f_trace = None
            frame = frame.f_back

    def disarm(self) -> None:
        """Stop counting and give the signal back (main thread, when the run ends)."""
        self.untrace()
        if self._armed and self._signal is not None and threading.current_thread() is self._thread:
            if signal.getsignal(self._signal) == self._on_signal:
                signal.signal(self._signal, self._previous if self._previous is not None else signal.SIG_DFL)
            self._armed = False


class LoopWatch:
    """The finder and the clock together, as the sampler and the session use them."""

    def __init__(self, clock: StepClock, classifier: FrameClassifier) -> None:
        self.finder = LoopFinder(classifier)
        self.clock = LoopClock(clock)
        self.armed = self.clock.arm()
        self.model_seen = False

    @property
    def looking(self) -> bool:
        # Still looking after a loop was chosen, until that loop is seen doing model work: a
        # set-up loop (tokenizing a corpus) can hold the run long enough to be chosen first.
        return self.armed and self.clock.problem is None and not self.model_seen

    def observe(self, frame: FrameType | None, model: bool = False) -> None:
        """Sampler thread, while no step source has shown up (and while the chosen loop may
        still be a set-up loop)."""
        now = time.perf_counter()
        counting = self.clock.loop is not None
        last = self.clock.clock.last_boundary_t
        idle = counting and (last is None or now - last > IDLE_S)
        if model and counting and not idle and self.clock.loop in self.finder.loops_on_stack(frame):
            # The counted loop runs the model: it is the run's. Model work outside it (the
            # model being built right after a tokenizer loop) says nothing about that loop.
            self.model_seen = True
            return
        loop = self.finder.observe(frame)
        if loop is not None and (not counting or (idle and loop != self.clock.loop)):
            self.clock.count(loop)

    @property
    def loop(self) -> Loop | None:
        return self.clock.loop

    @property
    def problem(self) -> str | None:
        return self.clock.problem

    def stop(self) -> None:
        self.clock.disarm()
