"""Trace one training step of the user's ``build(batch_size)`` on fake tensors.

Nothing is allocated: ``build`` runs under ``FakeTensorMode``, so a 1B-parameter model costs
metadata only. The step runs forward, loss, backward, optimizer step and ``zero_grad`` twice,
because optimizers create their state lazily in the first step and the second step is the one
every later step looks like.
"""

from __future__ import annotations

import contextlib
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from trainmedic.devices import Device
from trainmedic.errors import PlanError
from trainmedic.plan.allocator import round_size
from trainmedic.plan.cuda.autocast import CudaAutocast
from trainmedic.plan.cuda.conv import ConvPass, conv_estimates, conv_notes
from trainmedic.plan.cuda.functions import FunctionsAsOnTarget, use_foreach
from trainmedic.plan.cuda.kernels import CudaKernels
from trainmedic.plan.cuda.rnn import flatten_weights
from trainmedic.plan.fake_device import CudaToCpu, DeepcopyByClone, modules_stay_on_cpu
from trainmedic.plan.optimizer_state import state_slots, step_counter_bytes
from trainmedic.plan.scaling import named_sizes
from trainmedic.plan.tracker import Allocation, GradFnLabeller, StorageTracker, is_user_code

PRECISIONS = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

_KEYS = {"model", "inputs", "optimizer", "loss_fn"}


@dataclass
class Trace:
    """Every allocation of the step, the order of births and deaths, and what each storage is."""

    batch_size: int
    events: list[tuple[str, int]]
    allocations: dict[int, Allocation]
    parameters: set[int] = field(default_factory=set)
    gradients: set[int] = field(default_factory=set)
    optimizer_state: set[int] = field(default_factory=set)
    #: Storages born in the forward pass and still alive when backward starts: saved for backward.
    saved: set[int] = field(default_factory=set)
    inputs: set[int] = field(default_factory=set)
    #: Optimizer ``step`` counters: CPU scalars unless the optimizer is capturable or fused.
    host_only: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Set when an op could not run on fake tensors: the trace stops there.
    incomplete: str | None = None
    trainable_bytes: int = 0
    #: Each convolution pass on a GPU target, with the sid of its planned workspace (None: none).
    conv_passes: list[tuple[int | None, ConvPass]] = field(default_factory=list)
    #: Parts of the plan that are estimates, not measurements (plan.confidence reads them).
    estimates: list[str] = field(default_factory=list)
    #: (index of the first event, phase) each time the phase changed: build, then forward,
    #: backward, optimizer and idle once per step.
    phase_marks: list[tuple[int, str]] = field(default_factory=list)
    #: Parameter-sized state tensors per parameter (None: an optimizer the table does not know).
    optimizer_slots: int | None = None
    step_counter_bytes: int = 0
    #: Axis sizes with a name in this build: the token sequence ``S``, the vocabulary ``V``.
    sizes: dict[int, str] = field(default_factory=dict)


