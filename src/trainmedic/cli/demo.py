"""``trainmedic demo``: diagnose a starved loop, then run the same loop on ``data.load`` and measure it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rich.console import Console

from trainmedic import demo
from trainmedic.categories import DATA
from trainmedic.cli.output import USAGE, output_problem
from trainmedic.cli.run import emit
from trainmedic.cli.run_options import RunOptions
from trainmedic.run.diagnose import confirmed, diagnose
from trainmedic.run.diagnose.counterfactual import confirmer
from trainmedic.run.probe import confirm, runner
from trainmedic.run.probe.session import DEFAULT_WARMUP, WatchSession
from trainmedic.run.report.model import Report


def run_demo(steps: int, json_path: Path | None, html_path: Path | None, console: Console) -> int:
    problem = output_problem([("--json", json_path), ("--html", html_path)])
    if problem:  # found now, not after both runs
        console.print(f"trainmedic: error: {problem}", style="red", markup=False)
        return USAGE
    json_path = json_path.resolve() if json_path else None
    html_path = html_path.resolve() if html_path else None
    with tempfile.TemporaryDirectory(prefix="trainmedic-demo-") as folder:
        here = os.getcwd()
        os.chdir(folder)  # so the report names the demo script by its short name
        try:
            console.print(f"trainmedic demo: writing a 20,000-row SQLite dataset to {folder}", markup=False)
            db = demo.make_dataset(Path(folder) / "signals.db")
            script = demo.copy_script(Path(folder))
            # Room for the warm-up, the confirmation after the window and the first marked step
            # (12 to spare): the watch stops the starved loop itself after the confirmation.
            loop_steps = steps + DEFAULT_WARMUP + confirm.MAX_STEPS + 12
            args = ["--db", str(db), "--steps", str(loop_steps), "--batch-size", str(demo.BATCH_SIZE)]
            console.print(
                f"trainmedic demo: running {script.name} under trainmedic run (one database query per batch)",
                markup=False,
            )
            starved = _watch(script.name, args, confirm_after=steps)
            emit(starved, json_path, html_path, False, console)
            if demo.can_use_trainmedic_data():
                call = demo.fixed_call(db)
                console.print(
                    f"\ntrainmedic demo: running the fix, {script.name} --trainmedic-data: the same loop on\n  {call}",
                    markup=False,
                )
                fixed = _watch(script.name, [*args, "--trainmedic-data"], confirm_after=None)
                label = "data.load loop"
            else:
                call = None
                console.print(
                    "\ntrainmedic demo: SQLAlchemy is not installed, so trainmedic.data cannot read SQL here "
                    "(pip install 'trainmedic[sql]'); running the fix by hand instead, "
                    f"{script.name} --preload (one query, then batches from RAM)",
                    markup=False,
                )
                fixed = _watch(script.name, [*args, "--preload"], confirm_after=None)
                label = "preloaded loop"
        finally:
            os.chdir(here)
    return _compare(starved, fixed, label, call, console)


def _watch(script: str, args: list[str], confirm_after: int | None) -> Report:
    """``script`` under a watch; ``confirm_after``: stop after that many steps and confirm the
    top finding's fix in the run, as ``trainmedic run --steps`` does."""
    # run's own 10 ms: sampling 5x finer (as the demo once did) made its ~35 ms steps 40 % slower
    # and took 15 % of the run, for a split that 500 samples already settle (data 84-89 %).
    command = [script, *args]
    session = WatchSession(
        max_steps=confirm_after, confirm=confirmer(command) if confirm_after is not None else None
    )
    session.start()
    try:
        outcome = runner.run(script, args)
    finally:
        measurements = session.stop()
    outcome = confirmed.settle(outcome, measurements, cut_short=session.confirmation_cut_short)
    return diagnose(measurements, command, outcome)


def _compare(starved: Report, fixed: Report, label: str, call: str | None, console: Console) -> int:
    before, after = starved.steps.median_s, fixed.steps.median_s
    if fixed.outcome == "exception":
        console.print(f"trainmedic demo: the fixed loop failed: {fixed.message}", style="red", markup=False)
        return 1
    if not (before and after) or not starved.findings:
        console.print(
            "trainmedic demo: the demo measured no steps; this is a bug, please report it", style="red"
        )
        return 1
    top = starved.findings[0]
    console.print(
        f"\nMeasured in this run: starved loop {1 / before:.1f} steps/s (median step {before * 1e3:.1f} ms) -> "
        f"{label} {1 / after:.1f} steps/s (median step {after * 1e3:.1f} ms): {before / after:.1f}x faster; "
        + (
            f"the report measured {top.measured.gain:.1f}x by replaying batches inside its own run "
            f"and estimated {top.expected_speedup:.1f}x (ceiling {top.ceiling:.1f}x) for '{top.category}' at {top.where}."
            if top.measured is not None
            else f"the report estimated {top.expected_speedup:.1f}x (ceiling {top.ceiling:.1f}x) "
            f"for '{top.category}' at {top.where}."
        ),
        style="bold",
        markup=False,
    )
    console.print(
        f"Data share of the step: {starved.breakdown.get(DATA, 0.0):.0%} -> {fixed.breakdown.get(DATA, 0.0):.0%}"
        + ("; the one read of the table happens before the first step, outside both rates." if call else "."),
        markup=False,
    )
    if call is not None:
        if top.suggestion == call:
            console.print(
                "The fixed loop makes exactly the data.load call the report suggested.", markup=False
            )
        else:
            console.print(
                f"The report suggested {top.suggestion or 'no call'}; the fixed loop uses {call}.",
                markup=False,
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
