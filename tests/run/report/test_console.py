"""The terminal report, rendered at a fixed width without colour, checked as exact text."""

import dataclasses
import io
import math
from pathlib import Path

from rich.console import Console

from trainmedic.categories import CATEGORIES
from trainmedic.run.report.console import render_console
from trainmedic.run.report.model import DeviceInfo, Finding, LineCost, Report, StepStats

EXPECTED = Path(__file__).with_name("console_seed000.txt")


def seed_000_report() -> Report:
    share = 36.0 / 36.5
    return Report(
        command=["train.py", "--epochs", "3"],
        exit_code=0,
        outcome="completed",
        device=DeviceInfo("cuda", "NVIDIA GeForce RTX 4090 D"),
        steps=StepStats(37, 36.5, 37.1, 1.0, 3, "optimizer"),
        breakdown={c: {"data": share, "compute": 1 - share}.get(c, 0.0) for c in CATEGORIES},
        bottleneck="data",
        findings=[
            Finding(
                "data",
                round(share, 4),
                "Reading the batch from HDF5 every step at data.py:88",
                "98.6% of steady-state step time (36.00 s of a 36.50 s median step); kind: hdf5",
                "data.py:88",
                "Load the dataset into memory once.",
                29.51,
                73.0,
                "hdf5",
            ),
            Finding("compute", 0.0137, "The model", "1.4%", None, "Healthy.", 1.0, math.inf, "model"),
        ],
        wall_s=1351.0,
        setup_s=0.5,
        lines=[LineCost("data.py:88", "data", "hdf5", 36.0, 0.9863)],
        notes=["Steps marked by optimizer; first 3 warm-up step(s) excluded."],
    )


def render(report: Report) -> str:
    out = io.StringIO()
    render_console(report, Console(file=out, width=100, color_system=None, legacy_windows=False))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def test_seed_000_report_renders_exactly():
    assert render(seed_000_report()) == EXPECTED.read_text(encoding="utf-8")


def test_a_suggested_call_gets_its_own_row_and_brackets_survive():
    report = seed_000_report()
    f = report.findings[0]
    report.findings[0] = Finding(
        f.category,
        f.share,
        f.title,
        f.evidence,
        f.where,
        "Load it once: `x = f['x'][:]`, then `x[idx]` per step.",
        f.expected_speedup,
        f.ceiling,
        f.kind,
        suggestion='data.load("/data/rx.h5", fields=["x", "y"], batch_size=64)',
    )
    text = render(report)
    assert "`x = f['x'][:]`, then `x[idx]` per step." in text  # not read as rich markup
    assert '    call      data.load("/data/rx.h5", fields=["x", "y"], batch_size=64)\n' in text
    assert text.index("    fix ") < text.index("    call ") < text.index("    buys ")


def test_a_close_call_marks_both_levers_and_neither_as_the_bottleneck():
    report = dataclasses.replace(seed_000_report(), close_call=["data", "compute"])
    text = render(report)
    marked = [line for line in text.splitlines() if "◀" in line]
    assert [line.split()[0] for line in marked] == ["data", "compute"]
    assert all(line.endswith("◀ too close to call") for line in marked)
    assert "◀ bottleneck" not in text
