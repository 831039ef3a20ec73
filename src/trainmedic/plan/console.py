"""The terminal answer of ``trainmedic plan``: the plan, and with ``--verify`` its check on a real step."""

from __future__ import annotations

import linecache
import os
import re
from typing import TYPE_CHECKING

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainmedic.devices import DEVICES
from trainmedic.plan.confidence import LOWER_BOUND
from trainmedic.plan.model import Hotspot, Plan
from trainmedic.units import format_bytes
from trainmedic.userfiles import shown_path

if TYPE_CHECKING:  # only named: a plain plan never loads the verifier
    from trainmedic.plan.verify import Verification

__all__ = ["build_plan", "build_verification", "render_plan", "render_verification", "within_bound"]

# "file:line", as the planner writes a hotspot's place.
_WHERE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


def render_plan(plan: Plan, console: Console) -> None:
    """Print ``plan`` on ``console``: header, breakdown, verdict, largest batch, hotspots, notes."""
    console.print(build_plan(plan))


def build_plan(plan: Plan) -> Group:
    parts: list[RenderableType] = [_header(plan), Text(""), _breakdown(plan), Text(""), _verdict(plan)]
    if plan.max_batch is not None:
        parts.append(_max_batch(plan))
    if plan.confidence is not None:
        parts.append(
            Text(
                f"how sure: {plan.confidence.describe()}",
                style="dim" if plan.confidence.level == "checked" else "yellow",
            )
        )
    if plan.hotspots:
        parts += [Text(""), Text("Hotspots: the largest tensors alive at the peak", style="bold")]
        parts += [_hotspot(h) for h in plan.hotspots]
    if plan.notes or plan.warnings:
        parts.append(Text(""))
    parts += [Text(f"note: {note}", style="dim") for note in plan.notes]
    parts += [Text(f"warning: {warning}", style="yellow") for warning in plan.warnings]
    return Group(*parts)


def render_verification(verification: Verification, plan: Plan, console: Console) -> None:
    """Print planned against measured peak and reserved memory, where each peak fell, the first
    divergence, and whether the card agreed with the plan's own bound."""
    console.print(build_verification(verification, plan))


def build_verification(verification: Verification, plan: Plan) -> Group:
    c = verification.comparison
    result = verification.recorded.result
    title = Text(f"\nVerified against two real steps on {verification.device}", style="bold")
    if result.get("torch"):
        title.append(f" (torch {result['torch']})")
    if verification.source != "this machine's GPU":
        title.append(f", recorded in {verification.source}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("", "left"),
        ("planned", "right"),
        ("measured", "right"),
        ("error", "right"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True)
    table.add_row(
        "  peak allocated",
        format_bytes(c.planned.bytes),
        format_bytes(c.recorded.bytes),
        f"{c.peak_error:+.1%}",
    )
    table.add_row(
        "  peak reserved",
        format_bytes(c.planned.reserved),
        format_bytes(c.recorded.reserved),
        f"{c.reserved_error:+.1%}",
    )
    table.add_row(
        "  peak in",
        f"step {c.planned.step}, {c.planned.phase}",
        f"step {c.recorded.step}, {c.recorded.phase}",
        "",
    )
    parts: list[RenderableType] = [title, table]
    if verification.recorded.out_of_memory:
        parts.append(
            Text(
                f"the card ran out of memory: {result.get('error', 'torch.OutOfMemoryError')}",
                style="bold red",
            )
        )
    if c.divergence is None:
        parts.append(
            Text(
                "first divergence: none; every allocation of 1 MiB or more matches the card's, in order",
                style="green",
            )
        )
    else:
        parts.append(Text(f"first divergence: {c.divergence.describe()}"))
    agreed = within_bound(verification, plan)
    if plan.confidence is None or plan.confidence.level == LOWER_BOUND:
        text = (
            "the plan is a lower bound and the card's peak is at or above it"
            if agreed
            else "the card's peak is BELOW the plan's lower bound: please report it with the trace"
        )
    else:
        bound = plan.confidence.bound
        text = (
            f"within the plan's own bound ({bound.peak:.0%} peak, {bound.reserved:.0%} reserved)"
            if agreed
            else f"OUTSIDE the plan's own bound ({bound.peak:.0%} peak, {bound.reserved:.0%} reserved): please report it with the trace"
        )
    parts.append(Text(text, style="green" if agreed else "bold red"))
    return Group(*parts)


def within_bound(verification: Verification, plan: Plan) -> bool:
    """Whether the card agreed with the plan as far as the plan claimed: within its bound, or,
    for a lower bound, at or above it; a run out of memory never agrees.

    Here, beside the sentence that states it, so that the exit code of ``plan --verify`` and the
    words on the screen cannot disagree."""
    if verification.recorded.out_of_memory:
        return False
    comparison = verification.comparison
    if plan.confidence is None or plan.confidence.level == LOWER_BOUND:
        return comparison.peak_error <= 0
    bound = plan.confidence.bound
    return abs(comparison.peak_error) <= bound.peak and abs(comparison.reserved_error) <= bound.reserved


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
    table.add_row(
        peak_label,
        format_bytes(plan.peak_bytes),
        _share(plan.peak_bytes, needed),
        "torch.cuda.max_memory_allocated" if gpu else "",
    )
    if gpu:
        reserve = plan.reserved_bytes - plan.peak_bytes
        table.add_row(
            "  allocator reserve",
            format_bytes(reserve),
            _share(reserve, needed),
            "reserved - peak: block rounding, cached segments",
        )
        table.add_row(
            "  cuda context",
            format_bytes(b.cuda_context),
            _share(b.cuda_context, needed),
            "outside the allocator: context, cuBLAS, cuDNN",
        )
        table.add_row("= needed", format_bytes(needed), "", "what the card must hold")
        if plan.floor_reserved_bytes is not None and plan.needed_floor_bytes < needed:
            table.add_row(
                "  cuDNN workspaces",
                f"-{format_bytes(needed - plan.needed_floor_bytes)}",
                "",
                "its fastest convolution engines' buffers; it picks others when memory is short",
            )
            table.add_row("= needed at least", format_bytes(plan.needed_floor_bytes), "", "")
    if plan.margin and plan.confidence is not None:  # a plan's margin comes with its confidence
        margin = plan.required_bytes - plan.needed_floor_bytes
        table.add_row(
            "  margin",
            format_bytes(margin),
            "",
            f"{plan.margin:.0%} for the plan's own error ({plan.confidence.level})",
        )
        table.add_row("= required", format_bytes(plan.required_bytes), "", "what must fit")
    kept = (
        f"{plan.headroom:.0%} of {format_bytes(plan.capacity_bytes)} kept free"
        if plan.headroom
        else "no headroom kept (--headroom)"
    )
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
        body.append(f" at {shown_path(path)}:{line}")  # a Plan built elsewhere may carry full paths
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