def trace_step(
    build: Callable[[int], Any],
    batch_size: int,
    device: Device,
    precision: str = "fp32",
    observe: Callable[..., None] | None = None,
) -> Trace:
    """Run ``build(batch_size)`` and a full training step on fake tensors; record every storage.

    ``precision`` is a key of ``PRECISIONS``: ``plan_memory`` checks it before any trace.
    ``observe`` is called after every op like the tracker's ``on_op``, with
    ``(tracker, func, args, outputs, where)``; ``tracker.phase`` says which part of the step
    (``build``, ``forward``, ``backward``, ``optimizer``, ``idle``) is running.
    """
    gpu = CudaKernels(device) if device.is_gpu else None
    tracker = StorageTracker(on_op=_both(gpu, observe))
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with (
        fake,
        tracker,
        CudaToCpu(),
        DeepcopyByClone(),
        modules_stay_on_cpu(),
        _fake_state_restored() as originals,
    ):
        parts = call_build(build, batch_size)
        model, inputs, optimizer, loss_fn = unpack_build(parts, build)
        trace = Trace(batch_size, tracker.events, tracker.allocations, phase_marks=tracker.phase_marks)
        trace.sizes = named_sizes(model, tensors_of(inputs), batch_size)
        _adopt_state(tracker, fake, model, inputs, trace, device.is_gpu, originals)
        optimizer = _make_optimizer(optimizer, model)
        if optimizer is not None and device.is_gpu and use_foreach(optimizer):
            trace.notes.append(f"{type(optimizer).__name__} planned with foreach=True, its default on CUDA")
        if optimizer is not None:
            trace.optimizer_slots = state_slots(optimizer)
            trace.step_counter_bytes = step_counter_bytes(optimizer, device.is_gpu)
        dtype = PRECISIONS[precision]
        # On a GPU target the casts are CUDA autocast's, which differ from the CPU's (plan.cuda.autocast).
        cuda_autocast = CudaAutocast() if gpu is not None and dtype is not None else None

        def autocast():
            if cuda_autocast is not None and dtype is not None:
                return cuda_autocast.region(dtype)
            return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()

        try:
            on_target = (
                FunctionsAsOnTarget(device, trace.notes) if gpu is not None else contextlib.nullcontext()
            )
            with (
                _module_stack(tracker, model),
                GradFnLabeller(tracker),
                on_target,
                _quiet_hook_warnings(),
                cuda_autocast or contextlib.nullcontext(),
            ):
                for _ in range(2):
                    _one_step(tracker, trace, model, inputs, optimizer, loss_fn, autocast)
        except PlanError:
            raise
        except Exception as exc:  # an op fake tensors cannot run: keep what was traced, say so
            trace.incomplete = _describe_untraceable(exc, tracker.phase)
    if optimizer is None:
        trace.notes.append("no optimizer in build(): forward and backward only, no optimizer state")
    trace.notes.extend(dict.fromkeys(tracker.notes))
    for where in tracker.stand_ins:
        trace.warnings.append(
            f".item() at {where} has no value under planning; a stand-in value let the step go on"
        )
    if gpu is not None:
        trace.notes.extend(gpu.sdpa_calls)
        trace.conv_passes = gpu.conv_passes
        trace.notes.extend(conv_notes(device, gpu.conv_sources))
        trace.estimates.extend(conv_estimates(gpu.conv_sources))
        if isinstance(on_target, FunctionsAsOnTarget):  # it is, on a GPU target
            trace.estimates.extend(on_target.estimates)
        trace.estimates.extend(gpu.unmodelled)
    return trace


def _both(
    first: Callable[..., None] | None, second: Callable[..., None] | None
) -> Callable[..., None] | None:
    if first is None or second is None:
        return first or second

    def both(*args) -> None:
        first(*args)
        second(*args)

    return both


def call_build(build: Callable[[int], Any], batch_size: int) -> Any:
    try:
        return build(batch_size)
    except Exception as exc:
        where = user_line_of(exc)
        raise PlanError(
            f"{getattr(build, '__name__', 'build')}({batch_size}) raised {type(exc).__name__}: {exc}{where}. "
            "Fix the build function so it returns dict(model=..., inputs=...) for any batch size."
        ) from exc


def unpack_build(parts: Any, build: Callable) -> tuple:
    name = getattr(build, "__name__", "build")
    if not isinstance(parts, dict):
        raise PlanError(
            f"{name}(batch_size) returned {type(parts).__name__}, expected a dict with 'model' and 'inputs' "
            "(and optionally 'optimizer' and 'loss_fn'): return dict(model=model, inputs=x)."
        )
    unknown = sorted(set(parts) - _KEYS)
    missing = sorted({"model", "inputs"} - set(parts))
    if unknown or missing:
        problems = [f"missing {', '.join(map(repr, missing))}"] if missing else []
        problems += [f"unknown {', '.join(map(repr, unknown))}"] if unknown else []
        raise PlanError(
            f"{name}(batch_size) returned a dict with {'; '.join(problems)} keys; expected 'model' and 'inputs', "
            "optionally 'optimizer' and 'loss_fn'."
        )
    model = parts["model"]
    if not isinstance(model, torch.nn.Module):
        raise PlanError(f"'model' is a {type(model).__name__}, expected a torch.nn.Module.")
    inputs = parts["inputs"]
    tensors = tensors_of(inputs)
    if not tensors:
        raise PlanError(
            f"'inputs' is {type(inputs).__name__} with no tensor in it; expected a tensor, a tuple of tensors "
            "(passed as model(*inputs)) or a dict (model(**inputs))."
        )
    loss_fn = parts.get("loss_fn")
    if loss_fn is not None and not callable(loss_fn):
        raise PlanError(
            f"'loss_fn' is a {type(loss_fn).__name__}, expected a callable taking the model's output."
        )
    return model, inputs, parts.get("optimizer"), loss_fn


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to every tensor in it (nested dicts, tuples and lists kept)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


