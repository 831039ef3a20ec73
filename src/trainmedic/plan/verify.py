"""``trainmedic plan --verify``: run the planned step for real on this machine's GPU and hold the
plan against what the caching allocator recorded.

The real steps run in a child process (``python -m trainmedic.plan.verify``), so the card's
allocator starts empty as in a training script, an out-of-memory error cannot take the command
with it, and nothing of the planner's fake tensors is near it. The child runs the very step the
planner traces (``plan.trace``'s forward, loss, backward, optimizer step and ``zero_grad``,
twice, under CUDA autocast for bf16/fp16) with ``torch.cuda.memory._record_memory_history`` on,
and writes a ``gpu-alloc-trace/1`` file; ``verify_against`` compares it with the plan's trace.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.errors import PlanError
from trainmedic.plan.compare import Comparison, compare
from trainmedic.plan.model import Plan
from trainmedic.plan.recorded import RecordedStep, load_recorded
from trainmedic.plan.trace import Trace
from trainmedic.units import format_bytes

#: How far the build's parameters and inputs may differ from a recording's before it is taken
#: for another build: a block or two of rounding, never a layer.
BEFORE_TOLERANCE = 0.01


@dataclass
class Verification:
    """A plan held against a recording of the same build on a card."""

    comparison: Comparison
    recorded: RecordedStep
    source: str  # the trace file, or "this machine's GPU"

    @property
    def device(self) -> str:
        return str(self.recorded.result.get("device", "the card"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "device": self.device,
            "torch": self.recorded.result.get("torch"),
            "oom": self.recorded.out_of_memory,
            **self.comparison.to_dict(),
        }


def gpu_problem() -> str | None:
    """Why ``--verify`` cannot run here, or None when a CUDA GPU is present."""
    try:
        import torch
    except ImportError:
        return "--verify runs the step on a GPU, and torch is not installed here"
    if not torch.cuda.is_available():
        return (
            "--verify runs the step on a CUDA GPU and this machine has none (torch.cuda.is_available() is False); "
            "run it on the card, or compare with a recorded trace: --verify-trace TRACE.json.gz"
        )
    return None


def record_on_gpu(
    spec: str,
    batch_size: int,
    precision: str,
    record: Path | None = None,
    timeout_s: float = 600.0,
    cap_bytes: int | None = None,
    spec_args: Sequence[str] = (),
) -> RecordedStep:
    """Run two real steps of ``spec`` in a child process on this machine's GPU; the recording.

    ``cap_bytes`` caps the child's allocator (``torch.cuda.set_per_process_memory_fraction``), as
    a smaller card would: how ``--max-batch`` answers are checked on a large one.
    """
    problem = gpu_problem()
    if problem:
        raise PlanError(problem)
    with tempfile.TemporaryDirectory(prefix="trainmedic-verify-") as folder:
        path = record or Path(folder) / "trace.json.gz"
        command = [
            sys.executable,
            "-m",
            "trainmedic.plan.verify",
            spec,
            str(batch_size),
            precision,
            str(path),
            str(cap_bytes or 0),
            *spec_args,
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, env=_child_env(), check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PlanError(
                f"the real step of {spec} did not finish in {timeout_s:.0f} s on the GPU"
            ) from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PlanError(f"the real step of {spec} at batch {batch_size} failed on the GPU: {last}")
        return load_recorded(path)


def verified_plan(
    spec: str,
    batch_size: int | None,
    *,
    device: str | None,
    capacity: str | None,
    precision: str,
    headroom: float,
    recorded: RecordedStep,
    source: str,
    spec_args: Sequence[str] = (),
) -> tuple[Plan, Verification]:
    """The plan of ``spec`` at ``batch_size``, and the plan held against ``recorded``."""
    from trainmedic.plan.from_trace import plan_from_trace
    from trainmedic.plan.planner import check_batch, resolve_capacity, resolve_device
    from trainmedic.plan.spec import load_build
    from trainmedic.plan.trace import PRECISIONS, trace_step

    if batch_size is None:
        raise PlanError("give the batch size to verify (--batch N)")
    check_batch(batch_size)
    if precision not in PRECISIONS:
        raise PlanError(
            f"--precision {precision} is not one of {', '.join(PRECISIONS)}; e.g. --precision bf16."
        )
    target = resolve_device(device, capacity)
    check_recording(
        recorded, batch_size, precision, target, source, spec
    )  # before the trace: it can take a while
    trace = trace_step(load_build(spec, spec_args), batch_size, target, precision)
    plan = plan_from_trace(trace, target, resolve_capacity(target, capacity), precision, headroom)
    verification = verify_against(trace, recorded, source, spec)
    plan.verification = verification.to_dict()
    return plan, verification


def verify_against(
    trace: Trace, recorded: RecordedStep, source: str, spec: str | None = None
) -> Verification:
    """Compare the plan's trace with a recording, after checking that it records this build."""
    comparison = compare(trace, recorded)
    measured, planned = recorded.before_step_bytes, comparison.before_step_bytes
    if measured and abs(planned - measured) > BEFORE_TOLERANCE * max(planned, measured):
        raise PlanError(
            f"{source} records {_what(recorded)}, whose parameters and inputs took {format_bytes(measured)} on the card; this "
            f"build's take {format_bytes(planned)}: it is a recording of another model. {_fix(spec, trace.batch_size)}"
        )
    return Verification(comparison, recorded, source)


