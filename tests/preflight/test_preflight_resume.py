"""save -> SIGKILL -> resume on real Checkpointer scripts: identical, diverged, not restored, failed."""

from __future__ import annotations

import json
import sys

import pytest

from trainmedic.preflight.child import EVENTS, child_env
from trainmedic.preflight.process import run_child

#: A correct torch loop: model, Adam, a scheduler, dropout and random batches (torch's global RNG,
#: which the Checkpointer captures with every save).
TORCH_LOOP = """
import torch
from trainmedic.checkpoint import Checkpointer

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
ckpt = Checkpointer("runs/toy", keep_last=2)
start = ckpt.restore(model=model, optimizer=opt, scheduler=sched)
for step in range(start, 10):
    loss = model(torch.randn(64, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    ckpt.save(step + 1, model=model, optimizer=opt, scheduler=sched)
"""

#: Pure-Python loops (no torch import: fast). {draw} is the bug under test, or the correct draw.
PY_LOOP = """
import random
from trainmedic.checkpoint import Checkpointer

random.seed(0)
noise = random.Random(1)
state = {{"w": 0.0}}
counter = [0]


def decay():
    counter[0] += 1
    return 1.0 / counter[0]


ckpt = Checkpointer("runs/py")
start = ckpt.restore(state=state{restore_extra})
for step in range(start, {total}):
    state["w"] += {draw}
    ckpt.save(step + 1, state=state{save_extra})
"""


def py_loop(draw: str = "random.random()", total: int = 8, extra: str = "") -> str:
    restore_extra = save_extra = f", {extra}={extra}" if extra else ""
    return PY_LOOP.format(draw=draw, total=total, restore_extra=restore_extra, save_extra=save_extra)


def run_one(project, script: str, **overrides):
    project.write("train.py", script)
    (result,) = project.run(commands=("python train.py",), **overrides).experiments
    return result


BUILD = """
import torch


def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
    return dict(model=model, inputs=torch.randn(batch_size, 16), optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
"""


@pytest.mark.slow
def test_a_correct_torch_loop_resumes_identically_and_its_cpu_speed_is_measured(project):
    project.write("train.py", TORCH_LOOP)
    project.write("model.py", BUILD)
    project.pyproject(
        """
        [tool.trainmedic.preflight]
        device = "t4"
        session_limit = "9h"

        [tool.trainmedic.preflight.experiments]
        toy = { command = "python train.py", steps = 1000, plan = "model.py:build", batch = 64 }
        """
    )
    (result,) = project.run().experiments
    assert (result.plan.fits, result.plan.device, result.plan.batch, result.plan.error) == (
        True,
        "t4",
        64,
        None,
    )
    assert (result.verdict, result.uses_checkpointer) == ("passed", True)
    resume = result.resume
    assert (resume.status, resume.killed_after_step, resume.restored_step) == ("identical", 5, 5)
    assert resume.compared_steps == [6, 7, 8, 9, 10]
    assert (
        resume.message
        == "resume identical from step 5 (killed after the save of step 5; 5 later saves compared)"
    )
    assert 0 < result.cpu_step_time < 1.0
    session = result.session
    assert (session.speed_source, session.fits, session.sessions) == ("cpu", True, 1)
    assert (
        "(the CPU speed of this tiny run, not the target GPU's: declare step_time measured there)"
        in session.message
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "draw, extra",
    [
        ("noise.random()", ""),  # an RNG instance the script never hands to the Checkpointer
        ("decay()", ""),  # a counter the script never hands to the Checkpointer
    ],
)
def test_state_that_is_not_checkpointed_diverges(project, draw, extra):
    result = run_one(project, py_loop(draw, extra=extra))
    assert result.verdict == "resume_diverged"
    resume = result.resume
    assert (resume.status, resume.killed_after_step, resume.restored_step) == ("diverged", 4, 4)
    assert (resume.diverged_step, resume.objects) == (5, ["state"])
    assert resume.message.startswith("diverged at step 5 in object 'state': after resuming from step 4")


