"""``trainmedic run``: watch a script, print the report, write files, exit with the script's code."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from rich.console import Console

from trainmedic.cli import run_ranks
from trainmedic.cli.output import USAGE, output_problem
from trainmedic.cli.run_options import RunOptions
from trainmedic.errors import ScriptError
from trainmedic.run.diagnose import confirmed, diagnose
from trainmedic.run.diagnose.counterfactual import confirmer
from trainmedic.run.probe import runner
from trainmedic.run.probe.confirm import Confirmation
from trainmedic.run.probe.ranks import RankIdentity
from trainmedic.run.probe.runner import StopSignals, Terminated
from trainmedic.run.probe.session import Measurements, WatchSession
from trainmedic.run.report.console import render_console
from trainmedic.run.report.html import write_html
from trainmedic.run.report.model import Report


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

    show = partial(
        emit, json_path=options.json_path, html_path=options.html_path, quiet=options.quiet, console=console
    )
    if options.nproc is not None:
        return run_ranks.launch(options, show)
    identity = RankIdentity.from_env()  # a torchrun rank: its part, then one merged report
    if identity is None:
        with StopSignals() as signals:  # Ctrl+C and SIGTERM cut the run short; the report is still written
            report, _ = _watch(options, signals)
            show(report)
            return report.exit_code
    folder = run_ranks.start_rank(identity)
    with run_ranks.RankSignals() as signals:
        report, measurements = _watch(options, signals)
        return run_ranks.finish_rank(identity, folder, report, measurements, show, signals.script_ended_at)


def _watch(options: RunOptions, signals: StopSignals) -> tuple[Report, Measurements]:
    """Run the script under a watch session and diagnose it."""
    command = (["-m", options.target] if options.module else [options.target]) + options.args
    confirm = None
    if options.confirm:
        confirm = confirmer(command) if RankIdentity.from_env() is None else across_ranks
    session = WatchSession(
        warmup=options.warmup,
        max_steps=options.steps,
        interval=options.interval_s,
        find_loops=True,
        confirm=confirm,
    )
    session.start()
    try:
        with signals.script():
            outcome = runner.run(options.target, options.args, module=options.module)
    # A signal in the instant between the script's end and the handlers' switch, or one noted
    # before the script began.
    except KeyboardInterrupt:
        outcome = runner.interrupted()
    except Terminated as stop:
        outcome = runner.interrupted(stop)
    finally:
        measurements = session.stop()
    outcome = confirmed.settle(outcome, measurements, cut_short=session.confirmation_cut_short)
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    report = diagnose(measurements, command, outcome)
    sys.stdout.flush()
    return report, measurements


def across_ranks(m: Measurements) -> Confirmation:
    """Under torchrun: no confirmation, and the report says why."""
    return Confirmation(
        category="",
        where=None,
        problem="the ranks of a torchrun job would all have to switch between the arms at the same step, "
        "which this version does not do, so each rank keeps its estimate",
    )


def emit(
    report: Report, json_path: Path | None, html_path: Path | None, quiet: bool, console: Console
) -> None:
    # Files first: a report that fails to render, or a terminal that goes away while it prints,
    # must not take the measured report with it.
    said: list[tuple[str, str | None]] = []  # (line, style)
    writers: dict[str, tuple[Path | None, Callable[[Path], object]]] = {
        "JSON": (json_path, report.write_json),
        "HTML": (html_path, partial(write_html, report)),
    }
    for kind, (path, write) in writers.items():
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:  # checked before the run; a full disk can still refuse it
            said.append(
                (f"trainmedic: error: cannot write the {kind} report to {path}: {exc.strerror or exc}", "red")
            )
        else:
            said.append((f"trainmedic: {kind} report written to {path}", None))
    if not quiet:
        console.print()
        render_console(report, console)
    for line, style in said:
        console.print(line, style=style, markup=False)