def check_recording(
    recorded: RecordedStep, batch_size: int, precision: str, target, source: str, spec: str | None
) -> None:
    """A recording of another batch, precision or card is refused with what it does record."""
    result = recorded.result
    if result.get("batch") is not None and int(result["batch"]) != batch_size:
        raise PlanError(
            f"{source} records {_what(recorded)}, not batch {batch_size}: {_fix(spec, batch_size)}"
        )
    if recorded.precision != precision:
        raise PlanError(
            f"{source} records a {recorded.precision} step, not {precision}: give --precision {recorded.precision}, "
            f"or {_fix(spec, batch_size)}"
        )
    card = recorded_card(result)
    if card is not None and target.is_gpu and target.key != "custom" and card != target.key:
        raise PlanError(
            f"{source} was recorded on {result.get('device')} ({card}); the plan is for {target.key}: a plan is held "
            f"to a step of its own card: give --device {card}"
        )


def recorded_card(result: dict[str, Any]) -> str | None:
    """The catalog key of the card a recording was made on, or None for a card the catalog lacks."""
    from trainmedic.devices import get_device
    from trainmedic.errors import DeviceError

    try:
        return get_device(str(result["device"])).key if result.get("device") else None
    except DeviceError:
        return None


def _what(recorded: RecordedStep) -> str:
    result = recorded.result
    return f"{result.get('spec', 'a build')} at batch {result.get('batch', '?')}, {result.get('precision', 'fp32')}"


def _fix(spec: str | None, batch_size: int) -> str:
    return f"record this one on the card with `trainmedic plan {spec or 'SPEC'} --batch {batch_size} --verify --record TRACE`"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child imports trainmedic as this process did, installed or from a checkout.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


# -- the child: two real steps on the GPU ---------------------------------------------------------


def _run_child(
    spec: str, batch_size: int, precision: str, out: Path, cap_bytes: int = 0, spec_args: Sequence[str] = ()
) -> int:
    import torch

    from trainmedic.plan.recorded import from_snapshot, write_recorded
    from trainmedic.plan.spec import load_build
    from trainmedic.plan.trace import (
        PRECISIONS,
        call_build,
        forward,
        loss_of,
        map_tensors,
        tensors_of,
        unpack_build,
    )

    device = torch.device("cuda")
    torch.cuda.init()
    if cap_bytes:
        torch.cuda.set_per_process_memory_fraction(
            cap_bytes / torch.cuda.get_device_properties(0).total_memory
        )
    build = load_build(spec, spec_args)
    with device:  # tensors the build makes (a loss_fn's targets too) land on the card
        model, inputs, optimizer, loss_fn = unpack_build(call_build(build, batch_size), build)
    model.to(device)
    inputs = map_tensors(inputs, lambda t: t.to(device))
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer(model.parameters())
    dtype = PRECISIONS[precision]

    def step() -> None:
        autocast = torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with autocast:
            out = forward(model, inputs)
            loss = loss_of(out, loss_fn)
        loss.backward()
        del out, loss
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)

    torch.set_default_device(device)  # tensors made inside forward and the loss
    torch.cuda.memory._record_memory_history(enabled="all", stacks="python", max_entries=4_000_000)
    result: dict[str, Any] = {
        "spec": spec,
        "batch": batch_size,
        "precision": precision,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "memory_bytes": torch.cuda.get_device_properties(0).total_memory,
        "before_step_bytes": torch.cuda.memory_allocated(),
        "cap_bytes": cap_bytes or None,
        "inputs": [list(t.shape) for t in tensors_of(inputs)],
    }
    torch.cuda.reset_peak_memory_stats()
    try:
        step()
        torch.cuda.synchronize()
        result["peak_step1"] = torch.cuda.max_memory_allocated()
        step()
        torch.cuda.synchronize()
        result["oom"] = False
    except torch.OutOfMemoryError as exc:
        result["oom"] = True
        result["error"] = str(exc).splitlines()[0][:300]
    result["peak_bytes"] = torch.cuda.max_memory_allocated()
    result["reserved_bytes"] = torch.cuda.max_memory_reserved()
    write_recorded(from_snapshot(torch.cuda.memory._snapshot(), result), out)
    return 0


if __name__ == "__main__":
    spec_arg, batch_arg, precision_arg, out_arg, cap_arg = sys.argv[1:6]
    sys.exit(_run_child(spec_arg, int(batch_arg), precision_arg, Path(out_arg), int(cap_arg), sys.argv[6:]))
