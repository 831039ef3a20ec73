"""Op census: the torch calls the user's own code makes per step, what they touch and what they cost.

Tiny-op loops (70,000 tiny launches for one batch of generated samples) look like ordinary user code to a
stack sampler; what gives them away is the count and the size. For a few warm-up steps a
``TorchFunctionMode`` sees every torch call and charges it to the user's line that *made* it:

- a call made by a library on the way (a module's forward, the optimizer, gradient clipping,
  a GradScaler, Keras's or Lightning's trainer) is that library's, not the user's: a
  module-level training loop once had its optimizer's and clipping's ~670 calls a step charged
  to ``<module>``, and its backward time divided by them read as a "per-sample loop";
- a call made inside a DataLoader's fetch (the user's ``__getitem__``, transforms, collate) is
  data, not the loop's (``loader_calls``);
- every other call is the user's own: per function and per line, how many, how many touched a
  tensor that requires grad (the model's tensors: compute, never data), and what the call's own
  work costs on this machine (its bytes and FLOPs priced by ``call_floor``) against what getting
  it started costs (the measured floor).

It runs only during warm-up, so steady-state timings never carry its cost. On a CUDA run the
same steps also count each op's FLOPs and bytes (``costs``, see ``op_costs.py``).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from trainmedic.categories import DATA
from trainmedic.run.probe.by_code import ByCode
from trainmedic.run.probe.call_floor import CallCost, measure
from trainmedic.run.probe.device_busy import DeviceBusyProbe
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.op_costs import OpCostCounter
from trainmedic.run.probe.recorder import function_key

#: How far above the user's frame a DataLoader's fetch is looked for: __getitem__ <- fetch's
#: comprehension <- fetch <- _next_data <- __next__, with a transform or two in between.
_LOADER_DEPTH = 8
_LOADER_KINDS = frozenset({"loader", "collate"})
_MATMULS = frozenset({"matmul", "mm", "bmm", "__matmul__", "__rmatmul__"})
_WEIGHTED = frozenset({"linear", "addmm", "baddbmm"})
_CONVS = frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})


@dataclass
class CallTally:
    """The user's own torch calls at one function or line, over the census steps."""

    calls: int = 0
    #: Calls with an argument that requires grad: work on the model's tensors.
    grad_calls: int = 0
    #: Their own work (bytes or FLOPs, whichever takes longer) in this machine's seconds.
    work_s: float = 0.0
    #: What starting them costs at this machine's floor, one per call.
    floor_s: float = 0.0
    #: The part of ``work_s`` done by the calls that touched a tensor requiring grad (a
    #: ``.detach()`` touches one and does nothing; the ``torch.cat`` after it does the work).
    grad_work_s: float = 0.0

    def add(self, touches_grad: bool, work_s: float, floor_s: float) -> None:
        self.calls += 1
        self.grad_calls += touches_grad
        self.work_s += work_s
        self.floor_s += floor_s
        if touches_grad:
            self.grad_work_s += work_s

    def without(self, parts: list[CallTally]) -> CallTally:
        """These calls less ``parts`` (some of its lines' calls)."""
        return CallTally(
            self.calls - sum(p.calls for p in parts),
            self.grad_calls - sum(p.grad_calls for p in parts),
            self.work_s - sum(p.work_s for p in parts),
            self.floor_s - sum(p.floor_s for p in parts),
            self.grad_work_s - sum(p.grad_work_s for p in parts),
        )

    @property
    def overhead_bound(self) -> bool:
        """Getting the calls started costs more than the work they do: a tiny-op pattern."""
        return self.calls > 0 and self.floor_s >= self.work_s


@dataclass
class Census:
    """What the census counted; empty when it never ran (too few steps)."""

    steps: int = 0
    by_function: dict[str, CallTally] = field(default_factory=dict)
    by_line: dict[str, CallTally] = field(default_factory=dict)
    #: Calls made inside a DataLoader's fetch: data, charged to nobody's loop.
    loader_calls: int = 0
    #: Calls made by libraries (modules, optimizer, clipping, trainers) on the user's behalf.
    library_calls: int = 0
    #: This machine's measured call floor, per device the calls ran on.
    floors: dict[str, CallCost] = field(default_factory=dict)

    @property
    def counted(self) -> bool:
        return self.steps > 0 and bool(self.floors)


