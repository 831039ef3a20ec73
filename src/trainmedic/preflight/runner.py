"""Run every experiment tiny on the CPU and judge it: passed, failed (where), stuck (where, why).

Experiments run one after another, never in parallel: the measured CPU speed must not be shared
with another run, and a stuck one must not steal another's budget.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainmedic._os import read_json
from trainmedic.preflight import child
from trainmedic.preflight.declarations import Experiment, Settings
from trainmedic.preflight.estimate import cpu_step_time, format_budget, optimizer_steps, session_estimate
from trainmedic.preflight.events import read_events
from trainmedic.preflight.failures import describe_failure, read_text, stuck_at
from trainmedic.preflight.frames import Where
from trainmedic.preflight.memory_plan import plan_check
from trainmedic.preflight.model import ConfigIssue, ExperimentResult, PreflightReport
from trainmedic.preflight.process import RunOutcome, run_child
from trainmedic.preflight.resume import check_resume
from trainmedic.userfiles import UserFiles

#: progress(experiment name, what is happening now): the CLI shows it on stderr.
Progress = Callable[[str, str], None]


def run_preflight(settings: Settings, progress: Progress | None = None) -> PreflightReport:
    say: Progress = progress or (lambda name, text: None)
    workdir = Path(tempfile.mkdtemp(prefix="trainmedic-preflight-"))
    try:
        results = [
            _run_experiment(e, settings, workdir / f"{i:02d}", functools.partial(say, e.name))
            for i, e in enumerate(settings.experiments)
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    notes = []
    if settings.session_limit is not None and all(e.steps is None for e in settings.experiments):
        notes.append(
            "session_limit is set, but no experiment declares its full run's steps (steps = 40000, with step_time "
            "measured on the target): nothing to estimate"
        )
    return PreflightReport(
        settings.root,
        settings.pyproject,
        settings.device,
        settings.session_limit,
        settings.resume_check,
        results,
        notes,
    )


def _run_experiment(
    experiment: Experiment, settings: Settings, workdir: Path, say: Callable[[str], None]
) -> ExperimentResult:
    cwd = experiment.cwd or settings.root
    user = UserFiles([settings.root, cwd])
    argv = child.child_argv(experiment.command)

    def env_for(directory: Path, hold_at: int | None = None):
        return child.child_env(directory, settings.root, experiment.env, hold_at)

    def describe(outcome: RunOutcome) -> tuple[str, Where | None]:
        return describe_failure(outcome, user, cwd)

    say(f"running (budget {format_budget(experiment.budget)})")
    run = run_child(argv, cwd, env_for(workdir / "run"), workdir / "run", experiment.budget)
    result = ExperimentResult(
        experiment.name,
        experiment.command,
        experiment.budget,
        "passed",
        run.seconds,
        run.returncode,
        stdout=run.stdout,
        stderr=run.stderr,
        from_command_line=experiment.from_command_line,
    )
    if run.stuck:
        result.status = "stuck"
        result.where = stuck_at(run, user, cwd, argv)
        if result.where is None:
            result.notes.append(
                "no stack dump came back: the process ignored SIGUSR2 or was stuck before Python started"
            )
    elif run.returncode != 0:
        result.status = "failed"
        result.error, result.where = describe(run)
    _configs(result, run, argv)
    _site_errors(result, run)
    events = read_events(run.file(child.EVENTS))
    result.cpu_step_time = cpu_step_time(run.file(child.TIMELINE), events.saves)
    result.optimizer_steps = optimizer_steps(run.file(child.TIMELINE))
    result.uses_checkpointer = events.uses_checkpointer
    if events.uses_checkpointer:
        if not settings.resume_check:
            result.resume_note = "resume check off (resume_check = false or --no-resume-check)"
        elif result.status != "passed":
            result.resume_note = "resume check not run: the run itself did not pass"
        else:
            result.resume = check_resume(
                events, argv, cwd, env_for, workdir, experiment.budget, describe, say
            )

    if experiment.plan is not None:
        say(f"planning {experiment.plan} at batch {experiment.batch}")
    result.plan = plan_check(experiment, settings.device, settings.root, workdir / "plan")
    result.session = session_estimate(experiment, settings.session_limit, result.cpu_step_time)
    return result


def _configs(result: ExperimentResult, run: RunOutcome, argv: list[str]) -> None:
    snapshot = read_json(run.file(child.CONFIGS))
    if snapshot is None:
        if result.status == "stuck":
            result.config_note = "no config snapshot: the process did not answer SIGUSR2 in time"
        return
    try:
        from trainmedic.preflight.config_analysis import analyse

        # A run that failed or was stopped never got to read the rest of its config: only a
        # finished run can say which keys were never read.
        findings = analyse(snapshot, argv[1:], complete=result.status == "passed")
    except Exception as exc:  # a tracker bug must not hide the run's own verdict
        result.config_note = f"config analysis failed: {type(exc).__name__}: {exc}"
        return
    result.configs = [
        ConfigIssue(f.kind, f.file, f.key, f.line, f.message, tuple(f.related)) for f in findings
    ]


def _site_errors(result: ExperimentResult, run: RunOutcome) -> None:
    for line in read_text(run.file(child.SITE_ERRORS)).splitlines():
        if line.strip():
            result.notes.append(f"instrumentation: {line.strip()}")
