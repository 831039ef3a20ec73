"""The terminal report: what ``trainmedic run`` prints to stderr when the script ends.

Rendered with rich, so it is coloured on a terminal and plain text in a pipe or a CI log.
"""

from __future__ import annotations

import math
import shlex

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainmedic.categories import CATEGORIES
from trainmedic.run.report.model import Finding, Report, StepStats
from trainmedic.units import format_seconds

STYLES = {
    "data": "bold red",
    "transfer": "yellow",
    "tiny_ops": "magenta",
    "sync": "cyan",
    "compute": "green",
    "memory_bandwidth": "blue",
    "host_other": "white",
}
_BAR_WIDTH = 30


def render_console(report: Report, console: Console) -> None:
    """Print ``report`` on ``console``."""
    console.print(build(report))


def build(report: Report) -> Group:
    parts: list[RenderableType] = [_header(report)]
    if report.evidence != "none":  # shares of a run that never reached a step would mislead
        parts += [Text(""), _breakdown(report)]
    if report.ranks:
        parts += [Text(""), _ranks(report)]
    if report.findings:
        parts += [
            Text(""),
            Text("Findings", style="bold"),
            *[_finding(i, f) for i, f in enumerate(report.findings, 1)],
        ]
    if report.lines:
        parts += [Text(""), _lines(report)]
    if report.notes:
        parts += [Text(""), Text("Notes", style="bold")]
        parts += [Padding(Text(f"- {note}", style="dim"), (0, 0, 0, 2)) for note in report.notes]
    return Group(*parts)


def _header(report: Report) -> Text:
    s = report.steps
    text = Text()
    text.append("trainmedic report", style="bold")
    text.append(f"  {shlex.join(report.command)}\n")
    text.append(f"outcome: {report.outcome}, exit code {report.exit_code}")
    if report.message:
        text.append(f" ({report.message})", style="yellow")
    text.append(f"\ndevice:  {report.device.kind} · {report.device.name}\n")
    if not report.per_step:
        counted = s.count + s.warmup
        text.append(
            f"steps:   {counted} counted, too short to see inside" if counted else "steps:   none",
            style="bold",
        )
        text.append(f" · {_NO_VERDICT[report.evidence]}\n", style="yellow")
        text.append(f"wall:    {report.wall_s:.2f} s")
        return text
    if report.evidence == "sampled":
        text.append(_sampled_steps(s))
        if not s.median_s:
            text.append(f"wall:    {report.wall_s:.2f} s sampled")
            return text
    elif report.evidence == "loop":
        text.append(
            f"steps:   {s.count} iterations of the loop at {s.loop} + {s.warmup} warm-up (no step was marked)\n"
        )
    else:
        text.append(
            f"steps:   {s.count} steady-state + {s.warmup} warm-up, marked by {s.source or 'nothing'}\n"
        )
    unit = _unit(report)
    text.append(
        f"{unit + ':':<8} median {format_seconds(s.median_s)} · p90 {format_seconds(s.p90_s)} · growth {s.growth:.2f}x"
    )
    if s.cpu_growth is not None and s.count:
        text.append(f" (CPU time per {unit} {s.cpu_growth:.2f}x)")
    if report.evidence == "sampled":
        text.append(f"\nwall:    {report.wall_s:.2f} s sampled")
        return text
    text.append(f"\nwall:    {report.wall_s:.2f} s, of which set-up {report.setup_s:.2f} s")
    return text


def _sampled_steps(s: StepStats) -> str:
    """The steps line of a report read from outside (trainmedic attach): how they were found."""
    how = f"iterations of the loop at {s.loop}" if s.loop else "optimizer steps"
    if not s.median_s:
        return f"steps:   at least {s.count} {how}, seen in the samples: too short to time from outside\n"
    return f"steps:   {s.count} {how}, seen in the samples from outside\n"


#: The headline of a report whose evidence carries no verdict (report.model.EVIDENCE).
_NO_VERDICT = {
    "none": "the script ended before its first step: no bottleneck named",
    "whole run": "no step was measured: whole-run time, no bottleneck named",
}


def _unit(report: Report) -> str:
    return "iteration" if report.evidence == "loop" else "step"


def _breakdown(report: Report) -> Table:
    title = (
        f"Where steady-state {_unit(report)} time goes"
        if report.per_step
        else "Where the whole run's time went"
    )
    table = Table(title=title, title_justify="left", box=None, show_header=False, pad_edge=False)
    table.add_column("category", min_width=17)
    table.add_column("bar", width=_BAR_WIDTH + 1, no_wrap=True)
    table.add_column("share", justify="right", width=6)
    table.add_column("mark")
    for category in CATEGORIES:
        share = report.breakdown.get(category, 0.0)
        filled = int(round(share * _BAR_WIDTH))
        bar = Text("█" * filled + "·" * (_BAR_WIDTH - filled), style=STYLES[category])
        if report.bottleneck and category in report.close_call:  # noise could swap the two
            mark = Text("◀ too close to call", style="bold")
        else:
            mark = Text("◀ bottleneck", style="bold") if category == report.bottleneck else Text("")
        table.add_row(category, bar, f"{share:.1%}", mark)
    return table