@pytest.mark.slow
def test_the_same_loop_with_its_counter_checkpointed_is_identical(project):
    result = run_one(project, py_loop("decay()", extra="counter"))
    assert (result.verdict, result.resume.status, result.resume.compared_steps) == (
        "passed",
        "identical",
        [5, 6, 7, 8],
    )


@pytest.mark.slow
def test_a_script_that_never_restores(project):
    script = py_loop().replace("start = ckpt.restore(state=state)", "start = 0")
    result = run_one(project, script)
    assert (result.verdict, result.resume.status) == ("resume_failed", "not_restored")
    assert result.resume.message.startswith(
        "the second run never called restore(), although run B was killed after saving step 4"
    )


@pytest.mark.slow
def test_a_checkpoint_directory_that_changes_every_run_restores_nothing(project):
    script = py_loop().replace(
        'Checkpointer("runs/py")', "Checkpointer(f\"runs/{__import__('os').getpid()}\")"
    )
    result = run_one(project, script)
    assert (result.verdict, result.resume.status, result.resume.restored_step) == (
        "resume_failed",
        "not_restored",
        0,
    )
    assert (
        result.resume.message
        == "restore() resumed nothing (step 0), but step 4 had been saved before the kill"
    )


@pytest.mark.slow
def test_a_resume_path_that_crashes_is_reported_at_the_users_line(project):
    script = (
        py_loop()
        .replace(
            "start = ckpt.restore(state=state)\n",
            "start = ckpt.restore(state=state)\nif start == 0:\n    seen = []\n",
        )
        .replace(
            '    state["w"] += random.random()\n',
            '    seen.append(step)\n    state["w"] += random.random()\n',
        )
    )
    result = run_one(project, script)
    assert (result.verdict, result.resume.status) == ("resume_failed", "resume_failed")
    assert result.resume.message == "the resumed run failed: NameError: name 'seen' is not defined"
    assert (result.resume.where.frame.source, result.resume.where.frame.function) == (
        "seen.append(step)",
        "<module>",
    )


def test_a_nondeterministic_run_is_said_to_be_uncheckable(project):
    result = run_one(project, py_loop().replace("random.seed(0)", "random.seed()"))
    assert (result.verdict, result.resume.status, result.resume.diverged_step) == (
        "passed",
        "nondeterministic",
        1,
    )
    assert result.resume.message.startswith(
        "not checked: two fresh runs already differ at step 1 in object 'state', before any kill"
    )


def test_one_save_is_not_enough(project):
    result = run_one(project, py_loop(total=1))
    assert (result.verdict, result.resume.status) == ("passed", "inconclusive")
    assert result.resume.message.startswith("not checked: the run saved only step 1; it needs two saves")


def test_resume_check_off_and_not_run_after_a_failure(project):
    result = run_one(project, py_loop(), resume_check=False)
    assert (result.resume, result.resume_note) == (
        None,
        "resume check off (resume_check = false or --no-resume-check)",
    )
    result = run_one(project, py_loop() + "raise SystemExit('boom')\n")
    assert (result.verdict, result.resume, result.resume_note) == (
        "failed",
        None,
        "resume check not run: the run itself did not pass",
    )


def test_run_b_is_frozen_right_after_the_save_it_waits_for_and_killed(project, tmp_path):
    project.write("train.py", py_loop(total=50))
    directory = tmp_path / "b"
    outcome = run_child(
        [sys.executable, "train.py"],
        project.root,
        child_env(directory, project.root, {}, hold_at=7),
        directory,
        30,
        kill_after_save=7,
    )
    assert (outcome.killed_after_save, outcome.returncode, outcome.stuck) == (7, None, False)
    saves = [
        e["step"]
        for e in map(json.loads, (directory / EVENTS).read_text().splitlines())
        if e["event"] == "save"
    ]
    assert saves == [1, 2, 3, 4, 5, 6, 7]  # nothing after the kill point: the kill lands exactly there