class OpCensus:
    def __init__(self, classifier: FrameClassifier, start_step: int, steps: int) -> None:
        self.classifier = classifier
        self.start_step = start_step
        self.end_step = start_step + steps
        self.steps_counted = 0
        self.by_function: dict[str, CallTally] = defaultdict(CallTally)
        self.by_line: dict[str, CallTally] = defaultdict(CallTally)
        self.loader_calls = 0
        self.library_calls = 0
        self.floors: dict[str, CallCost] = {}
        self._mode: Any = None
        self._last_index = start_step
        self._torch_code: ByCode[bool] = ByCode()
        self._torch: Any = None
        #: Set before the census starts to count FLOPs and bytes over the same steps.
        self.costs: OpCostCounter | None = None
        #: Set before the census starts to time the GPU's busy spans over the same steps.
        self.busy: DeviceBusyProbe | None = None

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
        import torch
        from torch.overrides import TorchFunctionMode

        self._torch = torch  # imported once here, not per counted call
        self.floors["cpu"] = measure(torch, "cpu")
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.floors["cuda"] = measure(torch, "cuda")
        census = self

        class _Counting(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                census._count(sys._getframe(1), func, args, kwargs, out)
                return out

        if self.busy is not None:  # before the mode: the profiler's own torch calls are nobody's
            self.busy.start()
        self._mode = _Counting()
        self._mode.__enter__()
        if self.costs is not None:
            self.costs.start()

    def _count(self, frame: Any, func: Any, args: tuple, kwargs: dict | None, out: Any) -> None:
        code_info = self.classifier.code_info
        while frame is not None:
            is_user, family = code_info(frame)
            if is_user:
                break
            if family is not None or not self._in_torch(frame):
                self.library_calls += 1  # a module, the optimizer, a trainer made it
                return
            frame = frame.f_back
        if frame is None:
            self.library_calls += 1
            return
        if self._in_loader(frame.f_back):
            self.loader_calls += 1
            return
        tensors = _tensors(self._torch, args, kwargs)
        cost = self.floors.get(_device(tensors)) or self.floors["cpu"]
        work = cost.work_s(_moved(self._torch, func, tensors, out), _flops(self._torch, func, args, out))
        touches_grad = any(t.requires_grad for t in tensors)
        code = frame.f_code
        where = self.classifier.where(code.co_filename, frame.f_lineno or 0)
        self.by_function[function_key(code)].add(touches_grad, work, cost.floor_s)
        self.by_line[where].add(touches_grad, work, cost.floor_s)

    def _in_torch(self, frame: Any) -> bool:
        """torch's own glue (functional, tensor methods) between the user's line and the op."""
        known = self._torch_code.get(frame.f_code)
        if known is None:
            module = frame.f_globals.get("__name__")
            known = self._torch_code[frame.f_code] = isinstance(module, str) and (
                module == "torch" or module.startswith("torch.")
            )
        return known

    def _in_loader(self, frame: Any) -> bool:
        code_info = self.classifier.code_info
        for _ in range(_LOADER_DEPTH):
            if frame is None:
                return False
            family = code_info(frame)[1]
            if family is not None and family[0] == DATA and family[1] in _LOADER_KINDS:
                return True
            frame = frame.f_back
        return False

    @property
    def ops_by_function(self) -> dict[str, int]:
        return {key: tally.calls for key, tally in self.by_function.items()}

    def snapshot(self) -> Census:
        return Census(
            steps=self.steps_counted,
            by_function=dict(self.by_function),
            by_line=dict(self.by_line),
            loader_calls=self.loader_calls,
            library_calls=self.library_calls,
            floors=dict(self.floors),
        )

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
        if self.busy is not None:
            self.busy.stop(self.steps_counted)


def _tensors(torch: Any, args: tuple, kwargs: dict | None) -> list[Any]:
    """The tensors among a call's arguments, one level into lists and tuples."""
    found = []
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _device(tensors: list[Any]) -> str:
    return tensors[0].device.type if tensors else "cpu"


def _moved(torch: Any, func: Any, tensors: list[Any], out: Any) -> float:
    """Bytes a call reads and writes; a view writes nothing and reads nothing of its own."""
    outs = (
        [out]
        if isinstance(out, torch.Tensor)
        else [o for o in out if isinstance(o, torch.Tensor)]
        if isinstance(out, (list, tuple))
        else []
    )
    in_place = getattr(func, "__name__", "").endswith("_")  # add_, copy_: work written in place
    if outs and all(o._is_view() or (not in_place and _aliases(o, tensors)) for o in outs):
        return 0.0  # a view, or a .detach(): the same memory under another name
    try:
        return float(sum(t.nbytes for t in tensors) + sum(o.nbytes for o in outs))
    except (RuntimeError, NotImplementedError):  # sparse, nested or meta tensors: no byte count
        return 0.0


def _aliases(out: Any, tensors: list[Any]) -> bool:
    try:
        ptr = out.data_ptr()
        return ptr != 0 and any(t.data_ptr() == ptr for t in tensors)
    except (RuntimeError, NotImplementedError):
        return False


def _flops(torch: Any, func: Any, args: tuple, out: Any) -> float:
    """Multiply-adds of the matmul and convolution calls (the rest are priced by their bytes)."""
    name = getattr(func, "__name__", "")
    if not isinstance(out, torch.Tensor) or not args:
        return 0.0
    try:
        if name in _MATMULS and isinstance(args[0], torch.Tensor) and args[0].dim():
            return 2.0 * out.numel() * args[0].shape[-1]
        if name in _WEIGHTED and len(args) > 1 and isinstance(args[1], torch.Tensor) and args[1].dim():
            return 2.0 * out.numel() * args[1].shape[-1]
        if name in _CONVS and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return 2.0 * out.numel() * args[1][0].numel()
    except (RuntimeError, IndexError, TypeError):
        return 0.0
    return 0.0
