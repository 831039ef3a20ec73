"""The terminal answer of ``trainmedic preflight``: a row per experiment, the details, the summary."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainmedic.preflight.estimate import format_budget
from trainmedic.preflight.frames import LoopProgress, Where
from trainmedic.preflight.model import ExperimentResult, PreflightReport
from trainmedic.units import format_bytes, format_duration
from trainmedic.userfiles import shown_path

__all__ = ["render_preflight"]

#: A verdict as the table and the detail titles say it; every one but "passed" asks for attention.
_VERDICT_TEXT = {
    "passed": ("passed", "green"),
    "failed": ("FAILED", "bold red"),
    "stuck": ("STUCK", "bold red"),
    "resume_failed": ("RESUME FAILED", "bold red"),
    "resume_diverged": ("RESUME DIVERGED", "bold red"),
    "does_not_fit": ("DOES NOT FIT", "bold red"),
}
#: A verdict as the closing count says it: "2 of 5 experiments need attention: 1 failed, 1 stuck."
_SUMMARY_WORDS = {
    "failed": "failed",
    "stuck": "stuck",
    "resume_failed": "resume failed",
    "resume_diverged": "resume diverged",
    "does_not_fit": "does not fit",
}
#: rich's padding between two columns of a box-less table.
_GAP = 2
#: The detail column keeps this much of the width at least: it wraps, the other columns never do.
_DETAIL_MIN = 20
#: An experiment column narrower than this cannot show what tells two commands apart: a name too
#: long for the table then goes on its own line above its row.
_NAME_MIN = 28


def render_preflight(report: PreflightReport, console: Console) -> None:
    """Print ``report`` on ``console``: the table, the details, the summary; exact text, stable
    for a given report."""
    header = Text()
    header.append("Preflight", style="bold")
    header.append(f": {_source(report)}, run tiny on the CPU")
    # A long path goes on its own line, printed whole (soft wrap): a terminal may fold it, rich won't.
    # Only console.print can soft-wrap one line and not the rest, hence three prints, not one renderable.
    console.print(header)
    console.print(Text(f"project: {report.root}", style="dim"), soft_wrap=True)
    table, shortened = _table(report, console.width)
    parts: list = [Text(""), *table]
    for i, result in enumerate(report.experiments):
        block = _details(result, report.root, named=i in shortened)
        if block:
            parts += [Text(""), *block]
    if report.notes:
        parts.append(Text(""))
        parts += [Text(f"note: {note}", style="dim") for note in report.notes]
    parts += [Text(""), _summary(report)]
    console.print(Group(*parts))


def _source(report: PreflightReport) -> str:
    """``2 experiments from pyproject.toml``: where the experiments that ran came from, told per
    experiment (a pyproject found on the way says nothing when only --command ones ran)."""
    count = len(report.experiments)
    given = sum(r.from_command_line for r in report.experiments)
    declared = 0 if report.pyproject is None else count - given  # no pyproject: nothing was declared
    head = f"{count} experiment{'s' if count != 1 else ''}"
    if declared and declared < count:
        return f"{head}, {declared} from pyproject.toml and {count - declared} from the command line"
    return f"{head} from {'pyproject.toml' if declared else 'the command line'}"


def _table(report: PreflightReport, width: int) -> tuple[list[RenderableType], set[int]]:
    """The table at ``width``, and which rows' names it shortened (their details name them whole).

    The verdict and the time never wrap nor shrink. A name too long for the rest (a
    ``--command``'s name is the command, easily 300 characters) shares it with the detail (3/5
    of it, more when the detail needs less) and is shortened in the middle, keeping the program
    and the last arguments, which tell runs apart; where that leaves it under _NAME_MIN, each
    name goes on its own line above its row, shortened to the width if need be. The detail
    column wraps in what is left.
    """
    rows = [
        (result.name, *_VERDICT_TEXT[result.verdict], _time(result.seconds), _detail(result, report.root))
        for result in report.experiments
    ]
    verdict = max([cell_len("verdict"), *(cell_len(row[1]) for row in rows)])
    time = max([cell_len("time"), *(cell_len(row[3]) for row in rows)])
    names = max([cell_len("experiment"), *(cell_len(row[0]) for row in rows)])
    details = max([cell_len("detail"), *(cell_len(row[4]) for row in rows)])
    rest = width - verdict - time - 3 * _GAP  # for the name and the detail
    room = names
    if names + details > rest:
        room = min(names, max(rest - details, rest * 3 // 5), rest - min(details, _DETAIL_MIN))
    if room < min(names, _NAME_MIN):
        return _rows_under_names(rows, verdict, time, width)
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("experiment", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    shortened = set()
    for i, (name, word, style, seconds, text) in enumerate(rows):
        shown = _middle(name, room)
        if shown != name:
            shortened.add(i)
        table.add_row(Text(shown), Text(word, style=style), seconds, Text(text))
    return [table], shortened


def _rows_under_names(
    rows: list[tuple[str, str, str, str, str]], verdict: int, time: int, width: int
) -> tuple[list[RenderableType], set[int]]:
    """Each name on its own line, its verdict, time and detail indented under it; the columns
    line up across rows (fixed widths) as they would in one table."""

    def grid(header: bool) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold", show_header=header)
        table.add_column("verdict", width=verdict, no_wrap=True)
        table.add_column("time", width=time, justify="right", no_wrap=True)
        table.add_column("detail", overflow="fold")
        return table

    out: list[RenderableType] = [Text("experiment", style="bold"), Padding(grid(True), (0, 0, 0, 2))]
    shortened = set()
    for i, (name, word, style, seconds, text) in enumerate(rows):
        shown = _middle(name, width)
        if shown != name:
            shortened.add(i)
        row = grid(False)
        row.add_row(Text(word, style=style), seconds, Text(text))
        out += [Text(shown), Padding(row, (0, 0, 0, 2))]
    return out, shortened


def _middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut in the middle: its start (the program, the
    script) and its end (the last arguments, what tells two runs apart) are kept."""
    if cell_len(text) <= width:
        return text
    keep = max(width - 1, 2)
    words = text.split(" ")
    lead = cell_len(" ".join(words[:2])) + 1 if len(words) > 2 else keep  # "python train.py "
    head = lead if lead <= keep * 3 // 5 else keep // 2
    start, end = "", ""
    for char in text:
        if cell_len(start + char) > head:
            break
        start += char
    for char in reversed(text):
        if cell_len(char + end) > keep - cell_len(start):
            break
        end = char + end
    return f"{start}…{end}"


