"""``trainmedic plan``: plan one training step of a build function and render the plan.

The plan goes to stdout (it is the command's answer, fit for a pipe); errors go to stderr as one
line. torch is imported only when a plan is made, so ``--list-devices`` and the other commands
start fast.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainmedic.cli.output import output_problem
from trainmedic.cli.plan_verify import make_verified_plan, render_verification, verify_problem, within_bound
from trainmedic.devices import DEVICES, get_device, known_devices
from trainmedic.errors import DeviceError, MissingExtraError, PlanError
from trainmedic.probe.frames import display_path
from trainmedic.units import format_bytes

if TYPE_CHECKING:
    from trainmedic.plan import Hotspot, Plan

#: Exit codes: the plan fits, it does not (a finding, like lint's 1), or the input was bad.
FITS, DOES_NOT_FIT, USAGE = 0, 1, 2

#: Catalog keys named when no target is given: one per common tier, not the whole list.
EXAMPLE_DEVICES = ("t4", "rtx3090", "rtx4090", "a100-80gb", "h100")

#: What --precision takes; the planner's own table, repeated so that a typo fails before torch loads.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

# "file:line", as the planner writes a hotspot's place.
_WHERE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


@dataclass(frozen=True)
class PlanOptions:
    spec: str | None
    device: str | None
    capacity: str | None
    batch: int | None
    precision: str | None  # None: fp32, or what a --verify-trace recording was made with
    max_batch: bool
    headroom: float
    json_path: Path | None
    quiet: bool
    #: Run the step for real on this machine's GPU and compare (--verify), or compare with a
    #: recorded trace (--verify-trace); --record keeps the live recording.
    verify: bool = False
    verify_trace: Path | None = None
    record: Path | None = None


def run_plan(options: PlanOptions, out: Console, err: Console) -> int:
    """Make the plan, render it on ``out``, write the JSON, and return the exit code."""
    if options.precision:
        options = dataclasses.replace(options, precision=options.precision.lower())
    problem = output_problem([("--json", options.json_path), ("--record", options.record)]) or verify_problem(options)
    if problem:  # found now, not after the traces
        _error(err, problem)
        return USAGE
    try:
        plan, verification = make_verified_plan(options, _make_plan) if options.verify or options.verify_trace else (_make_plan(options), None)
    except (PlanError, DeviceError, MissingExtraError) as exc:
        _error(err, str(exc))
        return USAGE
    if not options.quiet:
        render_plan(plan, out)
        if verification is not None:
            render_verification(verification, plan, out)
    if options.json_path is not None:
        try:
            plan.write_json(options.json_path)
        except OSError as exc:
            _error(err, f"cannot write the JSON plan to {options.json_path}: {exc.strerror or exc}")
            return USAGE
        err.print(f"trainmedic: JSON plan written to {options.json_path}", markup=False, highlight=False, soft_wrap=True)
    if verification is not None and not within_bound(verification, plan):
        return DOES_NOT_FIT
    return FITS if plan.fits and plan.max_batch != 0 else DOES_NOT_FIT


def _make_plan(options: PlanOptions) -> Plan:
    if not options.spec:
        raise PlanError("give the build function to plan: trainmedic plan model.py:build --device t4 --batch 32")
    if options.device is None and options.capacity is None:
        raise PlanError(
            f"name a target GPU with --device NAME (e.g. {', '.join(EXAMPLE_DEVICES)}; --list-devices shows all) "
            "or give its memory with --capacity SIZE (e.g. 48GiB)"
        )
    precision = (options.precision or "fp32").lower()
    if precision not in PRECISIONS:
        raise PlanError(f"--precision {options.precision} is not one of {', '.join(PRECISIONS)}; bf16 or fp16 mean autocast")
    if options.device is not None:
        get_device(options.device)  # a misspelt card fails before the user's module is imported
    # torch loads here, not at start-up: `trainmedic lint` and `--list-devices` never need it.
    from trainmedic.plan import load_build, plan_memory

    build = load_build(options.spec)
    return plan_memory(
        build,
        options.batch,
        device=options.device,
        capacity=options.capacity,
        precision=precision,
        headroom=options.headroom,
        max_batch=options.max_batch,
    )


def _error(err: Console, message: str) -> None:
    err.print(f"trainmedic plan: error: {message}", style="red", markup=False, highlight=False, soft_wrap=True)


def list_devices(console: Console) -> int:
    """Print the device catalog: what ``--device`` accepts."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("key", no_wrap=True)
    table.add_column("name")
    table.add_column("memory", justify="right", no_wrap=True)
    table.add_column("bandwidth", justify="right", no_wrap=True)
    table.add_column("family", no_wrap=True)
    for key in known_devices():
        device = DEVICES[key]
        memory = format_bytes(device.memory_bytes) if device.is_gpu else "host RAM"
        bandwidth = f"{device.bandwidth_bytes_per_s / 1e9:,.0f} GB/s" if device.bandwidth_bytes_per_s else "-"
        table.add_row(key, Text(device.name), memory, bandwidth, device.family)
    console.print(table)
    console.print(
        Text("Names are matched loosely (3090, RTX-3090, 'NVIDIA A100-SXM4-80GB'); for any other card give --capacity SIZE.", style="dim")
    )
    return FITS


