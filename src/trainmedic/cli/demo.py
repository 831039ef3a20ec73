"""``trainmedic demo``: diagnose a starved loop, then run its fix and measure what it bought."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rich.console import Console

from trainmedic import demo
from trainmedic.cli.run import RunOptions, emit
from trainmedic.diagnose import diagnose
from trainmedic.probe import runner
from trainmedic.probe.session import WatchSession
from trainmedic.report.model import Report


def run_demo(steps: int, json_path: Path | None, html_path: Path | None, console: Console) -> int:
    json_path = json_path.resolve() if json_path else None
    html_path = html_path.resolve() if html_path else None
    with tempfile.TemporaryDirectory(prefix="trainmedic-demo-") as folder:
        here = os.getcwd()
        os.chdir(folder)  # so the report names the demo script by its short name
        try:
            console.print(f"trainmedic demo: writing a 20,000-row SQLite dataset to {folder}", markup=False)
            db = demo.make_dataset(Path(folder) / "signals.db")
            script = demo.copy_script(Path(folder))
            console.print(f"trainmedic demo: running {script.name} under trainmedic run (one database query per batch)", markup=False)
            starved = _watch(script.name, ["--db", str(db), "--steps", str(steps + 3)])
            emit(starved, json_path, html_path, False, console)
            console.print(f"\ntrainmedic demo: running the fix, {script.name} --preload (one query, then batches from RAM)", markup=False)
            fixed = _watch(script.name, ["--db", str(db), "--steps", str(steps + 3), "--preload"])
        finally:
            os.chdir(here)
    return _compare(starved, fixed, console)


#: The demo's steps are short (~15 ms) and few: sample 5x finer than the default for a steadier split.
DEMO_INTERVAL_S = 0.002


def _watch(script: str, args: list[str]) -> Report:
    session = WatchSession(interval=DEMO_INTERVAL_S)
    session.start()
    try:
        outcome = runner.run(script, args)
    finally:
        measurements = session.stop()
    return diagnose(measurements, [script, *args], outcome)


def _compare(starved: Report, fixed: Report, console: Console) -> int:
    before, after = starved.steps.median_s, fixed.steps.median_s
    if not (before and after) or not starved.findings:
        console.print("trainmedic demo: the demo measured no steps; this is a bug, please report it", style="red")
        return 1
    top = starved.findings[0]
    console.print(
        f"\nMeasured: median step {before * 1e3:.1f} ms -> {after * 1e3:.1f} ms, "
        f"{before / after:.1f}x faster; the report predicted {top.expected_speedup:.1f}x "
        f"(ceiling {top.ceiling:.1f}x) for '{top.category}' at {top.where}.",
        style="bold", markup=False,
    )
    rest = before * (1 - top.share)
    if top.ceiling is not None and before / after > top.ceiling:
        # Amdahl's ceiling holds the rest of the step fixed; say so when the rest moved too.
        console.print(
            f"The measured gain passes the ceiling because the rest of the step changed too: "
            f"{rest * 1e3:.1f} ms outside the fixed cost before, {after * 1e3:.1f} ms for the whole step after.",
            markup=False,
        )
    return 0


__all__ = ["RunOptions", "run_demo"]
