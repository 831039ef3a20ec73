"""One real training step of ``build(batch_size)``, run the way a configuration says.

The same build contract as ``trainmedic plan`` (``dict(model=, inputs=, optimizer=, loss_fn=)``,
read by the planner's own functions), but on real tensors on the real device: forward and loss
under autocast, backward (through a GradScaler for fp16), the optimizer step, ``zero_grad``.
The batch is the one ``build`` returned, reused every step: tune measures the model's step, not
the input pipeline (that is ``trainmedic run``'s job).

On the CPU, a build written for the GPU (``.cuda()``, ``.to("cuda")``, ``device="cuda"``) runs
as ``trainmedic plan`` runs it: under plan's ``CudaToCpu``, so those tensors land on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, cast

import torch

from trainmedic.errors import TuneError
from trainmedic.plan.fake_device import CudaToCpu, _is_cuda, _is_index
from trainmedic.plan.trace import call_build, forward, loss_of, map_tensors, unpack_build
from trainmedic.tune.model import Config

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
_FORMATS = {"channels_last": (torch.channels_last, 4), "channels_last_3d": (torch.channels_last_3d, 5)}


class TrainingStep:
    """A model, its batch and optimizer on ``device``, ready to step as ``config`` says."""

    def __init__(self, build: Callable[[int], Any], config: Config, device: torch.device) -> None:
        if config.batch_size is None:
            raise TuneError(f"{config.label}: a build target needs a batch size to build; got none.")
        self.config = config
        self.device = device
        on_cpu = _CudaSeen() if device.type == "cpu" else None
        with on_cpu if on_cpu is not None else contextlib.nullcontext():
            parts = call_build(build, config.batch_size)
        #: The build named CUDA: its steps run under CudaToCpu too (a forward may create CUDA
        #: tensors as well). Only then: the mode costs a Python call per torch call, which would
        #: slow a small model's step by several per cent.
        self.cuda_on_cpu = on_cpu is not None and on_cpu.seen
        model, inputs, optimizer, loss_fn = unpack_build(parts, build)
        memory_format = _FORMATS.get(config.memory_format)
        model = model.to(device)
        if memory_format is not None:
            model = model.to(memory_format=memory_format[0])
        self.inputs = _to_device(inputs, device, memory_format)
        self.optimizer = _optimizer(optimizer, model)
        self.loss_fn = loss_fn
        # torch.compile of a Module returns an OptimizedModule, a Module; its stubs say only Callable.
        self.model = cast(torch.nn.Module, torch.compile(model)) if config.compile else model
        dtype = _AUTOCAST.get(config.precision)
        self._autocast = (
            (lambda: torch.autocast(device.type, dtype=dtype))
            if dtype is not None
            else contextlib.nullcontext
        )
        # A GradScaler only makes sense with an optimizer to step: without one, update() has no
        # inf checks to read and raises.
        self.scaler = (
            _grad_scaler(device) if config.precision == "fp16" and self.optimizer is not None else None
        )

    def __call__(self) -> None:
        """One step: forward, loss, backward, optimizer step, zero_grad."""
        with CudaToCpu() if self.cuda_on_cpu else contextlib.nullcontext():
            self._step()

    def _step(self) -> None:
        with self._autocast():
            out = forward(self.model, self.inputs)
            loss = loss_of(out, self.loss_fn)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if self.optimizer is not None:
                self.optimizer.step()
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.model.zero_grad(set_to_none=True)

    def sync(self) -> None:
        """Wait for the device: a step's time is only known once its kernels have finished."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class _CudaSeen(CudaToCpu):
    """plan's CudaToCpu, remembering whether the build named a CUDA device at all."""

    seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.seen and _names_cuda(func, args, kwargs or {}):
            self.seen = True
        return super().__torch_function__(func, types, args, kwargs)


def _names_cuda(func, args: tuple, kwargs: dict) -> bool:
    """What CudaToCpu rewrites: ``.cuda()``, a CUDA device, or a device index (``x.to(0)``)."""
    if func is torch.Tensor.cuda or any(_is_cuda(v) for v in (*args, *kwargs.values())):
        return True
    index_at = 0 if func is torch.device else 1 if func is torch.Tensor.to else None
    return _is_index(kwargs.get("device")) or (
        index_at is not None and len(args) > index_at and _is_index(args[index_at])
    )


@contextlib.contextmanager
def tf32(enabled: bool):
    """TF32 matmuls for one configuration, the process's setting put back after.

    Through ``torch.set_float32_matmul_precision``, the API torch keeps; cuDNN convolutions are
    left as they are (PyTorch's default already lets them use TF32), so fp32 is measured as a
    user runs it.
    """
    saved = torch.get_float32_matmul_precision()
    if enabled:
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def _grad_scaler(device: torch.device):
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device.type)
    return torch.cuda.amp.GradScaler()  # torch < 2.3: CUDA only, which is where fp16 is offered


def _to_device(value: Any, device: torch.device, memory_format: tuple | None) -> Any:
    def move(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device)
        if memory_format is not None and t.dim() == memory_format[1] and t.is_floating_point():
            t = t.contiguous(memory_format=memory_format[0])
        return t

    return map_tensors(value, move)


def _optimizer(optimizer: Any, model: torch.nn.Module) -> torch.optim.Optimizer | None:
    if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
        return optimizer  # an instance holds the model's parameters, which .to() moved in place
    if callable(optimizer):
        made = optimizer(model.parameters())
        if isinstance(made, torch.optim.Optimizer):
            return made
        optimizer = made
    raise TuneError(
        f"'optimizer' is a {type(optimizer).__name__}, expected a torch.optim.Optimizer or a callable taking the "
        "parameters and returning one (e.g. lambda params: torch.optim.AdamW(params))."
    )
