"""``trainmedic tune``: measure training configurations, render the table, write JSON and HTML.

Two targets: a build function (``model.py:build``, read by plan's own spec loader) tuned over
batch × precision × memory format × compile; or ``--script train.py`` tuned over the options
``--set`` names. The result goes to stdout; the progress bar and errors to stderr. Ctrl+C ends
the search and still prints what was measured (exit code 130).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn

from trainmedic.cli.output import output_problem
from trainmedic.errors import DeviceError, MissingExtraError, PlanError, ScriptError, TuneError
from trainmedic.units import format_sig3, parse_duration

DONE, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130
#: The longest start-up (imports) charged to --budget; an older process is a host calling us.
STARTUP_S = 30.0
#: Steady-state steps each run of a --script measures, unless --steps says otherwise.
SCRIPT_STEPS = 30

_SWITCH = {"on": (True,), "off": (False,), "both": (False, True), "auto": (False, True)}


@dataclass(frozen=True, kw_only=True)
class TuneOptions:
    spec: str | None
    script: str | None = None
    #: What follows ``--``: the script's arguments, or the command line the build's module sees.
    script_args: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    device: str = "auto"
    batches: str | None = None
    precisions: str | None = None
    compile: str = "auto"
    memory_formats: str | None = None
    budget: str | None = None
    trials: int = 5
    current: int | None = None
    exhaustive: bool = False
    headroom: float = 0.1
    capacity: str | None = None
    #: None: SCRIPT_STEPS.
    steps: int | None = None
    json_path: Path | None = None
    html_path: Path | None = None
    quiet: bool = False


def run_tune(options: TuneOptions, out: Console, err: Console) -> int:
    """Run the search, render it on ``out``, write the files, and return the exit code."""
    problem = output_problem([("--json", options.json_path), ("--html", options.html_path)])
    if problem:
        _error(err, problem)
        return USAGE
    try:
        _check_flags(options)
        budget_s = _budget(options.budget)
        started_at = _process_started()
        with _ProgressBar(err, budget_s, started_at) as bar:
            result = _search(options, budget_s, started_at, bar)
    except (TuneError, PlanError, DeviceError, MissingExtraError, ScriptError) as exc:
        _error(err, str(exc))
        return USAGE
    except KeyboardInterrupt:  # while loading the target or planning: nothing measured yet
        err.print(
            "trainmedic tune: stopped by Ctrl+C before any configuration was measured",
            markup=False,
            highlight=False,
        )
        return INTERRUPTED
    from trainmedic.tune.console import render_tune

    if not options.quiet:
        render_tune(result, out)
    for kind, path in (("JSON", options.json_path), ("HTML", options.html_path)):
        if path is None:
            continue
        try:
            if kind == "JSON":
                result.write_json(path)
            else:
                from trainmedic.tune.html import write_tune_html

                write_tune_html(result, path)
        except OSError as exc:
            _error(err, f"cannot write the {kind} result to {path}: {exc.strerror or exc}")
            return USAGE
        err.print(
            f"trainmedic: {kind} result written to {path}", markup=False, highlight=False, soft_wrap=True
        )
    if result.stopped_early and "Ctrl+C" in result.stopped_early:
        return INTERRUPTED
    # Nothing measured (every configuration failed, was skipped, or the budget ran out first):
    # there is no answer, and a caller must not read one.
    if not result.measured:
        why = result.stopped_early or "every configuration failed or was skipped"
        _error(err, f"no configuration was measured ({why}); there is no fastest one to report")
        return FAILED
    return DONE


def _search(options: TuneOptions, budget_s: float | None, started_at: float, bar: _ProgressBar):
    if options.script is not None:
        if options.spec is not None:
            raise TuneError(f"give a build function ({options.spec}) or --script {options.script}, not both.")
        from trainmedic.tune.script_search import tune_script

        return tune_script(
            options.script,
            list(options.script_args),
            list(options.sets),
            steps=options.steps or SCRIPT_STEPS,
            trials=options.trials,
            budget_s=budget_s,
            started_at=started_at,
            callbacks=bar.callbacks(),
        )
    if options.sets:
        raise TuneError(
            "--set overrides a script's options; use it with --script train.py (a build function is tuned by --batch, --precision, ...)."
        )
    if not options.spec:
        raise TuneError(
            "give a build function to tune (trainmedic tune model.py:build) or a script (trainmedic tune --script train.py --set batch_size=2,4)."
        )
    from trainmedic.plan.spec import load_build_for
    from trainmedic.tune import tune

    build = load_build_for("tune", options.spec, options.script_args)
    return tune(
        build,
        target=options.spec,
        device=options.device,
        batch_sizes=_ints(options.batches, "--batch") if options.batches else None,
        precisions=_words(options.precisions) if options.precisions else None,
        compile=_switch(options.compile),
        memory_formats=_words(options.memory_formats) if options.memory_formats else None,
        budget_s=budget_s,
        trials=options.trials,
        current_batch=options.current,
        exhaustive=options.exhaustive,
        headroom=options.headroom,
        capacity=options.capacity,
        callbacks=bar.callbacks(),
        started_at=started_at,
    )


def _check_flags(options: TuneOptions) -> None:
    """Flags that mean nothing for the chosen target are refused, not silently dropped."""
    if options.script is not None:
        build_only = [
            ("--batch", options.batches is not None),
            ("--precision", options.precisions is not None),
            ("--compile", options.compile != "auto"),
            ("--memory-format", options.memory_formats is not None),
            ("--current", options.current is not None),
            ("--exhaustive", options.exhaustive),
            ("--capacity", options.capacity is not None),
            ("--device", options.device != "auto"),
        ]
        given = [flag for flag, on in build_only if on]
        if given:
            raise TuneError(
                f"{', '.join(given)} tune a build function; a script is tuned over its own options: "
                f"--set batch_size=2,4,8 (the first value of each is your current one)."
            )
    elif options.steps is not None:
        raise TuneError(
            "--steps sets how many steps each run of a --script measures; a build function is timed in trials (--trials)."
        )


def _budget(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise TuneError(f"--budget {text}: {exc}") from exc
    if seconds <= 0:
        raise TuneError(f"--budget {text} leaves no time to measure; give a duration such as 5m.")
    return seconds


def _process_started() -> float:
    """This process's start as a ``time.monotonic()`` reading: ``--budget`` is the wall time the
    user waits for, and importing torch and loading the target (2-4 s) are part of it."""
    import psutil

    try:
        age = time.time() - psutil.Process().create_time()
    except (psutil.Error, OSError):
        age = 0.0
    # Older (or a wall-clock step): a host process that calls the CLI, whose past is not ours.
    return time.monotonic() - (age if 0.0 <= age <= STARTUP_S else 0.0)


def _ints(text: str, flag: str) -> list[int]:
    values = []
    for word in _words(text):
        if not word.isdigit() or int(word) < 1:
            raise TuneError(f"{flag} {text}: {word!r} is not a whole number >= 1; e.g. {flag} 1,2,4,8.")
        values.append(int(word))
    return values


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def _switch(text: str) -> tuple[bool, ...]:
    if text.lower() not in _SWITCH:
        raise TuneError(f"--compile {text} is not one of auto, on, off, both.")
    return _SWITCH[text.lower()]


def _error(err: Console, message: str) -> None:
    err.print(
        f"trainmedic tune: error: {message}", style="red", markup=False, highlight=False, soft_wrap=True
    )


class _ProgressBar:
    """Configurations measured so far and the best yet; against the budget when there is one."""

    def __init__(self, console: Console, budget_s: float | None, started_at: float | None = None) -> None:
        self.budget_s = budget_s
        self.started = time.monotonic() if started_at is None else started_at
        columns: list[ProgressColumn] = [TextColumn("{task.description}")]
        if budget_s is not None:
            columns.append(BarColumn())
        columns += [TimeElapsedColumn(), TextColumn("{task.fields[best]}")]
        self.progress = Progress(*columns, console=console, transient=True)
        self.task = self.progress.add_task("tune: planning memory", total=budget_s, best="")
        self.count = 0

    def __enter__(self) -> _ProgressBar:  # noqa: PYI034 - a private class, never subclassed
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def callbacks(self):
        from trainmedic.tune.search import Callbacks

        return Callbacks(started=self._started, finished=self._finished)

    def _started(self, config) -> None:
        self.progress.update(
            self.task, description=f"tune: measuring {config.label}", completed=self._elapsed()
        )

    def _finished(self, row, result) -> None:
        self.count += 1
        best = max(result.measured, key=lambda r: r.samples_per_s or 0.0, default=None)
        if best is None:
            text = f"({self.count} done)"
        else:
            text = f"best so far: {best.config.label} {format_sig3(best.samples_per_s)} {result.unit} ({self.count} done)"
        self.progress.update(self.task, best=text, completed=self._elapsed())

    def _elapsed(self) -> float:
        elapsed = time.monotonic() - self.started
        return min(elapsed, self.budget_s) if self.budget_s else elapsed