def _detail(result: ExperimentResult, root: Path) -> str:
    parts = []
    if result.status == "failed":
        kind = (result.error or "").split(":", 1)[0] or "error"
        parts.append(f"{kind} at {_at(result.where, root)}" if result.where else (result.error or "failed"))
    elif result.status == "stuck":
        parts.append(_stuck_short(result, root))
    missed = [c for c in result.configs if c.kind == "missed_override"]
    if missed:
        parts.append(f"override missed {', '.join(c.key for c in missed)}")
    if result.resume is not None:
        parts.append(_short_resume(result))
    if result.plan is not None and result.plan.fits is not None:
        parts.append(f"{'fits' if result.plan.fits else 'does not fit'} on {result.plan.device}")
    if result.session is not None and result.session.sessions and result.session.sessions > 1:
        parts.append(f"needs {result.session.sessions} sessions")
    return "; ".join(parts)


def _short_resume(result: ExperimentResult) -> str:
    resume = result.resume
    assert resume is not None
    if resume.status == "identical":
        return f"resume identical from step {resume.restored_step}"
    if resume.status == "diverged":
        return resume.message.split(":", 1)[0]
    if resume.status == "not_restored":
        return "did not resume"
    if resume.status == "resume_failed":
        return "resumed run failed"
    return "resume not checked"


