"""The memory plan of an experiment's build function on the target GPU, made in a child process.

Importing the build module runs the user's module-level code (an argparse, a ``sys.exit``, a
download that hangs): in trainmedic's own process that could exit or freeze the whole preflight.
``plan_child`` does it in a child with the experiment's budget and environment instead; a hang,
an exit or a crash there is this experiment's plan error, with the user's line where one is known.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from trainmedic._os import read_json
from trainmedic.preflight import child
from trainmedic.preflight.declarations import Experiment
from trainmedic.preflight.estimate import format_budget
from trainmedic.preflight.failures import describe_failure, last_line, stuck_frames
from trainmedic.preflight.frames import Frame, Where, innermost_user, stuck_where, with_source
from trainmedic.preflight.model import PlanCheck
from trainmedic.preflight.process import RunOutcome, run_child
from trainmedic.userfiles import UserFiles, shown_path

RESULT = "plan.json"


def plan_check(
    experiment: Experiment, device: str | None, root: Path, workdir: Path | None = None
) -> PlanCheck | None:
    """The plan of ``experiment.plan`` at its batch on ``device``, or why there is none.

    ``workdir``: a fresh folder for the child's files (default: a temporary one, removed after).
    """
    if experiment.plan is None:
        return None
    check = PlanCheck(experiment.plan, device or "", experiment.batch, experiment.precision)
    if device is None:
        check.error = 'no target GPU to plan for: set device = "t4" under [tool.trainmedic.preflight] or pass --device t4'
        return check
    if workdir is not None:
        return _run(check, experiment, root, workdir)
    scratch = Path(tempfile.mkdtemp(prefix="trainmedic-preflight-plan-"))
    try:
        return _run(check, experiment, root, scratch / "plan")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(check: PlanCheck, experiment: Experiment, root: Path, workdir: Path) -> PlanCheck:
    argv = [
        sys.executable,
        "-m",
        "trainmedic.preflight.plan_child",
        experiment.plan or "",
        str(experiment.batch),
        check.device,
        experiment.precision,
        str(workdir / RESULT),
    ]
    env = child.child_env(workdir, root, experiment.env)
    run = run_child(argv, root, env, workdir, experiment.budget)
    result = read_json(workdir / RESULT)
    plan = result.get("plan") if result else None
    if isinstance(plan, dict):
        check.fits = bool(plan["fits"])
        check.peak_bytes = int(plan["peak_bytes"])
        check.needed_bytes = int(plan["needed_bytes"])
        check.capacity_bytes = int(plan["capacity_bytes"])
        check.exact = bool(plan.get("exact", True))
        return check
    check.error = _error(run, result, root, experiment.budget)
    return check


def _error(run: RunOutcome, result: dict | None, root: Path, budget: float) -> str:
    user = UserFiles([root])
    if result is not None and isinstance(result.get("error"), str):
        frame = result.get("frame") or {}
        where = None
        if isinstance(frame.get("path"), str) and isinstance(frame.get("line"), int):
            where = Where(with_source(Frame(frame["path"], frame["line"], "")))
        said = last_line(run.stderr)
        tail = f"; its last output: {said}" if said and " exited with code " in result["error"] else ""
        return result["error"] + _at(where, root) + tail
    if run.stuck:
        head = f"the plan was still running after its {format_budget(budget)} budget"
        frames = stuck_frames(run, user)
        frame = innermost_user(frames, user)
        if frame is not None:
            return head + _at(stuck_where(frame), root)
        if frames:
            # None of the project's frames on the stack: the plan's own work (importing torch,
            # tracing the step). Naming that library line would pass it off as the user's hang.
            return (
                f"{head}, outside the project's code (in trainmedic or a library, e.g. still importing torch); "
                "if it only needs more time, raise the experiment's budget"
            )
        return head
    error, where = describe_failure(run, user, root)
    return f"the plan's process ended before planning: {error}{_at(where, root)}"


def _at(where: Where | None, root: Path) -> str:
    if where is None:
        return ""
    frame = where.frame
    source = f" ({frame.source})" if frame.source else ""
    return f" at {shown_path(frame.path, root)}:{frame.line}{source}"
