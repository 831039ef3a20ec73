"""``tune_script``: the search of ``trainmedic tune --script``, over the options ``--set`` names.

Each combination runs as its own process (``trainmedic run`` measures it; see script.py), in the
order the grid lists them, until the grid is done, the budget is spent, or Ctrl+C. The baseline
is the first combination (the first value of every ``--set``: list the current one first), and
the change is the command line of the recommended one.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from trainmedic.errors import TuneError
from trainmedic.probe.runner import check_script
from trainmedic.tune.explain import explain
from trainmedic.tune.model import Row, TuneResult
from trainmedic.tune.script import measure_script, script_grid
from trainmedic.tune.script_options import check_options, command_for, parse_sets
from trainmedic.tune.search import Callbacks
from trainmedic.tune.ties import pick_best
from trainmedic.units import format_duration

#: The longest one run may take when no budget bounds it.
RUN_TIMEOUT_S = 1800.0


def tune_script(script: str, args: Sequence[str], sets: Sequence[str], *, steps: int = 30, trials: int = 5,
                budget_s: float | None = None, callbacks: Callbacks | None = None) -> TuneResult:
    """Measure ``python script ARGS`` under every combination of ``sets`` (``["batch_size=2,4"]``)."""
    check_script(script)
    parsed = parse_sets(sets)
    if not parsed:
        raise TuneError(f"--script {script} needs the options to vary: --set NAME=V1,V2 (e.g. --set batch_size=2,4,8).")
    if trials < 3:
        raise TuneError(f"trials={trials}: at least 3 trials are needed to see the noise; e.g. --trials 5.")
    if steps < trials:
        raise TuneError(f"--steps {steps} cannot be split into {trials} trials; give at least --steps {trials}.")
    callbacks = callbacks or Callbacks()
    started = time.monotonic()
    style = check_options(script, list(args), [name for name, _ in parsed])
    grid = script_grid(parsed)
    result = TuneResult(str(script), "as the script chooses", None, budget_s=budget_s)
    result.notes.append(f"each configuration is its own run of {Path(script).name}: {steps} steady-state steps after 3 warm-up steps, "
                        f"in {trials} trials; the first step column is process start to the end of the first step")
    try:
        for config in grid:
            remaining = None if budget_s is None else started + budget_s - time.monotonic()
            if remaining is not None and remaining <= 0:
                result.stopped_early = (f"the budget of {format_duration(budget_s)} ran out after "
                                        f"{len(result.measured)} measured configurations")
                break
            callbacks.started(config)
            budget_bound = remaining is not None and remaining < RUN_TIMEOUT_S
            row = measure_script(script, list(args), config, steps=steps, trials=trials, style=style,
                                 timeout_s=remaining if budget_bound else RUN_TIMEOUT_S)
            if budget_bound and row.status == "failed" and started + budget_s - time.monotonic() <= 0:
                # Stopped by the budget, not by anything the script did.
                result.stopped_early = (f"the budget of {format_duration(budget_s)} ran out while measuring "
                                        f"{config.label}, after {len(result.measured)} measured configurations")
                break
            result.rows.append(row)
            callbacks.finished(row, result)
    except KeyboardInterrupt:
        result.stopped_early = f"stopped by Ctrl+C after {len(result.measured)} measured configurations"
    for config in grid:
        if result.row(config) is None:
            result.rows.append(Row(config, "not_run", reason=result.stopped_early))
    result.elapsed_s = time.monotonic() - started
    result.baseline = grid[0]
    result.baseline_source = "the first value of every --set (list your current one first)"
    result.best, result.ties = pick_best(result.measured, result.baseline)
    if result.best is not None:
        result.change = "python " + shlex.join(command_for(script, list(args), style, result.best.overrides))
    explain(result, {})
    return result