def render_plan(plan: Plan, console: Console) -> None:
    """Print ``plan`` on ``console``: header, breakdown, verdict, largest batch, hotspots, notes."""
    parts = [_header(plan), Text(""), _breakdown(plan), Text(""), _verdict(plan)]
    if plan.max_batch is not None:
        parts.append(_max_batch(plan))
    if plan.confidence is not None:
        parts.append(Text(f"how sure: {plan.confidence.describe()}", style="dim" if plan.confidence.level == "checked" else "yellow"))
    if plan.hotspots:
        parts += [Text(""), Text("Hotspots: the largest tensors alive at the peak", style="bold")]
        parts += [_hotspot(h) for h in plan.hotspots]
    if plan.notes or plan.warnings:
        parts.append(Text(""))
    parts += [Text(f"note: {note}", style="dim") for note in plan.notes]
    parts += [Text(f"warning: {warning}", style="yellow") for warning in plan.warnings]
    console.print(Group(*parts))


def _header(plan: Plan) -> Text:
    device = DEVICES.get(plan.device)
    capacity = format_bytes(plan.capacity_bytes)
    if device is None:  # --capacity without --device
        target = f"a GPU of {capacity}"
    elif not device.is_gpu:
        target = f"the host CPU ({capacity} of RAM)"
    else:
        target = f"{device.name} ({capacity})"
    text = Text()
    text.append(f"Plan for {target}", style="bold")
    text.append(f", batch {plan.batch_size}, {plan.precision}")
    return text


