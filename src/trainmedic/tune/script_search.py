"""``tune_script``: the search of ``trainmedic tune --script``, over the options ``--set`` names.

Each combination runs as its own process (watched as ``trainmedic run`` watches; see script.py), in the
order the grid lists them, until the grid is done, the budget is spent, or Ctrl+C. The baseline
is the first combination (the first value of every ``--set``: list the current one first), and
the change is the command line of the recommended one.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from trainmedic.errors import TuneError
from trainmedic.run.diagnose.rules.compute import batch_option  # the names `trainmedic run` points here with
from trainmedic.run.probe.runner import check_script
from trainmedic.tune.budget import Budget
from trainmedic.tune.explain import explain
from trainmedic.tune.model import Row, TuneResult
from trainmedic.tune.script import measure_script, script_grid
from trainmedic.tune.script_options import CHECK_TIMEOUT_S, check_options, command_for, parse_sets
from trainmedic.tune.search import Callbacks
from trainmedic.tune.ties import pick_best
from trainmedic.units import format_duration

#: The longest one run may take when no budget bounds it.
RUN_TIMEOUT_S = 1800.0


def tune_script(
    script: str,
    args: Sequence[str],
    sets: Sequence[str],
    *,
    steps: int = 30,
    trials: int = 5,
    budget_s: float | None = None,
    callbacks: Callbacks | None = None,
    started_at: float | None = None,
) -> TuneResult:
    """Measure ``python script ARGS`` under every combination of ``sets`` (``["batch_size=2,4"]``).

    ``budget_s`` counts from ``started_at`` (a ``time.monotonic()`` reading; default: now). Every
    child process is charged to it: the ``--help`` check and each run are killed at the deadline,
    and a run is not started when the time left is shorter than the quickest run so far.
    """
    check_script(script)
    parsed = parse_sets(sets)
    if not parsed:
        raise TuneError(
            f"--script {script} needs the options to vary: --set NAME=V1,V2 (e.g. --set batch_size=2,4,8)."
        )
    if trials < 3:
        raise TuneError(f"trials={trials}: at least 3 trials are needed to see the noise; e.g. --trials 5.")
    if steps < trials:
        raise TuneError(
            f"--steps {steps} cannot be split into {trials} trials; give at least --steps {trials}."
        )
    callbacks = callbacks or Callbacks()
    budget = Budget(budget_s, started_at if started_at is not None else time.monotonic())
    left = budget.remaining()
    check_timeout = CHECK_TIMEOUT_S if left is None else max(min(CHECK_TIMEOUT_S, left), 0.0)
    # Every option is checked before anything is measured (README): --help, else the source.
    try:
        style = check_options(script, list(args), [name for name, _ in parsed], timeout_s=check_timeout)
    except TuneError:
        if budget.spent():  # the check found nothing because it was stopped, not because nothing is there
            assert budget_s is not None  # a budget is spent only where there is one
            raise TuneError(
                f"the budget of {format_duration(budget_s)} ran out while checking the options of {script} "
                "(its --help had not answered); give a larger --budget, e.g. --budget 5m"
            ) from None
        raise
    grid = script_grid(parsed)
    result = TuneResult(str(script), "as the script chooses", None, budget_s=budget_s)
    result.notes.append(
        f"each configuration is its own run of {Path(script).name}: {steps} steady-state steps after 3 warm-up steps, "
        f"in {trials} trials; the first step column is process start to the end of the first step"
    )
    rows: dict[int, Row] = {}
    run_seconds: list[float] = []
    try:
        for index, config in enumerate(grid):
            if budget.spent() or not budget.allows(min(run_seconds, default=0.0)):
                assert budget_s is not None  # both hold only where there is a budget
                result.stopped_early = (
                    f"the budget of {format_duration(budget_s)} ran out after "
                    f"{len(result.measured)} measured configurations"
                )
                break
            callbacks.started(config)
            left, started = budget.remaining(), time.monotonic()
            row = measure_script(
                script,
                list(args),
                config,
                steps=steps,
                trials=trials,
                style=style,
                timeout_s=RUN_TIMEOUT_S if left is None else min(left, RUN_TIMEOUT_S),
            )
            if left is not None and row.status == "failed" and budget.spent():
                # Stopped by the budget, not by anything the script did.
                assert budget_s is not None
                result.stopped_early = (
                    f"the budget of {format_duration(budget_s)} ran out while measuring "
                    f"{config.label}, after {len(result.measured)} measured configurations"
                )
                break
            if row.status == "measured":
                run_seconds.append(time.monotonic() - started)
            rows[index] = row
            result.rows.append(row)
            callbacks.finished(row, result)
    except KeyboardInterrupt:
        result.stopped_early = f"stopped by Ctrl+C after {len(result.measured)} measured configurations"
    for index, config in enumerate(grid):
        if index not in rows:
            result.rows.append(Row(config, "not_run", reason=result.stopped_early))
    _one_unit(result)
    _check_batch_option(result, [name for name, _ in parsed])
    result.elapsed_s = time.monotonic() - budget.started_at
    # A run fills in the batch it saw: the baseline is the first combination as it ran.
    result.baseline = rows[0].config if 0 in rows else grid[0]
    result.baseline_source = "the first value of every --set (list your current one first)"
    result.best, result.ties = pick_best(result.measured, result.baseline)
    if result.best is not None:
        result.change = "python " + shlex.join(command_for(script, list(args), style, result.best.overrides))
    explain(result, {})
    return result


def _one_unit(result: TuneResult) -> None:
    """Samples/s only where every measured run showed its batch; else steps/s for all, and why."""
    measured = result.measured
    unseen = [r for r in measured if r.config.batch_size is None]
    if not unseen:
        if measured:
            result.notes.append(
                "samples/s count the batch the model was called with in each run (the first axis "
                "of its input, as trainmedic saw it), not the value an option was set to"
            )
        return
    for row in measured:
        m = row.measurement  # a measured row's, never None
        if row.config.batch_size is not None and m is not None:  # back to steps/s: one unit for the table
            row.measurement = dataclasses.replace(
                m, trials=tuple(t / row.config.batch_size for t in m.trials)
            )
            row.config = row.config.replace(batch_size=None)
    names = ", ".join(r.config.label for r in unseen[:3]) + (" ..." if len(unseen) > 3 else "")
    result.notes.append(
        f"speeds are steps/s, not samples/s: trainmedic did not see the batch the model was called "
        f"with in {names} (no forward of a model whose first argument is a tensor), and a --set "
        "value is not evidence of the batch a script really uses"
    )


def _check_batch_option(result: TuneResult, names: list[str]) -> None:
    """A batch option whose values did not change the batch the model saw is named as such."""
    option = batch_option(names)
    seen = {r.config.batch_size for r in result.measured}
    values = (
        list(dict.fromkeys(dict(r.config.overrides).get(option, "") for r in result.measured))
        if option
        else []
    )
    if option and len(values) > 1 and len(seen) == 1 and None not in seen:
        result.warnings.append(
            f"--set {option} took {len(values)} values ({', '.join(values)}) but the "
            f"model was called with batch {seen.pop()} in every run: the script does not use "
            f"{option} for its training batch, so those runs differ in nothing that option names"
        )
