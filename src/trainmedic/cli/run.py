"""``trainmedic run``: watch a script, print the report, write files, exit with the script's code."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.console import Console

from trainmedic.cli.output import USAGE, output_problem
from trainmedic.diagnose import diagnose
from trainmedic.errors import ScriptError
from trainmedic.probe import runner
from trainmedic.probe.session import WatchSession
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

    command = (["-m", options.target] if options.module else [options.target]) + options.args
    session = WatchSession(warmup=options.warmup, max_steps=options.steps, interval=options.interval_s)
    session.start()
    try:
        outcome = runner.run(options.target, options.args, module=options.module)
    finally:
        measurements = session.stop()
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    report = diagnose(measurements, command, outcome)
    sys.stdout.flush()
    emit(report, options.json_path, options.html_path, options.quiet, console)
    return outcome.exit_code


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
