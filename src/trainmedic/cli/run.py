"""``trainmedic run``: watch a script, print the report, write files, exit with the script's code."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.console import Console

from trainmedic.cli import run_ranks
from trainmedic.cli.output import USAGE, output_problem
from trainmedic.diagnose import diagnose
from trainmedic.errors import ScriptError
from trainmedic.probe import runner
from trainmedic.probe.ranks import RankIdentity
from trainmedic.probe.runner import Terminated
from trainmedic.probe.session import Measurements, WatchSession
from trainmedic.report.console import render_console
from trainmedic.report.html import write_html
from trainmedic.report.model import Report


@dataclass(frozen=True)
class RunOptions:
    target: str
    args: list[str]
    module: bool
    steps: int | None
    json_path: Path | None
    html_path: Path | None
    warmup: int
    interval_s: float
    quiet: bool
    #: Run on this many local torchrun ranks and merge their reports (``--nproc``).
    nproc: int | None = None


def run_target(options: RunOptions, console: Console) -> int:
    """Run, report, and return the exit code the CLI should exit with."""
    try:
        if options.module:
            runner.check_module(options.target)
        else:
            runner.check_script(options.target)
    except ScriptError as exc:
        console.print(f"trainmedic: error: {exc}", style="red", markup=False)
        return exc.exit_code
    problem = output_problem([("--json", options.json_path), ("--html", options.html_path)])
    if problem:  # found now, not after the whole run
        console.print(f"trainmedic: error: {problem}", style="red", markup=False)
        return USAGE

    show = partial(emit, json_path=options.json_path, html_path=options.html_path, quiet=options.quiet, console=console)
    if options.nproc is not None:
        return run_ranks.launch(options, show)
    identity = RankIdentity.from_env()  # a torchrun rank: its part, then one merged report
    if identity is None:
        report, _ = _watch(options)
        show(report)
        return report.exit_code
    folder = run_ranks.start_rank(identity)
    with run_ranks.RankSignals() as signals:
        report, measurements = _watch(options, signals)
        return run_ranks.finish_rank(identity, folder, report, measurements, show, signals.script_ended_at)


def _watch(options: RunOptions, signals: run_ranks.RankSignals | None = None) -> tuple[Report, Measurements]:
    """Run the script under a watch session and diagnose it."""
    command = (["-m", options.target] if options.module else [options.target]) + options.args
    session = WatchSession(warmup=options.warmup, max_steps=options.steps, interval=options.interval_s)
    session.start()
    try:
        with signals.script() if signals is not None else contextlib.nullcontext():
            outcome = runner.run(options.target, options.args, module=options.module)
    except Terminated:  # SIGTERM in the instant between the script's end and the handler's switch
        outcome = runner.RunOutcome(143, "interrupted", "stopped by SIGTERM")
    finally:
        measurements = session.stop()
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    report = diagnose(measurements, command, outcome)
    sys.stdout.flush()
    return report, measurements


def emit(report: Report, json_path: Path | None, html_path: Path | None, quiet: bool, console: Console) -> None:
    if not quiet:
        console.print()
        render_console(report, console)
    writers = {"JSON": (json_path, report.write_json), "HTML": (html_path, partial(write_html, report))}
    for kind, (path, write) in writers.items():
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:  # checked before the run; a full disk can still refuse it
            console.print(f"trainmedic: error: cannot write the {kind} report to {path}: {exc.strerror or exc}",
                          style="red", markup=False)
        else:
            console.print(f"trainmedic: {kind} report written to {path}", markup=False)
