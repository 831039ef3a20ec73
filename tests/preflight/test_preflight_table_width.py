"""The table keeps its key columns whole at any width: a long command gives way, shortened in the
middle (its start and its end kept) or on its own line, and is still printed whole below."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from trainmedic.preflight.console import render_preflight
from trainmedic.preflight.frames import Frame, LoopProgress, Where
from trainmedic.preflight.model import ExperimentResult, PreflightReport, ResumeCheck

ROOT = Path("/proj")
#: 300+ characters, as `trainmedic preflight -c "python train.py --lots --of --arguments"` gets.
LONG = (
    "python train.py "
    + " ".join(f"--option_{i}=value_{i}" for i in range(16))
    + " --max_iters=5000 --out_dir=runs/long-a"
)
LONGER = LONG.replace("--option_3=value_3", "--option_3=other").replace("runs/long-a", "runs/long-b")


def results() -> list[ExperimentResult]:
    stuck = ExperimentResult(
        LONG,
        LONG,
        20.0,
        "stuck",
        20.0,
        where=Where(
            Frame("/proj/model.py", 27, "forward", "x = self.fc(x)"),
            40,
            "while True:",
            "/proj/train.py",
            "<module>",
            LoopProgress(812, 5000, "iter_num", "max_iters", "--max_iters=5000", "max_iters"),
        ),
        from_command_line=True,
    )
    diverged = ExperimentResult(
        LONGER,
        LONGER,
        120.0,
        "passed",
        125.0,
        0,
        resume=ResumeCheck("diverged", "diverged at step 5 in object 'model': no match", 4, 4, [5], 5),
        from_command_line=True,
    )
    failed = ExperimentResult(
        "python ot.py --dataset mnist",
        "python ot.py --dataset mnist",
        20.0,
        "failed",
        0.12,
        1,
        error="ValueError: operand has more dimensions than subscripts given in einstein sum",
        where=Where(Frame("/proj/ot.py", 8, "velocity", 'return np.einsum("nd,md->nm", x, y)')),
        from_command_line=True,
    )
    passed = ExperimentResult(
        "python ot.py --dataset 2d",
        "python ot.py --dataset 2d",
        20.0,
        "passed",
        0.5,
        0,
        from_command_line=True,
    )
    return [stuck, diverged, failed, passed]


def render(width: int, items: list[ExperimentResult]) -> list[str]:
    console = Console(file=io.StringIO(), width=width, record=True)
    render_preflight(PreflightReport(ROOT, None, None, None, True, items), console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def table_of(lines: list[str]) -> list[str]:
    """The table: from its header to the first blank line after it."""
    start = next(i for i, line in enumerate(lines) if line.startswith("experiment"))
    end = lines.index("", start)
    return lines[start:end]


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_verdict_and_time_stay_whole_and_the_command_keeps_its_start_and_end(width):
    items = results()
    assert len(LONG) > 300
    lines = render(width, items)
    table = table_of(lines)
    assert all(len(line) <= width for line in lines)
    for result, word, time, end in [
        (items[0], "STUCK", "20.00 s", "runs/long-a"),
        (items[1], "RESUME DIVERGED", "2m05s", "runs/long-b"),
        (items[2], "FAILED", "0.12 s", "mnist"),
        (items[3], "passed", "0.50 s", "2d"),
    ]:
        # The row is the line that holds the command's end; at the narrowest widths the command
        # has its own line and the verdict and time are on the next one.
        at = next(
            i
            for i, line in enumerate(table)
            if line.startswith("python") and re.search(rf"{re.escape(end)}(\s|$)", line)
        )
        row = table[at] + "\n" + (table[at + 1] if at + 1 < len(table) else "")
        assert table[at].startswith(result.name[:15]), table[at]  # "python train.p", "python ot.py -"
        assert re.search(rf"(^|\s){re.escape(word)}\s+{re.escape(time)}(\s|$)", row, re.M), (width, row)


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_a_shortened_command_is_still_printed_whole_under_the_table(width):
    lines = render(width, results())
    table = "\n".join(table_of(lines))
    after = " ".join(lines[lines.index("", lines.index(table_of(lines)[0])) :])
    for command in (LONG, LONGER):
        assert command not in table  # it did not fit: shortened ...
        assert command in after.replace("\n", " ")  # ... and named whole in its details
    # The two long commands differ in the middle only: their table rows still differ at the end.
    assert "runs/long-a" in table and "runs/long-b" in table


def test_short_names_are_left_as_they_are_and_a_passed_run_gets_no_extra_block():
    short = [r for r in results() if not r.name.startswith("python train.py")]
    lines = render(80, short)
    assert lines[3:7] == [
        "experiment                    verdict    time  detail",
        "python ot.py --dataset mnist  FAILED   0.12 s  ValueError at ot.py:8",
        "python ot.py --dataset 2d     passed   0.50 s",
        "",
    ]
    assert not any(line.startswith("python ot.py --dataset 2d: passed") for line in lines)


def test_a_passed_run_whose_command_was_shortened_is_named_whole_below():
    passed = ExperimentResult(LONG, LONG, 20.0, "passed", 0.5, 0, from_command_line=True)
    lines = render(80, [passed])
    table = table_of(lines)
    assert table[1].startswith("python train.py …") and table[1].split()[-2:] == ["0.50", "s"]
    text = " ".join(lines)
    assert f"{LONG}: passed after 0.50 s".replace(" ", "") in text.replace(" ", "")


def test_the_middle_is_what_goes():
    lines = render(100, [ExperimentResult(LONG, LONG, 20.0, "passed", 0.5, 0)])
    (row,) = [line for line in table_of(lines) if "passed" in line]
    name = row.split("  passed")[0].rstrip()
    start, end = name.split("…")
    assert LONG.startswith(start) and LONG.endswith(end)
    assert start == "python train.py "  # the program and the script, whole
    assert len(end) > len(start)  # the end tells runs apart: it gets more