def _breakdown(plan: Plan) -> Table:
    b = plan.breakdown
    needed = plan.needed_bytes
    # On the host there is no caching allocator and no context: those rows would only add zeros.
    gpu = b.cuda_context > 0 or plan.reserved_bytes != plan.peak_bytes
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("what", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("why", style="dim")
    rows = [
        ("parameters", b.parameters, "weights and buffers"),
        ("gradients", b.gradients, "alive at the peak"),
        ("optimizer state", b.optimizer_state, "e.g. Adam's two moments"),
        ("activations", b.activations, "inputs and tensors saved for backward"),
        ("temporaries", b.temporaries, "intermediates alive at the peak"),
    ]
    for label, size, why in rows:
        table.add_row(f"  {label}", format_bytes(size), _share(size, needed), why)
    peak_label = "= peak allocated" if plan.exact else "= peak allocated (at least)"
    table.add_row(peak_label, format_bytes(plan.peak_bytes), _share(plan.peak_bytes, needed), "torch.cuda.max_memory_allocated" if gpu else "")
    if gpu:
        reserve = plan.reserved_bytes - plan.peak_bytes
        table.add_row("  allocator reserve", format_bytes(reserve), _share(reserve, needed), "reserved - peak: block rounding, cached segments")
        table.add_row("  cuda context", format_bytes(b.cuda_context), _share(b.cuda_context, needed), "outside the allocator: context, cuBLAS, cuDNN")
        table.add_row("= needed", format_bytes(needed), "", "what the card must hold")
        if plan.floor_reserved_bytes is not None and plan.needed_floor_bytes < needed:
            table.add_row("  cuDNN workspaces", f"-{format_bytes(needed - plan.needed_floor_bytes)}", "",
                          "its fastest convolution engines' buffers; it picks others when memory is short")
            table.add_row("= needed at least", format_bytes(plan.needed_floor_bytes), "", "")
    if plan.margin:
        margin = plan.required_bytes - plan.needed_floor_bytes
        table.add_row("  margin", format_bytes(margin), "", f"{plan.margin:.0%} for the plan's own error ({plan.confidence.level})")
        table.add_row("= required", format_bytes(plan.required_bytes), "", "what must fit")
    kept = f"{plan.headroom:.0%} of {format_bytes(plan.capacity_bytes)} kept free" if plan.headroom else "no headroom kept (--headroom)"
    table.add_row("usable after headroom", format_bytes(plan.usable_bytes), "", kept)
    return table


def _share(size: int, whole: int) -> str:
    return f"{size / whole:.0%}" if whole > 0 else ""


def _verdict(plan: Plan) -> Text:
    gap = plan.usable_bytes - plan.required_bytes
    if plan.fits:
        text = Text(f"fits with {format_bytes(gap)} free", style="bold green")
        if not plan.exact:
            # Part of the step went untraced: "fits" holds only if that part is small.
            text.append(", but the plan is a lower bound (see the warnings)", style="yellow")
        return text
    text = Text(f"does NOT fit: needs {format_bytes(-gap)} more", style="bold red")
    if plan.max_batch is None:
        text.append("; --max-batch finds the largest batch that fits", style="")
    return text


def _max_batch(plan: Plan) -> Text:
    if plan.max_batch == 0:
        return Text("largest batch that fits: 0 (even batch 1 does not fit)", style="bold red")
    per_sample = f", about {format_bytes(plan.bytes_per_sample)} per sample" if plan.bytes_per_sample else ""
    kept = f"{plan.headroom:.0%} headroom" if plan.headroom else "no headroom"
    margin = f" and a {plan.margin:.0%} margin" if plan.margin else ""
    return Text(f"largest batch that fits: {plan.max_batch} (with {kept}{margin}{per_sample})", style="bold")


def _hotspot(hotspot: Hotspot) -> Padding:
    body = Text()
    body.append(hotspot.op, style="bold")
    location = _location(hotspot.where)
    if location is None:
        body.append(" (no line of yours: inside a library call)")
    else:
        path, line = location
        body.append(f" at {display_path(path)}:{line}")  # a Plan built elsewhere may carry full paths
    body.append(f"\n{hotspot.formula}")
    source = _source_line(location)
    if source:
        body.append(f"\n{source}", style="cyan")
    if hotspot.advice:
        body.append(f"\n-> {hotspot.advice}")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(justify="right", no_wrap=True, min_width=10)
    grid.add_column(overflow="fold")
    grid.add_row(format_bytes(hotspot.bytes), body)
    return Padding(grid, (0, 0, 0, 2))


def _location(where: str) -> tuple[str, int] | None:
    """``(path, line)`` of a hotspot's ``where``; None when no user line is known."""
    match = _WHERE.match(where or "")
    if match is None or match["file"].startswith("<") or int(match["line"]) < 1:
        return None
    return match["file"], int(match["line"])


def _source_line(location: tuple[str, int] | None) -> str:
    """``6 | x = torch.randn(batch_size, 256)`` when the file is there to read, else ``""``."""
    if location is None or not os.path.isfile(location[0]):
        return ""
    path, number = location
    line = linecache.getline(path, number).strip()
    return f"{number} | {line}" if line else ""


__all__ = ["DOES_NOT_FIT", "FITS", "USAGE", "PlanOptions", "list_devices", "render_plan", "run_plan"]
