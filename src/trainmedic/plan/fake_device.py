"""Keep a build written for the GPU runnable on the fake CPU tensors of the trace.

A CPU build of torch cannot run autograd on fake CUDA tensors, and fake tensors refuse some of
what ``nn.Module`` does to real ones. Three context pieces, entered by ``trace_step``:

- ``CudaToCpu``: every way a script names a CUDA device lands on the CPU;
- ``DeepcopyByClone``: ``copy.deepcopy`` of a fake tensor is a clone its views share storage with;
- ``modules_stay_on_cpu``: ``.cuda()`` / ``.to("cuda")`` leave a module where it is, and casts
  and memory-format changes convert its parameters in place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


def _is_cuda(value: Any) -> bool:
    return (isinstance(value, torch.device) and value.type == "cuda") or (
        isinstance(value, str) and value.startswith("cuda")
    )


def _is_index(value: Any) -> bool:
    """An int where a device goes (``x.to(0)``, ``device=local_rank``): a CUDA device's index."""
    return isinstance(value, int) and not isinstance(value, bool)


def _on_cpu(value: Any) -> Any:
    """The CPU in the form the argument came in: functions that take only a str get a str."""
    if not _is_cuda(value):
        return value
    return "cpu" if isinstance(value, str) else torch.device("cpu")


class CudaToCpu(TorchFunctionMode):
    """Keep the user's ``.cuda()``, ``.to("cuda")`` and ``device="cuda"`` tensors on the CPU.

    The plan is for the GPU, but a CPU build cannot run autograd on fake CUDA tensors, and it
    refuses CUDA devices while parsing arguments, before any dispatch mode could rewrite them:
    so the rewrite happens here, above the dispatcher, and the GPU side is modelled afterwards.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.device:
            # torch.device("cuda", local_rank), torch.device(type="cuda", index=0), torch.device(0):
            # the index names a CUDA device, so the result is the CPU device with no index, the
            # one every other rewritten tensor lands on (torch.device("cpu", 0) would differ).
            if (args and (_is_cuda(args[0]) or _is_index(args[0]))) or _is_cuda(kwargs.get("type")):
                return torch.device("cpu")
            return func(*args, **kwargs)
        if func is torch.Tensor.to and len(args) > 1 and _is_index(args[1]):
            args = (args[0], "cpu", *args[2:])  # x.to(0): parsing an index looks up the absent accelerator
        if _is_index(kwargs.get("device")):
            kwargs = {**kwargs, "device": "cpu"}  # torch.zeros(n, device=0), x.to(device=local_rank)
        if _has_cuda(args) or _has_cuda(kwargs):
            args = tuple(_on_cpu(a) for a in args)
            kwargs = {k: _on_cpu(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


class DeepcopyByClone(TorchFunctionMode):
    """``copy.deepcopy`` of a fake tensor clones it through the dispatcher.

    ``Tensor.__deepcopy__`` copies a fake tensor's storage behind the dispatcher's back, and the
    copy's views then report storages of their own: ``nn.TransformerEncoder`` deep-copies its
    layer, so every ``weight.t()`` of ``F.linear`` was planned as a new tensor as large as the
    weight (a 1.2B GPT over-planned by gigabytes). A clone is what the copy costs on the device.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__deepcopy__:
            tensor, memo = args
            if id(tensor) in memo:
                return memo[id(tensor)]
            with torch.no_grad():
                copy = tensor.clone(memory_format=torch.preserve_format)
            copy.requires_grad_(tensor.requires_grad)
            if getattr(tensor, "_is_param", False):  # nn.Parameter of a fake tensor is the flagged tensor
                copy._is_param = True
            memo[id(tensor)] = copy
            return copy
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def modules_stay_on_cpu():
    """``model.cuda()`` / ``model.to("cuda")`` leave a module where it is while planning.

    Moving fake parameters to the device they are already on makes ``Module._apply`` try to
    swap each parameter with itself, which fake tensors refuse; a move to CUDA is a no-op here.
    Dtype and memory-format changes (``.to(torch.bfloat16)``, ``.half()``,
    ``.to(memory_format=torch.channels_last)``) still apply, through ``_convert_in_place``.
    """
    original_to, original_cuda = torch.nn.Module.to, torch.nn.Module.cuda

    def to(module, *args, **kwargs):
        # model.to(0) / model.to(device=local_rank): an int is a CUDA device's index, which the
        # parser would look up on the absent accelerator; the device is dropped below anyway.
        if args and _is_index(args[0]):
            args = ("cpu", *args[1:])
        if _is_index(kwargs.get("device")):
            kwargs = {**kwargs, "device": "cpu"}
        device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is None and memory_format is None:
            return module
        _convert_in_place(module, dtype, memory_format)
        return module

    casts = {
        "half": torch.float16,
        "float": torch.float32,
        "double": torch.float64,
        "bfloat16": torch.bfloat16,
    }

    def cast(dtype: torch.dtype) -> Callable[..., torch.nn.Module]:
        def method(module: torch.nn.Module, dtype: torch.dtype = dtype) -> torch.nn.Module:
            _convert_in_place(module, dtype, None)
            return module

        return method

    originals = {name: getattr(torch.nn.Module, name) for name in casts}
    # Patched on the class for the block, on purpose: mypy refuses any assignment to a method.
    torch.nn.Module.to, torch.nn.Module.cuda = to, lambda module, device=None: module  # type: ignore[method-assign, assignment]
    for name, dtype in casts.items():
        setattr(torch.nn.Module, name, cast(dtype))
    try:
        yield
    finally:
        torch.nn.Module.to, torch.nn.Module.cuda = original_to, original_cuda  # type: ignore[method-assign]
        for name, original in originals.items():
            setattr(torch.nn.Module, name, original)


def _convert_in_place(module: torch.nn.Module, dtype, memory_format) -> None:
    """``Module.to(dtype, memory_format)`` as ``_apply`` does it without swapping tensors:
    ``Module._apply`` swaps a fake parameter for its converted copy, which fake tensors refuse
    once anything holds a weak reference to them; setting ``.data`` keeps each parameter the
    same object with the new storage, as a real ``.to()`` without swapping does."""

    def convert(t: torch.Tensor) -> torch.Tensor:
        fmt = (
            memory_format
            if memory_format is not None
            and t.dim() == {torch.channels_last: 4, torch.channels_last_3d: 5}.get(memory_format, t.dim())
            else None
        )
        target = dtype if dtype is not None and (t.is_floating_point() or t.is_complex()) else None
        return (
            t.to(dtype=target, memory_format=fmt)
            if fmt is not None
            else (t.to(target) if target is not None else t)
        )

    with torch.no_grad():
        for sub in module.modules():
            for _name, param in sub._parameters.items():
                if param is not None:
                    converted = convert(param)
                    if converted is not param:
                        param.data = converted
            for name, buffer in sub._buffers.items():
                if buffer is not None:
                    sub._buffers[name] = convert(buffer)


def _has_cuda(values) -> bool:
    items = values.values() if isinstance(values, dict) else values
    return any(_is_cuda(v) for v in items)