def _details(result: ExperimentResult, root: Path, named: bool = False) -> list[RenderableType]:
    """The detail lines of one result; ``named``: the table shortened its name, so a passed run
    gets its title line too, which names it whole."""
    lines: list[RenderableType] = []
    if result.status == "failed":
        code = f"exit code {result.exit_code}" if result.exit_code is not None else "no exit code"
        lines.append(_title(result, f"with {code} after {_time(result.seconds)}"))
        if result.error:
            lines.append(_indent(result.error, style="red"))
        lines += _where(result.where, root)
        if result.where is None and result.stderr.strip():
            lines.append(_indent("last lines of stderr:"))
            lines += [_indent(line, 4, style="dim") for line in result.stderr.rstrip().splitlines()[-5:]]
    elif result.status == "stuck":
        lines.append(
            _title(result, f"still running after its {format_budget(result.budget)} budget", sep=", ")
        )
        lines += _stuck_where(result, root)
    for issue in result.configs:
        place = f"{issue.file}:{issue.line}" if issue.line else issue.file
        style = "yellow" if issue.kind == "missed_override" else "dim"
        lines.append(_indent(f"{place}: {issue.message}", style=style))
    if result.config_note:
        lines.append(_indent(f"note: {result.config_note}", style="dim"))
    if result.resume is not None:
        resume = result.resume
        style = "red" if resume.failed else ("green" if resume.status == "identical" else "yellow")
        lines.append(_indent(f"resume check: {resume.message}", style=style))
        lines += [
            _indent(f"restore skipped {shown_path(p, root)}: {why}", 4, style="dim")
            for p, why in resume.skipped
        ]
        lines += _where(resume.where, root, 4)
    elif result.resume_note:
        lines.append(_indent(f"note: {result.resume_note}", style="dim"))
    if result.plan is not None:
        lines.append(_plan(result))
    if result.session is not None:
        fits = result.session.fits
        lines.append(_indent(f"session: {result.session.message}", style="yellow" if fits is False else ""))
    lines += [_indent(f"note: {note}", style="dim") for note in result.notes]
    if (lines or named) and result.status == "passed":
        lines.insert(0, _title(result, f"after {_time(result.seconds)}"))
    return lines


def _title(result: ExperimentResult, tail: str, sep: str = " ") -> Text:
    word, style = _VERDICT_TEXT[result.verdict]
    text = Text()
    text.append(result.name, style="bold")
    text.append(": ")
    text.append(word, style=style)
    text.append(f"{sep}{tail}")
    return text


def _where(where: Where | None, root: Path, indent: int = 2) -> list[RenderableType]:
    if where is None:
        return []
    frame = where.frame
    head = f"at {_at(where, root)} in {frame.function}"
    loop = where.loop_line is not None and where.loop_line != frame.line
    if loop:
        head += f", inside the loop at line {where.loop_line}"
    lines: list[RenderableType] = [_indent(head, indent)]
    width = len(str(max(frame.line, where.loop_line or 0)))
    if loop and where.loop_source:
        lines.append(_indent(f"{where.loop_line:>{width}} | {where.loop_source}", indent + 2, style="cyan"))
    if frame.source:
        lines.append(_indent(f"{frame.line:>{width}} | {frame.source}", indent + 2, style="cyan"))
    return lines


def _stuck_short(result: ExperimentResult, root: Path) -> str:
    """The table's detail of a stuck run: the loop still iterating, how far, the innermost line."""
    text = f"still running after {format_budget(result.budget)}"
    where = result.where
    if where is None:
        steps = _steps(result)
        return f"{text}, {steps}" if steps else text
    if where.loop_line is not None:
        text += f", in the loop at {_loop_at(where, root)}"
        how_far = _how_far(where.progress, result)
        if how_far:
            text += f" ({how_far})"
    return f"{text}, at {_at(where, root)}"


def _stuck_where(result: ExperimentResult, root: Path) -> list[RenderableType]:
    """The loop still iterating and how far it got, its line; what that was read from (or why it
    is not known); the user's innermost line, under the loop's when it is in the same function."""
    where = result.where
    steps = [_indent(f"{_steps(result)} when stopped", style="dim")] if _steps(result) else []
    if where is None or where.loop_line is None:
        return _where(where, root) + steps
    frame, progress = where.frame, where.progress
    head = f"in the loop at {_loop_at(where, root)} in {where.loop_function or frame.function}"
    if progress is not None and progress.iteration is not None:
        head += f", at iteration {progress.iteration}"
        head += f" of {progress.total}" if progress.total is not None else ""
    lines: list[RenderableType] = [_indent(head)]
    inner = where.loop_in_frame and frame.line != where.loop_line
    width = len(str(max(where.loop_line, frame.line if inner else 0)))
    if where.loop_source:
        lines.append(_indent(f"{where.loop_line:>{width}} | {where.loop_source}", 4, style="cyan"))
    if inner and frame.source:
        lines.append(_indent(f"{frame.line:>{width}} | {frame.source}", 4, style="cyan"))
    if progress is not None:
        lines.append(_indent(_read_from(progress), style="dim"))
    if not where.loop_in_frame:
        lines.append(_indent(f"at {_at(where, root)} in {frame.function}, called from that loop"))
        if frame.source:
            lines.append(_indent(f"{frame.line} | {frame.source}", 4, style="cyan"))
    if where.other_loops:
        others = ", ".join(
            f"{shown_path(loop.path, root)}:{loop.line} ({_how_far(loop.progress, None)})"
            for loop in where.other_loops
        )
        lines.append(_indent(f"other loops it is in: {others}", style="dim"))
    return lines + (steps if progress is None or progress.iteration is None else [])