def tensors_of(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_of(item)]
    return []


def _adopt_state(
    tracker: StorageTracker,
    fake: FakeTensorMode,
    model: torch.nn.Module,
    inputs: Any,
    trace: Trace,
    cuda: bool,
    originals: list,
) -> None:
    # A model built before tracing (at import, say) holds real tensors: plan fake stand-ins of
    # them, and give the user's module its own tensors back afterwards.
    real = [
        (m, kind, name, t)
        for m in model.modules()
        for kind in ("_parameters", "_buffers")
        for name, t in getattr(m, kind).items()
        if t is not None and not _is_fake(t)
    ]
    if real:
        trace.warnings.append(
            "the model existed before build() was called; create it inside build() so nothing is allocated"
        )
    stand_ins: dict[int, torch.Tensor] = {}  # one per tensor, so tied weights stay tied
    for module, kind, name, tensor in real:
        stand_in = stand_ins.get(id(tensor))
        if stand_in is None:
            stand_in = fake.from_tensor(tensor)
            if kind == "_parameters":
                stand_in = torch.nn.Parameter(stand_in, requires_grad=tensor.requires_grad)
            stand_ins[id(tensor)] = stand_in
        originals.append((module, kind, name, tensor))
        getattr(module, kind)[name] = stand_in
    if cuda:
        flatten_weights(model)
    counted: set[int | None] = set()
    for p in model.parameters():
        sid = tracker.adopt(p, "parameter")
        _add(trace.parameters, sid)
        if sid in counted:  # one storage under several parameters (an RNN's flat weights)
            continue
        counted.add(sid)
        # What the device holds per tensor: a whole allocator block on a GPU.
        nbytes = round_size(p.untyped_storage().nbytes()) if cuda else p.untyped_storage().nbytes()
        if p.requires_grad:
            trace.trainable_bytes += nbytes
    for b in model.buffers():
        _add(trace.parameters, tracker.adopt(b, "buffer"))
    for t in tensors_of(inputs):
        _add(trace.inputs, tracker.adopt(t if _is_fake(t) else fake.from_tensor(t), "input"))


def _add(sids: set[int], sid: int | None) -> None:
    """Add a tracked storage's id; a storage-less tensor (sparse) has none to add."""
    if sid is not None:
        sids.add(sid)


@contextlib.contextmanager
def _fake_state_restored():
    """Put back the real tensors of a model that existed before tracing, however tracing ends."""
    originals: list = []
    try:
        yield originals
    finally:
        for module, kind, name, tensor in originals:
            getattr(module, kind)[name] = tensor


@contextlib.contextmanager
def _quiet_hook_warnings():
    # torch.compile'd modules warn that global module hooks fire an extra time: they are the
    # planner's own hooks, not the user's concern.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*hook.*", category=UserWarning)
        yield


