"""Script mode of ``trainmedic tune``: measure a training script under each combination of its options.

``trainmedic tune --script train.py --set batch_size=2,4,8 --set lr=1e-3,1e-4 -- ARGS`` needs no
build function: every combination is the user's own command line with those options overridden
(script_options.py checks and spells them), run in a child process that watches it as
``trainmedic run --steps N`` does (script_child.py), and measured from that run's report.

Samples/s count the batch the model was really called with in that run, as trainmedic's forward
hook saw it, never the value an option was set to: a script may ignore the option, or derive its
batch from it. Where the batch was not seen, speeds are steps/s.

Nothing here prints or exits: functions return values or raise :class:`TuneError`.
"""

from __future__ import annotations

import itertools
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainmedic._os import read_json
from trainmedic.errors import TuneError
from trainmedic.tune.model import Config, Measurement, Row
from trainmedic.tune.script_options import (
    OptionStyle,
    command_for,
    detect_style,
    error_line,
    run_group,
)

#: The watcher's stack-sampling interval in measured runs. Its breakdown is not used here; a
#: sparser sampler perturbs short steps less than run's default of 10 ms.
SAMPLE_INTERVAL_MS = 50
_TAIL_BYTES = 64 * 1024


# --- the grid ------------------------------------------------------------------------------------


def script_grid(sets: Sequence[tuple[str, Sequence[str]]]) -> list[Config]:
    """Every combination of the ``--set`` values, the first option varying slowest.

    The batch size is left unknown: a run fills it in with the batch the model really saw.
    """
    names = [name for name, _ in sets]
    return [
        Config(batch_size=None, overrides=tuple(zip(names, combination)))
        for combination in itertools.product(*(values for _, values in sets))
    ]


# --- measuring -----------------------------------------------------------------------------------


def measure_script(
    script: str | Path,
    args: Sequence[str],
    config: Config,
    *,
    steps: int,
    trials: int,
    python: str = sys.executable,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    warmup: int = 3,
    style: OptionStyle | None = None,
) -> Row:
    """Run the script with ``config``'s overrides, watched as ``trainmedic run --steps STEPS`` watches it
    (in a child process, script_child.py); measure it.

    ``steps`` steady-state steps (after ``warmup``) are split into ``trials`` consecutive groups:
    samples/s per group is ``batch * steps / seconds``, ``batch`` being the batch the model was
    called with in this run (the row's ``config.batch_size``); steps/s when it was not seen (the
    row's batch stays None). A script that stops after fewer steps than ``trials`` gets one
    trial per step it made.
    ``first_step_s`` is the run's ``setup_s``: the process start to the end of the first step, so
    it holds the imports and data loading as well as the first step's compile and autotuning.
    Ctrl+C kills the child's process group and re-raises.
    """
    if steps < 1 or trials < 1:
        raise TuneError(
            f"steps={steps!r}, trials={trials!r}; expected at least 1 of each, e.g. steps=30, trials=3"
        )
    if style is None:
        style = OptionStyle(detect_style(script, args, [name for name, _ in config.overrides]))
    with tempfile.TemporaryDirectory(prefix="trainmedic-tune-") as tmp:
        report_path = Path(tmp, "report.json")
        argv = [
            python,
            "-m",
            "trainmedic.tune.script_child",
            str(report_path),
            str(steps),
            str(warmup),
            str(SAMPLE_INTERVAL_MS),
            "--",
            *command_for(script, args, style, config.overrides),
        ]
        code, output = run_group(argv, env, timeout_s, Path(tmp), _TAIL_BYTES)
        report = read_json(report_path)
    if code is None:
        return Row(
            config,
            "failed",
            reason=f"no result within {timeout_s:g} s, so it was stopped; "
            "allow more time or measure fewer steps",
        )
    if code != 0:
        return Row(config, "failed", reason=_failure_line(code, output, report))
    points = [float(s) for s in (report or {}).get("step_seconds", [])]
    if not points or report is None:  # (there are no points without a report)
        return Row(
            config,
            "failed",
            reason="the script ended (exit code 0) before trainmedic saw a steady-state "
            "training step: no optimizer.step(), DataLoader batch or "
            "trainmedic.step() after the warm-up; give it more steps",
        )
    seen = _seen_batch(report)
    return Row(
        config.replace(batch_size=seen),
        "measured",
        measurement=_measurement(points, report, seen, trials, warmup),
    )


def _seen_batch(report: dict) -> int | None:
    size = report.get("batch_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _measurement(
    points: list[float], report: dict, batch_size: int | None, trials: int, warmup: int
) -> Measurement:
    # A run past the clock's capacity keeps every k-th step; each kept point stands for k steps.
    stride = max(1, round(int(report.get("steady_steps") or len(points)) / len(points)))
    trials = min(trials, len(points))
    per = len(points) // trials
    points = points[len(points) - per * trials :]  # drop the earliest leftovers: later steps are steadier
    work = batch_size or 1
    rates = tuple(work * per / max(sum(points[i * per : (i + 1) * per]), 1e-9) for i in range(trials))
    return Measurement(rates, per * stride, float(report.get("setup_s", 0.0)), warmup)


def _failure_line(code: int, output: str, report: dict | None) -> str:
    message = (report or {}).get("message")
    if report and report.get("outcome") == "exception" and message:
        return message.splitlines()[0]  # "RuntimeError: ... (at train.py:12)": names the user's line
    line = error_line(output) or (message.splitlines()[0] if message else None)
    if line is None and code < 0:  # SIGKILL from the kernel's OOM killer, most often
        return f"the script was killed by signal {-code} ({_signal_name(-code)}) and printed no error"
    return line or f"the script exited with code {code} and printed no error"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"
