"""The terminal answer of ``trainmedic tune``: every configuration, its roofline, and the winner.

Rendered with rich, coloured on a terminal and plain in a pipe. The wording helpers here
(``ordered_rows``, ``marks``, ``gain_text``...) are shared with the HTML page, and the numbers
are formatted by ``trainmedic.units`` (as tune's own explanations are), so that every output says
the same numbers in the same words.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainmedic.tune.model import PRECISIONS, STATUSES, Ceilings, Config, Row, TuneResult
from trainmedic.units import finite, format_bandwidth, format_duration, format_flops
from trainmedic.units import format_sig3 as sig3

__all__ = ["build_tune", "render_tune"]

#: The colours the run report gives ``compute`` and ``memory_bandwidth``: one meaning, one colour.
BOUND_STYLES = {"compute": "green", "bandwidth": "blue"}
STATUS_STYLES = {"skipped": "yellow", "failed": "red", "not_run": "dim"}
_SOURCES = {"catalog": "from the catalog", "measured": "measured on this device"}


def render_tune(result: TuneResult, console: Console) -> None:
    """Print ``result`` on ``console``: header, table, not-measured rows, verdict, notes."""
    console.print(build_tune(result))


def build_tune(result: TuneResult) -> Group:
    rows = ordered_rows(result)
    measured = [r for r in rows if r.status == "measured"]
    parts: list = [_header(result), Text("")]
    if measured:
        parts.append(_table(result, measured))
    else:
        parts.append(Text("No configuration was measured, so there is no winner.", style="bold yellow"))
    rest = [r for r in rows if r.status != "measured"]
    if rest:
        parts += [Text(""), _not_measured(rest)]
    parts += [Text(""), *_verdict(result)]
    if result.notes or result.warnings:
        parts.append(Text(""))
    parts += [Text(f"note: {note}", style="dim") for note in result.notes]
    parts += [Text(f"warning: {warning}", style="yellow") for warning in result.warnings]
    return Group(*parts)


# --- shared with tune_html ---------------------------------------------------------------------


def format_times(factor: float | None) -> str:
    """``1.83x``, ``12.3x``: a ratio of speeds."""
    if not finite(factor):
        return "—"
    return f"{factor:.2f}x" if factor < 10 else f"{factor:.1f}x"


def format_span(seconds: float) -> str:
    """``6m52s``, ``10m``, ``48.20 s``: how long a search or a first step took."""
    text = format_duration(seconds)
    return text[:-3] if text.endswith("m00s") else text


def ordered_rows(result: TuneResult) -> list[Row]:
    """Best first, then measured by speed, then skipped, failed and not run, each in grid order."""
    order = {s: i for i, s in enumerate(STATUSES)}

    def key(item: tuple[int, Row]) -> tuple:
        index, row = item
        if row.status == "measured":
            return (0, row.config != result.best, -(row.samples_per_s or 0.0), index)
        return (1 + order.get(row.status, len(STATUSES)), False, 0.0, index)

    return [row for _, row in sorted(enumerate(result.rows), key=key)]


def marks(result: TuneResult, config: Config) -> list[str]:
    """What a row is besides its numbers: ``best``, ``tie`` (within the noise of best), ``baseline``."""
    out = []
    if config == result.best:
        out.append("best")
    elif config in result.ties:
        out.append("tie")
    if config == result.baseline:
        out.append("baseline")
    return out


def vs_baseline(result: TuneResult, row: Row) -> float | None:
    base = result.row(result.baseline)
    if base is None or not base.samples_per_s or row.samples_per_s is None:
        return None
    return row.samples_per_s / base.samples_per_s


def ceilings_text(ceilings: Ceilings | None) -> str:
    """``fp32 19.5 · bf16 312 TFLOP/s · memory 2,039 GB/s (from the catalog)``."""
    if ceilings is None:
        return "unknown, so no roofline"
    known = [p for p in PRECISIONS if p in ceilings.peak_flops]
    keys = known + sorted(p for p in ceilings.peak_flops if p not in known)
    rates = [format_flops(ceilings.peak_flops[p]) for p in keys]
    units = {rate.split(" ", 1)[-1] for rate in rates}
    if len(units) == 1:  # one unit for the lot reads shorter: "fp32 19.5 · bf16 312 TFLOP/s"
        peaks = " · ".join(f"{p} {rate.split(' ', 1)[0]}" for p, rate in zip(keys, rates)) + f" {units.pop()}"
    else:
        peaks = " · ".join(f"{p} {rate}" for p, rate in zip(keys, rates))
    source = _SOURCES.get(ceilings.source, f"source: {ceilings.source}")
    head = f"{peaks} · " if keys else ""
    return f"{head}memory {format_bandwidth(ceilings.bandwidth_bytes_per_s)} ({source})"


def search_text(result: TuneResult) -> str:
    """``9 configurations in 6m52s of a 10m budget: 7 measured, 1 skipped, 1 failed``."""
    counts = {s: sum(r.status == s for r in result.rows) for s in STATUSES}
    n = len(result.rows)
    text = f"{n} configuration{'' if n == 1 else 's'} in {format_span(result.elapsed_s)}"
    if result.budget_s is not None:
        text += f" of a {format_span(result.budget_s)} budget"
    done = [f"{c} {s.replace('_', ' ')}" for s, c in counts.items() if c]
    return text + (": " + ", ".join(done) if done else "")


def gain_text(result: TuneResult) -> str | None:
    """``1.8x faster than batch 64 · fp32 (largest batch that fits)``, or why there is no gain."""
    if result.baseline is None or result.best is None:
        return None
    base = result.baseline.label + (f" ({result.baseline_source})" if result.baseline_source else "")
    gain = result.gain
    if gain is None:
        return f"no gain measured: the baseline, {base}, has no measurement"
    if result.baseline == result.best or result.baseline in result.ties:
        return f"the baseline, {base}, is already as fast as any (within the noise)"
    return f"{format_times(gain)} faster than {base}"


def stopped_text(result: TuneResult) -> str | None:
    """What an early stop (budget, Ctrl+C) leaves: how much of the grid the verdict rests on."""
    if not result.stopped_early:
        return None
    measured, total = len(result.measured), len(result.rows)
    not_run = sum(r.status == "not_run" for r in result.rows)
    counts = f"{measured} of {total} measured" + (f", {not_run} not run" if not_run else "")
    tail = "the verdict covers only what was measured" if measured else "nothing to compare"
    return f"stopped early: {result.stopped_early} ({counts}); {tail}"


# --- pieces -------------------------------------------------------------------------------------


def _header(result: TuneResult) -> Text:
    text = Text()
    text.append("trainmedic tune", style="bold")
    text.append(f"  {result.target}\n")
    text.append(f"device:    {result.device}\n")
    text.append(f"ceilings:  {ceilings_text(result.ceilings)}\n")
    text.append(f"search:    {search_text(result)}")
    return text


def _table(result: TuneResult, measured: list[Row]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    # Labels wrap between their parts ("batch 2 ·" / "bf16"), never inside a word; a script's
    # "batch_size=256" stays whole.
    longest = max((len(part) for row in measured for part in row.config.label.split(" · ")), default=6)
    table.add_column("config", ratio=1, min_width=min(max(longest, 6), 24))
    table.add_column(result.unit, justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True)
    table.add_column("vs base", justify="right", no_wrap=True)
    table.add_column("1st step", justify="right", no_wrap=True)
    roofs = any(row.roofline is not None for row in measured)
    if roofs:
        table.add_column("FLOP/B", justify="right", no_wrap=True)
        table.add_column("bound", no_wrap=True)
        table.add_column("% roof", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for row in measured:
        m, roof = row.measurement, row.roofline
        assert m is not None  # measured rows carry their measurement
        tags = marks(result, row.config)
        mark = Text(" · ".join(tags).replace("best", "◀ best"), style="bold" if "best" in tags else "")
        cells: list = [
            Text(row.config.label, style="bold" if "best" in tags else ""),
            sig3(m.samples_per_s),
            f"±{m.spread:.1%}",
            format_times(vs_baseline(result, row)),
            format_span(m.first_step_s),
        ]
        if not roofs:
            pass
        elif roof is None:
            cells += ["—", "—", "—"]
        else:
            cells += [
                sig3(roof.intensity),
                Text(roof.bound, style=BOUND_STYLES.get(roof.bound, "")),
                f"{roof.share_of_ceiling:.0%}",
            ]
        table.add_row(*cells, mark)
    return table


def _not_measured(rows: list[Row]) -> Group:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for row in rows:
        status = row.status.replace("_", " ")
        grid.add_row(
            Text(row.config.label),
            Text(status, style=STATUS_STYLES.get(row.status, "")),
            Text(row.reason or "no reason recorded", style="dim" if row.status == "not_run" else ""),
        )
    return Group(Text("Not measured", style="bold"), Padding(grid, (0, 0, 0, 2)))


def _verdict(result: TuneResult) -> list:
    if result.verdict:
        parts: list = [Text(result.verdict, style="bold")]
    elif not result.measured:
        parts = [Text("No verdict: nothing was measured.", style="bold")]
    else:
        parts = []
    if result.why:
        # A grid, not "- " text: a wrapped reason stays indented under its own first line.
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for why in result.why:
            grid.add_row("-", Text(why))
        parts.append(Padding(grid, (0, 0, 0, 2)))
    if result.change:
        # Text, not markup: a change like `x[idx]` or `[bold]` must print as written.
        parts += [Text("change:"), Padding(Text(result.change, style="cyan"), (0, 0, 0, 4))]
    gain = gain_text(result)
    if gain:
        parts.append(Text(gain, style="bold green" if result.gain and "faster" in gain else ""))
    stopped = stopped_text(result)
    if stopped:
        parts.append(Text(stopped, style="yellow"))
    return parts