def _loop_at(where: Where, root: Path) -> str:
    return f"{shown_path(where.loop_path or where.frame.path, root)}:{where.loop_line}"


def _how_far(progress: LoopProgress | None, result: ExperimentResult | None) -> str:
    """``iteration 812 of 5000``; a run's optimizer steps when the loop's count is not known."""
    if progress is not None and progress.iteration is not None:
        if progress.total is None:
            return f"iteration {progress.iteration}, total not known"
        return f"iteration {progress.iteration} of {progress.total}"
    steps = _steps(result) if result is not None else ""
    if steps:
        return steps
    return "how far: not known" if progress is not None else ""


def _read_from(progress: LoopProgress) -> str:
    """Where the numbers came from, or why there are none: the user can check, nothing is guessed."""
    if progress.iteration is None:
        return f"how far it got is not known: {progress.unknown or 'the loop has no counter to read'}"
    text = f"counted by {progress.counter}"
    if progress.total is None:
        return f"{text}; total not known: {progress.unknown or 'the loop has no total in its source'}"
    total = progress.total_text or progress.total_from
    if progress.total_from and progress.total_text:
        total += f" ({progress.total_from} on the command line)"
    elif progress.total_from:
        total += " on the command line"
    return f"{text}; total from {total}"


def _steps(result: ExperimentResult) -> str:
    steps = result.optimizer_steps
    return f"{steps} optimizer step{'s' if steps != 1 else ''} done" if steps else ""


def _at(where: Where | None, root: Path) -> str:
    if where is None:
        return "?"
    return f"{shown_path(where.frame.path, root)}:{where.frame.line}"


def _plan(result: ExperimentResult) -> RenderableType:
    plan = result.plan
    assert plan is not None
    head = (
        f"plan on {plan.device}, batch {plan.batch}, {plan.precision}"
        if plan.device
        else f"plan of {plan.spec}"
    )
    if plan.error is not None:
        return _indent(f"{head}: not planned: {plan.error}", style="yellow")
    assert plan.needed_bytes is not None and plan.capacity_bytes is not None
    need = f"needs {format_bytes(plan.needed_bytes)} of {format_bytes(plan.capacity_bytes)}"
    lower = "" if plan.exact else " (a lower bound: part of the step could not be traced)"
    if plan.fits:
        return _indent(f"{head}: {need}: fits{lower}")
    fix = f"trainmedic plan {plan.spec} --device {plan.device} --max-batch finds the largest batch that fits"
    return _indent(f"{head}: {need}: does NOT fit ({fix})", style="red")


def _summary(report: PreflightReport) -> Text:
    total = len(report.experiments)
    bad = [r for r in report.experiments if r.verdict != "passed"]
    if not bad:
        return Text(
            "The experiment passed." if total == 1 else f"All {total} experiments passed.", style="bold green"
        )
    counts: dict[str, int] = {}
    for result in bad:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    listed = ", ".join(f"{n} {_SUMMARY_WORDS[v]}" for v, n in counts.items())
    verb = "needs" if len(bad) == 1 else "need"
    return Text(
        f"{len(bad)} of {total} experiment{'s' if total != 1 else ''} {verb} attention: {listed}.",
        style="bold red",
    )


def _indent(text: str, by: int = 2, style: str = "") -> Padding:
    """A detail line; a long one wraps under itself, not under the experiment's name."""
    return Padding(Text(text, style=style), (0, 0, 0, by))


def _time(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 60 else format_duration(seconds)
