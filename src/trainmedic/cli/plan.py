"""``trainmedic plan``: plan one training step of a build function and print the plan.

The plan goes to stdout (it is the command's answer, fit for a pipe; ``trainmedic.plan.console``
renders it); errors go to stderr as one line. torch is imported only when a plan is made, so
``--list-devices`` and the other commands start fast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainmedic.cli.output import output_problem
from trainmedic.cli.plan_verify import make_verified_plan, verify_problem
from trainmedic.devices import DEVICES, get_device, known_devices
from trainmedic.errors import DeviceError, MissingExtraError, PlanError
from trainmedic.units import format_bytes

if TYPE_CHECKING:
    from trainmedic.plan import Plan

#: Exit codes: the plan fits, it does not (a finding, like lint's 1), or the input was bad.
FITS, DOES_NOT_FIT, USAGE = 0, 1, 2

#: Catalog keys named when no target is given: one per common tier, not the whole list.
EXAMPLE_DEVICES = ("t4", "rtx3090", "rtx4090", "a100-80gb", "h100")

#: What --precision takes; the planner's own table, repeated so that a typo fails before torch loads.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True, kw_only=True)
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
    #: The command line the build's module sees when imported (what follows ``--``).
    spec_args: tuple[str, ...] = ()


def run_plan(options: PlanOptions, out: Console, err: Console) -> int:
    """Make the plan, render it on ``out``, write the JSON, and return the exit code."""
    if options.precision:
        options = dataclasses.replace(options, precision=options.precision.lower())
    problem = output_problem([("--json", options.json_path), ("--record", options.record)]) or verify_problem(
        options
    )
    if problem:  # found now, not after the traces
        _error(err, problem)
        return USAGE
    try:
        plan, verification = (
            make_verified_plan(options, _make_plan)
            if options.verify or options.verify_trace
            else (_make_plan(options), None)
        )
    except (PlanError, DeviceError, MissingExtraError) as exc:
        _error(err, str(exc))
        return USAGE
    # Imported once a plan is made: the renderer's package loads torch.
    from trainmedic.plan.console import render_plan, render_verification, within_bound

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
        err.print(
            f"trainmedic: JSON plan written to {options.json_path}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if verification is not None and not within_bound(verification, plan):
        return DOES_NOT_FIT
    return FITS if plan.fits and plan.max_batch != 0 else DOES_NOT_FIT


def _make_plan(options: PlanOptions) -> Plan:
    if not options.spec:
        raise PlanError(
            "give the build function to plan: trainmedic plan model.py:build --device t4 --batch 32"
        )
    if options.device is None and options.capacity is None:
        raise PlanError(
            f"name a target GPU with --device NAME (e.g. {', '.join(EXAMPLE_DEVICES)}; --list-devices shows all) "
            "or give its memory with --capacity SIZE (e.g. 48GiB)"
        )
    precision = (options.precision or "fp32").lower()
    if precision not in PRECISIONS:
        raise PlanError(
            f"--precision {options.precision} is not one of {', '.join(PRECISIONS)}; bf16 or fp16 mean autocast"
        )
    if options.device is not None:
        get_device(options.device)  # a misspelt card fails before the user's module is imported
    # torch loads here, not at start-up: `trainmedic lint` and `--list-devices` never need it.
    from trainmedic.plan import plan_memory
    from trainmedic.plan.spec import load_build_for

    build = load_build_for("plan", options.spec, options.spec_args)
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
    err.print(
        f"trainmedic plan: error: {message}", style="red", markup=False, highlight=False, soft_wrap=True
    )


def list_devices(console: Console) -> int:
    """Print the device catalog: what ``--device`` accepts."""
    # Built here, not in trainmedic.plan.console: importing trainmedic.plan needs torch, the catalog does not.
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
        Text(
            "Names are matched loosely (3090, RTX-3090, 'NVIDIA A100-SXM4-80GB'); for any other card give --capacity SIZE.",
            style="dim",
        )
    )
    return FITS


__all__ = ["DOES_NOT_FIT", "FITS", "USAGE", "PlanOptions", "list_devices", "run_plan"]
