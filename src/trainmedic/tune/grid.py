"""What the grid holds for one target: batch ladder, precisions, memory formats, batch axis.

Defaults follow what the device can run fast: on a GPU the precisions its catalog entry has
tensor-core rates for (fp16 with a GradScaler, bf16 from Ampere on, tf32 from Ampere on); on a
CPU fp32 and bf16, and fp16 only where its measured matmul beats fp32's (a fast path that torch
really uses: a CPU flag such as AVX512-FP16 is not enough, and without one an fp16 step on a CPU
runs tens of times slower than fp32, so measuring it by default only spends the budget). Memory
formats are offered only to conv nets: ``channels_last`` for Conv2d, ``channels_last_3d`` for
Conv3d.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from trainmedic.errors import TuneError
from trainmedic.plan.fake_device import CudaToCpu, DeepcopyByClone, modules_stay_on_cpu
from trainmedic.plan.trace import call_build, tensors_of, unpack_build
from trainmedic.tune.model import MEMORY_FORMATS, PRECISIONS

#: The ladder's top when nothing else bounds it: past this a step is rarely faster per sample.
LADDER_TOP = 1 << 16


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, ``"cuda:N"``: a device tune can measure on."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise TuneError(f"device {device!r} is not a device; expected auto, cpu, cuda or cuda:N.") from exc
    if resolved.type not in ("cpu", "cuda"):
        raise TuneError(
            f"device {device!r}: tune measures on cpu or cuda; expected auto, cpu, cuda or cuda:N."
        )
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (resolved.index is not None and resolved.index >= count):
            raise TuneError(
                f"device {device!r} asked for, but this torch ({torch.__version__}) sees {count} CUDA "
                "device(s); use --device cpu, or a CUDA build of torch on a machine with the card."
            )
    return resolved


def batch_ladder(max_batch: int | None, top: int = LADDER_TOP) -> list[int]:
    """Powers of two up to the largest batch that fits, and that batch itself (None: no limit found)."""
    if max_batch is not None and max_batch < 1:
        return []
    limit = top if max_batch is None else min(max_batch, top)
    ladder = [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]
    if max_batch is not None and max_batch <= top and max_batch not in ladder:
        ladder.append(max_batch)
    return ladder


def default_precisions(device: torch.device, peak_flops: dict[str, float] | None = None) -> list[str]:
    """The precisions worth measuring on ``device``.

    ``peak_flops``: its catalog rates for a known GPU; on a CPU the measured ceilings (a matmul
    per precision, ``ceilings.py``), without which fp16 is left out.
    """
    if device.type == "cuda":
        rates = peak_flops or {}
        major, _ = torch.cuda.get_device_capability(device)
        found = ["fp32"]
        if major >= 8:
            found.append("tf32")
        if "bf16" in rates or (not rates and torch.cuda.is_bf16_supported()):
            found.append("bf16")
        if "fp16" in rates or not rates:
            found.append("fp16")
        return found
    found = ["fp32", "bf16"]
    if cpu_has_fast_fp16(peak_flops):
        found.append("fp16")
    return found


def cpu_has_fast_fp16(peak_flops: dict[str, float] | None) -> bool:
    """Whether fp16 has a fast path on this CPU: its measured matmul rate beats fp32's.

    Measured (2-vCPU Xeon, torch 2.13 CPU): fp16 1.5 GFLOP/s against fp32 66, bf16 18.
    """
    rates = peak_flops or {}
    return rates.get("fp16", 0.0) > rates.get("fp32", float("inf"))


def check_precisions(precisions: Sequence[str], device: torch.device) -> list[str]:
    chosen = [p.lower() for p in precisions]
    for p in chosen:
        if p not in PRECISIONS:
            raise TuneError(
                f"precision {p!r} is not one of {', '.join(PRECISIONS)}; e.g. --precision fp32,bf16."
            )
    if "tf32" in chosen and device.type != "cuda":
        raise TuneError("precision 'tf32' needs a CUDA GPU (Ampere or later); on the CPU use fp32 or bf16.")
    return list(dict.fromkeys(chosen))


def check_batches(batches: Sequence[Any]) -> list[int]:
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise TuneError(
                f"batch size {b!r} cannot be measured: expected whole numbers >= 1, e.g. --batch 1,2,4,8."
            )
    return sorted(set(batches))


def check_memory_formats(formats: Sequence[str]) -> list[str]:
    for f in formats:
        if f not in MEMORY_FORMATS:
            raise TuneError(f"memory format {f!r} is not one of {', '.join(MEMORY_FORMATS)}.")
    return list(dict.fromkeys(formats))


def inspect_build(build: Callable[[int], Any]) -> str | None:
    """Check that ``build`` has a batch axis; return the memory format its convolutions can use.

    Builds batch 1 and batch 2 on fake tensors (nothing is allocated): the batch axis is the
    first dimension that changes from 1 to 2 in some input. None: no convolution to reformat.
    """
    shapes = {}
    # As plan traces it: a build written for the GPU (.cuda(), device="cuda") is read on the CPU.
    with FakeTensorMode(allow_non_fake_inputs=True), CudaToCpu(), DeepcopyByClone(), modules_stay_on_cpu():
        for batch in (1, 2):
            model, inputs, _, _ = unpack_build(call_build(build, batch), build)
            shapes[batch] = [tuple(t.shape) for t in tensors_of(inputs)]
            if batch == 1:
                modules = list(model.modules())
    if not any(
        a != b and len(a) == len(b) and any(x == 1 and y == 2 for x, y in zip(a, b))
        for a, b in zip(shapes[1], shapes[2])
    ):
        name = getattr(build, "__name__", "build")
        raise TuneError(
            f"{name}(1) and {name}(2) return inputs of shapes {shapes[1]} and {shapes[2]}: no axis grows with the batch "
            f"size, so tune cannot vary it. Make {name}(batch_size) create inputs of shape (batch_size, ...)."
        )
    if any(isinstance(m, (torch.nn.Conv3d, torch.nn.ConvTranspose3d)) for m in modules):
        return "channels_last_3d"
    if any(isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)) for m in modules):
        return "channels_last"
    return None