def _ranks(report: Report) -> Group:
    # Host and outcome columns only when they tell something: 80 columns are tight.
    hosts = len({r.host for r in report.ranks}) > 1
    outcomes = any(r.outcome != "completed" for r in report.ranks)
    table = Table(title="Ranks (per steady-state step)", title_justify="left", box=None, pad_edge=False)
    names = [
        "rank",
        *(["host"] if hosts else []),
        *(["outcome"] if outcomes else []),
        "steps",
        "median",
        "data",
        "compute",
        "waits",
        "other",
        "bottleneck",
    ]
    for name in names:
        table.add_column(
            name, justify="left" if name in ("host", "outcome", "bottleneck") else "right", no_wrap=True
        )
    straggler = report.straggler.rank if report.straggler else None
    for r in report.ranks:
        head = [str(r.rank), *([r.host] if hosts else [])]
        if r.outcome in ("died", "running"):  # no measurements of its own
            table.add_row(*head, Text(r.outcome, style="bold red"), *[""] * (len(names) - len(head) - 1))
            continue
        cells = [format_seconds(x) for x in (r.median_s, r.data_s, r.compute_s, r.wait_s, r.other_s)]
        # A rank with too little evidence of its own names no bottleneck.
        mark = Text(
            (r.bottleneck or "—") + (" ◀ straggler" if r.rank == straggler else ""),
            style="bold" if r.rank == straggler else "",
        )
        table.add_row(*head, *([r.outcome] if outcomes else []), str(r.steps), *cells, mark)
    lines: list[RenderableType] = [table]
    if report.straggler is not None:
        lines.append(Text(report.straggler.text, style="bold"))
    for r in report.ranks:
        if r.outcome in ("died", "running") or (
            r.message and r.exit_code not in (0, None) and r.outcome != "interrupted"
        ):
            lines.append(Text(f"rank {r.rank}: {r.message}", style="red"))
    return Group(*lines)


def _finding(rank: int, f: Finding) -> Group:
    head = Text()
    head.append(
        f"{rank}. [{f.category}{'/' + f.kind if f.kind else ''}] {f.share:.1%}  ",
        style=STYLES.get(f.category, ""),
    )
    head.append(f.title, style="bold")
    body = Table.grid(padding=(0, 1))
    body.add_column(width=9, style="dim")
    body.add_column(overflow="fold")
    # Text, not str: rich would read `x[idx]` in a fix as markup and drop the brackets.
    body.add_row("evidence", Text(f.evidence))
    body.add_row("where", Text(f.where or "no line of yours: the time is spent outside your code"))
    body.add_row("fix", Text(f.fix))
    if f.suggestion:
        body.add_row("call", Text(f.suggestion, style="bold"))
    body.add_row("buys", buys(f))
    return Group(Padding(head, (0, 0, 0, 1)), Padding(body, (0, 0, 0, 4)))


def _lines(report: Report) -> Table:
    per = f"per {_unit(report)}" if report.per_step else "whole run"
    table = Table(
        title=f"Your lines by time {'per ' + _unit(report) if report.per_step else 'over the whole run'}",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    table.add_column("where", overflow="fold")
    table.add_column("category")
    table.add_column(per, justify="right")
    table.add_column("share", justify="right")
    for line in report.lines:
        label = f"{line.category}/{line.kind}" if line.kind else line.category
        table.add_row(line.where, label, format_seconds(line.seconds_per_step), f"{line.share:.1%}")
    return table


def buys(f: Finding) -> str:
    """What the fix buys: measured where the run tried it, else estimated, with its Amdahl
    ceiling where something outside the finding remains."""
    if f.measured is not None:
        m = f.measured
        return (
            f"{_speedup(m.gain)} measured: {m.fixed_steps} steps with {m.change} ran at "
            f"{format_seconds(m.fixed_median_s)} against {format_seconds(m.as_is_median_s)} "
            f"({_speedup(m.low)}-{_speedup(m.high)} across block pairs; estimated {_speedup(m.estimated)})"
        )
    if f.ceiling is None or not math.isfinite(f.ceiling):
        # The whole step is this finding: nothing outside it bounds the gain, and "unbounded"
        # would promise what only the fix's own factor can say.
        return f"{_speedup(f.expected_speedup)} estimated (all of the step is this finding)"
    return f"{_speedup(f.expected_speedup)} estimated, ceiling {_speedup(f.ceiling)} (Amdahl)"


def _speedup(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "unbounded"
    return f"×{value:.1f}"