@contextlib.contextmanager
def _module_stack(tracker: StorageTracker, model: torch.nn.Module):
    """Keep ``tracker.module_stack`` on the modules whose forward is running."""
    sites = {id(m): (name or type(m).__name__, _module_line(tracker, m)) for name, m in model.named_modules()}

    def enter(module, args):
        tracker.module_stack.append(sites.get(id(module), (type(module).__name__, "")))

    def leave(module, args, output):
        if tracker.module_stack:
            tracker.module_stack.pop()

    handles = [
        torch.nn.modules.module.register_module_forward_pre_hook(enter),
        torch.nn.modules.module.register_module_forward_hook(leave, always_call=True),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        tracker.module_stack.clear()


def _module_line(tracker: StorageTracker, module: torch.nn.Module) -> str:
    """The user's line for a module: where its first parameter was made, else its forward when
    the user wrote it (a library's forward is no line of theirs)."""
    for p in module.parameters(recurse=False):
        sid = tracker.sid_of(p)
        if sid is not None and tracker.allocations[sid].where:
            return tracker.allocations[sid].where
    forward = getattr(type(module), "forward", None)
    code = getattr(forward, "__code__", None)
    if code is not None and is_user_code(code.co_filename):
        return f"{code.co_filename}:{code.co_firstlineno}"
    return ""


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _make_optimizer(optimizer: Any, model: torch.nn.Module) -> torch.optim.Optimizer | None:
    if isinstance(optimizer, torch.optim.Optimizer) and not all(
        _is_fake(p) for g in optimizer.param_groups for p in g["params"]
    ):
        # Made outside build() on real tensors: plan a twin of it over the fake parameters and
        # leave the user's optimizer untouched.
        kind, defaults = type(optimizer), dict(optimizer.defaults)
        try:
            return kind(model.parameters(), **defaults)
        except Exception as exc:
            raise PlanError(
                f"the optimizer {kind.__name__} was made before build() ran and cannot be re-made from its defaults "
                f"({type(exc).__name__}: {exc}); give optimizer=lambda params: {kind.__name__}(params, ...) instead."
            ) from exc
    if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if callable(optimizer):
        try:
            made = optimizer(model.parameters())
        except Exception as exc:
            raise PlanError(
                f"'optimizer' was called with the model's parameters and raised {type(exc).__name__}: {exc}. "
                "Give an optimizer, or a callable such as lambda params: torch.optim.AdamW(params, lr=1e-3)."
            ) from exc
        if isinstance(made, torch.optim.Optimizer):
            return made
        optimizer = made
    raise PlanError(
        f"'optimizer' is a {type(optimizer).__name__}, expected a torch.optim.Optimizer or a callable "
        "taking the parameters and returning one (e.g. lambda params: torch.optim.AdamW(params))."
    )


def _one_step(tracker: StorageTracker, trace: Trace, model, inputs, optimizer, loss_fn, autocast) -> None:
    tracker.phase = "forward"
    with autocast():
        out = forward(model, inputs)
        loss = loss_of(out, loss_fn)
    for a in trace.allocations.values():
        if a.phase == "forward" and a.died is None:
            trace.saved.add(a.sid)
    tracker.phase = "backward"
    loss.backward()
    del out, loss
    for p in model.parameters():
        if p.grad is not None:
            _add(trace.gradients, tracker.sid_of(p.grad))
    tracker.phase = "optimizer"
    if optimizer is not None:
        optimizer.step()
        on_device_steps = any(g.get("capturable") or g.get("fused") for g in optimizer.param_groups)
        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    sid = tracker.sid_of(value)
                    _add(trace.optimizer_state, sid)
                    if key == "step" and value.numel() == 1 and not on_device_steps:
                        _add(trace.host_only, sid)
        optimizer.zero_grad(set_to_none=True)
    else:
        model.zero_grad(set_to_none=True)
    tracker.phase = "idle"


def forward(model: torch.nn.Module, inputs: Any) -> Any:
    """``model(**inputs)`` for a dict, ``model(*inputs)`` for a tuple or list, else ``model(inputs)``."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def loss_of(out: Any, loss_fn: Callable | None) -> torch.Tensor:
    if loss_fn is not None:
        loss = loss_fn(out)
    elif isinstance(out, torch.Tensor):
        # In fp32, as a loss is computed under autocast: a bf16 output is upcast first.
        loss = out.float().mean() if out.is_floating_point() else out.mean()
    elif getattr(out, "loss", None) is not None:
        loss = out.loss
    else:
        tensors = tensors_of(out if not hasattr(out, "to_tuple") else out.to_tuple())
        if not tensors:
            raise PlanError(
                f"the model returned {type(out).__name__} with no tensor; give loss_fn=... in build()'s dict."
            )
        loss = tensors[0].mean()
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise PlanError(
            f"the loss is {shape}, expected a scalar tensor; make loss_fn return one number (e.g. .mean())."
        )
    if not loss.requires_grad:
        raise PlanError(
            "the loss does not require grad: no parameter of the model took part in it, so there is no backward to plan."
        )
    return loss


def _describe_untraceable(exc: Exception, phase: str) -> str:
    where = user_line_of(exc)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__} in the {phase} pass{where}: {first[:200]}"


def user_line_of(exc: BaseException) -> str:
    """`` at file:line`` of the innermost traceback frame in the user's code, "" when none is."""
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if is_user_code(frame.filename):
            found = f" at {frame.filename}:{frame.lineno}"
    return found
