"""Script mode of ``trainmedic tune``: measure a training script under each combination of its options.

``trainmedic tune --script train.py --set batch_size=2,4,8 --set lr=1e-3,1e-4 -- ARGS`` needs no
build function: every combination is the user's own command line with those options overridden
(script_options.py checks and spells them), run under ``trainmedic run --steps N`` in a child
process, and measured from that run's report.

Nothing here prints or exits: functions return values or raise :class:`TuneError`.
"""

from __future__ import annotations

import itertools
import re
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
    normal_name,
    run_group,
)

#: The watcher's stack-sampling interval in measured runs. Its breakdown is not used here; a
#: sparser sampler perturbs short steps less than run's default of 10 ms.
SAMPLE_INTERVAL_MS = 50
_TAIL_BYTES = 64 * 1024

# Leaf names (lower case, "-" as "_") that name the per-step batch, in order of preference.
_BATCH_NAMES = ("batch_size", "per_device_train_batch_size", "train_batch_size", "micro_batch_size",
                "per_gpu_train_batch_size", "batch_size_per_gpu", "per_device_batch_size", "batchsize",
                "mini_batch_size", "minibatch_size", "micro_batch", "batch", "bs", "train_bs")
_NOT_TRAINING = re.compile(r"(^|_)(eval|val|valid|validation|test|predict|inference)(_|$)")


# --- the grid ------------------------------------------------------------------------------------

def batch_option(names: Sequence[str]) -> str | None:
    """The ``--set`` name that is the per-step batch size, or None (speeds are then steps/s)."""
    leaves = {name: normal_name(name).rsplit(".", 1)[-1] for name in names}
    for wanted in _BATCH_NAMES:
        for name, leaf in leaves.items():
            if leaf == wanted:
                return name
    # train_batch_size-like names the list lacks; an eval/test batch is not the training step's.
    return next((n for n, leaf in leaves.items() if leaf.endswith("batch_size") and not _NOT_TRAINING.search(leaf)),
                None)


def script_grid(sets: Sequence[tuple[str, Sequence[str]]]) -> list[Config]:
    """Every combination of the ``--set`` values, the first option varying slowest."""
    names = [name for name, _ in sets]
    batch = batch_option(names)
    if batch is not None:
        values = dict(sets)[batch]
        ints = [v for v in values if _positive_int(v) is not None]
        if ints and len(ints) != len(values):
            bad = [v for v in values if _positive_int(v) is None]
            # samples/s of some rows against steps/s of others would compare nothing.
            raise TuneError(f"--set {batch}: {', '.join(map(repr, bad))} is not a positive whole number, the "
                            f"others are; give batch sizes only, e.g. --set {batch}={','.join(ints)}")
    configs = []
    for combination in itertools.product(*(values for _, values in sets)):
        overrides = tuple(zip(names, combination))
        size = _positive_int(dict(overrides)[batch]) if batch is not None else None
        configs.append(Config(batch_size=size, overrides=overrides))
    return configs


# --- measuring -----------------------------------------------------------------------------------

def measure_script(script: str | Path, args: Sequence[str], config: Config, *, steps: int, trials: int,
                   python: str = sys.executable, timeout_s: float, env: Mapping[str, str] | None = None,
                   warmup: int = 3, style: OptionStyle | None = None) -> Row:
    """Run the script with ``config``'s overrides under ``trainmedic run --steps STEPS``; measure it.

    ``steps`` steady-state steps (after ``warmup``) are split into ``trials`` consecutive groups:
    samples/s per group is ``batch_size * steps / seconds`` (steps/s when the batch is unknown);
    a script that stops after fewer steps than ``trials`` gets one trial per step it made.
    ``first_step_s`` is the run's ``setup_s``: the process start to the end of the first step, so
    it holds the imports and data loading as well as the first step's compile and autotuning.
    Ctrl+C kills the child's process group and re-raises.
    """
    if steps < 1 or trials < 1:
        raise TuneError(f"steps={steps!r}, trials={trials!r}; expected at least 1 of each, e.g. steps=30, trials=3")
    if style is None:
        style = OptionStyle(detect_style(script, args, [name for name, _ in config.overrides]))
    with tempfile.TemporaryDirectory(prefix="trainmedic-tune-") as tmp:
        report_path = Path(tmp, "report.json")
        argv = [python, "-m", "trainmedic", "run", "--steps", str(steps), "--warmup", str(warmup),
                "--interval-ms", str(SAMPLE_INTERVAL_MS), "--quiet", "--json", str(report_path),
                "--", *command_for(script, args, style, config.overrides)]
        code, output = run_group(argv, env, timeout_s, Path(tmp), _TAIL_BYTES)
        report = read_json(report_path)
    if code is None:
        return Row(config, "failed", reason=f"no result within {timeout_s:g} s, so it was stopped; "
                                            "allow more time or measure fewer steps")
    if code != 0:
        return Row(config, "failed", reason=_failure_line(code, output, report))
    points = [float(p["seconds"]) for p in (report or {}).get("timeline", [])]
    if not points:
        return Row(config, "failed", reason="the script ended (exit code 0) before trainmedic saw a steady-state "
                                            "training step: no optimizer.step(), DataLoader batch or "
                                            "trainmedic.step() after the warm-up; give it more steps")
    return Row(config, "measured", measurement=_measurement(points, report, config.batch_size, trials, warmup))


def _measurement(points: list[float], report: dict, batch_size: int | None, trials: int, warmup: int) -> Measurement:
    # A run past the timeline's capacity keeps every k-th step; each kept point stands for k steps.
    stride = max(1, round(report["steps"]["count"] / len(points))) if report.get("steps") else 1
    trials = min(trials, len(points))
    per = len(points) // trials
    points = points[len(points) - per * trials:]  # drop the earliest leftovers: later steps are steadier
    work = batch_size or 1
    rates = tuple(work * per / max(sum(points[i * per:(i + 1) * per]), 1e-9) for i in range(trials))
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


def _positive_int(value: str) -> int | None:
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number > 0 else None
