"""How long each step of a rank waits in collectives: DDP's gradient all-reduce and torch.distributed calls.

Under DistributedDataParallel the wait happens inside ``loss.backward()``, in C++: a stack sample
there reads "backward" whether the rank computes or idles until the slowest rank's gradients
arrive. So the wait is timed where it begins and ends. A DDP communication hook (the stock
``allreduce_hook``, which DDP documents as giving the same result as no hook) notes when the
rank's last gradient bucket is ready — its own backward is done — and when the all-reduce it
starts completes: the gap is time spent waiting for the other ranks (plus the transfer itself).
A hook the user registers is wrapped the same way instead. Python-level collectives
(``dist.all_reduce(...)``, ``dist.barrier()``, ...) are timed around the call when synchronous.

Nothing here compares clocks across ranks: each rank measures its own wait on its own clock,
so it holds across nodes too. Only steady-state steps (the clock's index past warm-up) count.

On CUDA tensors (NCCL) a collective's future completes once it is queued on the GPU and
``dist.all_reduce`` returns at once: a host clock would read a wait of zero. Those collectives
are left untimed and named as such (``CollectiveStats.untimed``), so that no straggler verdict
is drawn from waits that were not measured.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.run.probe.clock import StepClock
from trainmedic.run.probe.decimate import Decimator
from trainmedic.run.probe.patches import Patches

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

#: The torch.distributed functions that block every rank until all have called them.
COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
)
_MARK = "_trainmedic_timed"


@dataclass
class CollectiveStats:
    """Per steady-state step: seconds waited in collectives, and what was waited on."""

    #: (step index, seconds) for steady-state steps, decimated like the step durations.
    waits: list[tuple[int, float]] = field(default_factory=list)
    #: Which collectives were seen: "DDP gradient all-reduce", "dist.all_reduce", ...
    kinds: tuple[str, ...] = ()
    #: Collectives seen but not timed (on CUDA; a DDP model with a built-in C++ hook).
    untimed: tuple[str, ...] = ()


class CollectiveTimer:
    def __init__(self, clock: StepClock, capacity: int = 2048) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._step_wait = 0.0  # of the step that is running now
        self._waits: Decimator[float] = Decimator(capacity)
        self._kinds: dict[str, None] = {}
        self._untimed: dict[str, None] = {}
        self._depth = threading.local()  # all_gather_object calls all_gather: count the outer call only
        self._patches = Patches()
        # A backward pass in flight: when its last bucket was ready, and the latest completion.
        self._last_ready: float | None = None
        self._latest_done = 0.0
        self._last_index = -1

    # -- installing ------------------------------------------------------------------------------

    def install(self, torch: Any) -> None:
        """Patch DDP and torch.distributed's collectives (torch is imported)."""
        self.clock.listeners.append(self._on_step)
        try:
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
        except ImportError:  # a torch built without distributed support
            return
        if not dist.is_available():
            return
        self._patch_ddp(DistributedDataParallel)
        c10d = getattr(dist, "distributed_c10d", None)
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None or getattr(original, _MARK, False):
                continue
            timed = self._timed_call(name, original)
            self._patches.replace(dist, name, timed)
            if c10d is not None and getattr(c10d, name, None) is original:
                self._patches.replace(c10d, name, timed)

    def uninstall(self) -> None:
        self._patches.undo()
        if self._on_step in self.clock.listeners:
            self.clock.listeners.remove(self._on_step)

    def stats(self) -> CollectiveStats:
        with self._lock:
            return CollectiveStats(self._waits.items(), tuple(self._kinds), tuple(self._untimed))

    # -- DDP ------------------------------------------------------------------------------------

    def _patch_ddp(self, ddp: type[DistributedDataParallel]) -> None:
        timer = self
        forward, register = ddp.forward, ddp.register_comm_hook

        def register_comm_hook(module: Any, state: object, hook: Callable) -> None:
            # The user's own hook (compression, ...) is kept and timed; DDP allows one hook only.
            setattr(module, _MARK, True)
            register(module, state, timer._timed_hook(hook))

        def forward_timed(module: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(module, _MARK, False):
                setattr(module, _MARK, True)
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                # Registered before the first forward, as DDP requires; process_group is the
                # module's own group, which the stock hook reads as its state.
                try:
                    register(module, module.process_group, timer._timed_hook(default_hooks.allreduce_hook))
                except RuntimeError:  # a built-in C++ hook (fp16 compression) is already there: one hook only
                    timer._untimed.setdefault("DDP all-reduce with a built-in hook", None)
            return forward(module, *args, **kwargs)

        forward_timed.__wrapped__ = forward  # type: ignore[attr-defined]
        register_comm_hook.__wrapped__ = register  # type: ignore[attr-defined]
        self._patches.replace(ddp, "forward", forward_timed)
        self._patches.replace(ddp, "register_comm_hook", register_comm_hook)

    def _timed_hook(self, hook: Callable) -> Callable:
        timer = self

        def timed(state: object, bucket: Any) -> Any:
            if bucket.buffer().is_cuda:  # NCCL: done on the GPU, not when the future says so
                timer._untimed.setdefault("DDP gradient all-reduce on CUDA", None)
                return hook(state, bucket)
            last = bucket.is_last()
            fut = hook(state, bucket)
            if last:
                timer._last_ready = time.perf_counter()
            timer._kinds.setdefault("DDP gradient all-reduce", None)

            def done(f: Any) -> Any:
                timer._bucket_done(last)
                return f.value()

            return fut.then(done)

        # What DDP checks and logs of a hook: its names, and annotations that are either absent or
        # exactly GradBucket / Future[Tensor] (this module's string annotations would be neither).
        timed.__name__ = getattr(hook, "__name__", "hook")
        timed.__qualname__ = getattr(hook, "__qualname__", "hook")
        timed.__annotations__ = {}
        return timed

    def _bucket_done(self, last: bool) -> None:
        # Runs on the communication thread. DDP waits for every bucket before backward returns,
        # so this has run for the whole pass before the step's boundary.
        now = time.perf_counter()
        with self._lock:
            self._latest_done = max(self._latest_done, now)
            if last and self._last_ready is not None:
                self._step_wait += max(self._latest_done - self._last_ready, 0.0)
                self._last_ready, self._latest_done = None, 0.0

    # -- torch.distributed calls ------------------------------------------------------------------

    def _timed_call(self, name: str, original: Callable) -> Callable:
        timer = self
        label = f"dist.{name}"

        def call(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(timer._depth, "n", 0)
            if kwargs.get("async_op") or depth:
                return original(*args, **kwargs)  # async: the wait is in work.wait(); nested: counted outside
            if _on_cuda(args):
                timer._untimed.setdefault(f"{label} on CUDA", None)
                return original(*args, **kwargs)
            started = time.perf_counter()
            timer._depth.n = 1
            try:
                return original(*args, **kwargs)
            finally:
                timer._depth.n = 0
                with timer._lock:
                    timer._step_wait += time.perf_counter() - started
                    timer._kinds.setdefault(label, None)

        call.__wrapped__ = original  # type: ignore[attr-defined]
        call.__doc__ = original.__doc__
        call.__name__ = getattr(original, "__name__", name)
        setattr(call, _MARK, True)
        return call

    def _on_step(self, index: int) -> None:
        # ``index`` is the step that begins now; the one that ended is ``index - 1``.
        with self._lock:
            if index <= self._last_index:
                self._waits.clear()  # a better step source took over: counting starts again
            self._last_index = index
            ended, wait = index - 1, self._step_wait
            self._step_wait = 0.0
            if ended >= self.clock.warmup:
                self._waits.add(ended, wait)


def _on_cuda(args: tuple[Any, ...]) -> bool:
    """Whether a collective's tensor (the first argument, or the first of a list) is on a GPU."""
    first = args[0] if args else None
    if isinstance(first, (list, tuple)) and first:
        first = first[0]
    return bool(getattr(first, "is_cuda", False))
