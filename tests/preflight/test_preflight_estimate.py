"""The plan on the target GPU and the session arithmetic: what a full run needs before it starts."""

from __future__ import annotations

import json
import sys

import pytest

from trainmedic.errors import PlanError
from trainmedic.preflight.declarations import Experiment
from trainmedic.preflight.estimate import cpu_step_time, format_budget, session_estimate
from trainmedic.preflight.events import read_events
from trainmedic.preflight.memory_plan import plan_check
from trainmedic.units import format_duration

HOUR = 3600.0


def experiment(**fields) -> Experiment:
    fields.setdefault("budget", 120.0)
    return Experiment(name="mnist", command="python train.py", **fields)


# -- session ----------------------------------------------------------------------------------


def test_fits_a_session_at_the_declared_speed():
    estimate = session_estimate(experiment(steps=40000, step_time=0.62), 9 * HOUR, cpu_step=0.001)
    assert (
        estimate.speed_source,
        estimate.total_seconds,
        estimate.fits,
        estimate.sessions,
        estimate.deadline,
    ) == ("target", 24800.0, True, 1, None)
    assert estimate.message == (
        "full run: 40000 steps x 620.0 ms per step (step_time, measured on the target) = 6h53m: fits a 9h session"
    )


def test_needs_two_sessions_and_the_deadline_to_pass():
    estimate = session_estimate(experiment(steps=40000, step_time=0.9), 9 * HOUR, None)
    assert (estimate.fits, estimate.sessions, estimate.deadline) == (False, 2, 8.75 * HOUR)
    assert estimate.message == (
        "full run: 40000 steps x 900.0 ms per step (step_time, measured on the target) = 10h: needs 2 sessions of 9h: "
        "pass deadline='8h45m' to checkpoint.Checkpointer and resume in the next session"
    )


def test_close_to_the_limit_does_not_fit_the_margin_for_the_last_save():
    # 8h50m of steps in a 9h session leaves 10 minutes: less than the 15 kept for the last save.
    estimate = session_estimate(experiment(steps=530, step_time=60.0), 9 * HOUR, None)
    assert (estimate.fits, estimate.sessions) == (False, 2)
    # A short session keeps a tenth of itself, not 15 minutes.
    assert "deadline='54m00s'" in session_estimate(experiment(steps=100, step_time=60.0), HOUR, None).message


def test_without_a_declared_speed_the_cpu_speed_is_used_and_said_to_be_that():
    estimate = session_estimate(experiment(steps=1000), 9 * HOUR, cpu_step=0.05)
    assert (estimate.speed_source, estimate.total_seconds, estimate.fits) == ("cpu", 50.0, True)
    assert estimate.message == (
        "full run: 1000 steps x 50.0 ms per step (the CPU speed of this tiny run, not the target GPU's: declare "
        "step_time measured there) = 50.00 s: fits a 9h session"
    )


def test_no_speed_no_limit_no_steps():
    assert "no speed to estimate it with" in session_estimate(experiment(steps=1000), 9 * HOUR, None).message
    assert session_estimate(experiment(steps=10, step_time=1.0), None, None).message == (
        "full run: 10 steps x 1.00 s per step (step_time, measured on the target) = 10.00 s"
    )
    assert session_estimate(experiment(), 9 * HOUR, 0.1) is None


def test_spans_and_budgets():
    assert [format_duration(s) for s in (9 * HOUR, 8.75 * HOUR, 725.0, 42.0)] == [
        "9h",
        "8h45m",
        "12m05s",
        "42.00 s",
    ]
    assert [format_budget(s) for s in (20.0, 120.0, 90.0, 1.5, 5400.0)] == [
        "20s",
        "2m",
        "1m30s",
        "1.50 s",
        "1h30m",
    ]


# -- the measured CPU speed -------------------------------------------------------------------


def test_cpu_step_time_is_the_median_step_without_warmup_and_saves(tmp_path):
    timeline = tmp_path / "steps.txt"
    lines = ["step 1 10.000", "step 1 13.000"]  # the first interval is warm-up: dropped
    # Every step takes 150 ms, 50 ms of which is the preflight-mode save the full run would skip.
    lines += [f"step 1 {13.0 + 0.15 * i:.3f}" for i in range(1, 8)]
    lines += ["step 2 11.0", "step 2 12.0"]  # a second optimizer that stepped less
    timeline.write_text("\n".join(lines) + "\nstep 1 garbage\n")
    events = tmp_path / "events.jsonl"
    saves = [
        {"event": "save", "step": i, "started": 13.0 + 0.15 * i + 0.05, "ended": 13.0 + 0.15 * i + 0.10}
        for i in range(7)
    ]
    events.write_text("\n".join(json.dumps(e) for e in saves) + "\n{broken\n")
    assert cpu_step_time(timeline, read_events(events).saves) == pytest.approx(0.1)
    assert cpu_step_time(timeline) == pytest.approx(0.15)


def test_cpu_step_time_needs_three_steps(tmp_path):
    timeline = tmp_path / "steps.txt"
    assert cpu_step_time(timeline) is None  # no file: no torch, no optimizer
    timeline.write_text("step 1 1.0\nstep 1 2.0\n")
    assert cpu_step_time(timeline) is None


# -- the plan ---------------------------------------------------------------------------------

BUILD = """
import torch


def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    return dict(model=model, inputs=torch.randn(batch_size, 256), optimizer=lambda p: torch.optim.Adam(p))


def broken(batch_size):
    raise ValueError("no data folder configured")
"""


@pytest.mark.slow
def test_plan_fits_and_does_not_fit_on_the_target(project):
    # The build module runs in a process of its own that sees only its file in sys.argv.
    project.write("model.py", "import sys\n\nassert sys.argv == [__file__], sys.argv\n" + BUILD)
    small = plan_check(experiment(plan="model.py:build", batch=32), "t4", project.root)
    assert (small.fits, small.error, small.device, small.batch) == (True, None, "t4", 32)
    assert 0 < small.peak_bytes < small.needed_bytes < small.capacity_bytes
    huge = plan_check(experiment(plan="model.py:build", batch=20_000_000), "t4", project.root)
    assert (huge.fits, huge.error) == (False, None)
    assert huge.needed_bytes > huge.capacity_bytes


@pytest.mark.slow
def test_plan_from_a_module_of_the_project(project):
    project.write("pkg/__init__.py", "")
    project.write("pkg/nets.py", BUILD)
    check = plan_check(experiment(plan="pkg.nets:build", batch=8), "rtx3090", project.root)
    assert (check.fits, check.error) == (True, None)
    assert str(project.root) not in sys.path


@pytest.mark.slow
def test_plan_problems_are_reported_not_raised(project):
    project.write("model.py", BUILD)
    assert plan_check(experiment(), "t4", project.root) is None
    no_device = plan_check(experiment(plan="model.py:build", batch=8), None, project.root)
    assert no_device.error.startswith(
        'no target GPU to plan for: set device = "t4" under [tool.trainmedic.preflight]'
    )
    broken = plan_check(experiment(plan="model.py:broken", batch=8), "t4", project.root)
    assert "raised ValueError: no data folder configured" in broken.error and broken.fits is None
    # The experiment's env reaches the plan's process: here a PYTHONPATH where torch cannot be imported.
    project.write("notorch/torch.py", "raise ImportError(\"No module named 'torch'\")\n")
    missing = plan_check(
        experiment(plan="model.py:build", batch=8, env={"PYTHONPATH": "notorch"}), "t4", project.root
    )
    assert "pip install 'trainmedic[torch]'" in missing.error


# The build module's own module-level code runs in the plan's child process, never in trainmedic's.


@pytest.mark.slow
def test_an_exit_in_the_build_module_is_the_plans_error_with_the_users_line(project):
    project.write(
        "model.py",
        """
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--data", required=True)
        args = parser.parse_args()
        """,
    )
    check = plan_check(experiment(plan="model.py:build", batch=8), "t4", project.root)
    assert check.fits is None
    assert check.error == (
        "importing model.py exited with code 2 at model.py:5 (args = parser.parse_args()); its last output: "
        "model.py: error: the following arguments are required: --data"
    )


@pytest.mark.slow
def test_an_exit_in_build_names_the_function_also_when_the_spec_names_none(project):
    # "m2.py" alone means m2.py:build: the plan's child reads the spec as load_build does.
    project.write("m2.py", "import sys\n\n\ndef build(batch_size):\n    sys.exit(3)\n")
    for spec in ("m2.py", "m2.py:build"):
        check = plan_check(experiment(plan=spec, batch=8), "t4", project.root)
        assert check.error.startswith("build(8) exited with code 3 at m2.py:5 (sys.exit(3))"), check.error


def test_split_spec_is_the_one_reading_of_a_spec():
    from trainmedic.plan.spec import split_spec  # the plan package imports torch: not at collection

    assert split_spec("model.py:build") == ("model.py", "build", True)
    assert split_spec("model.py") == split_spec("model.py:") == ("model.py", "build", True)
    assert split_spec("pkg.nets:make") == ("pkg.nets", "make", False)
    assert split_spec("pkg.nets") == ("pkg.nets", "build", False)
    assert split_spec("sub/model:make") == ("sub/model", "make", True)
    assert split_spec("C:\\proj\\model.py") == ("C:\\proj\\model.py", "build", True)
    assert split_spec("C:\\proj\\model.py:make") == ("C:\\proj\\model.py", "make", True)
    with pytest.raises(PlanError, match="model.py:build"):
        split_spec(" ")


@pytest.mark.slow
def test_a_hang_or_a_hard_exit_in_the_build_module_is_the_plans_error(project):
    project.write("hang.py", "import time\n\nwhile True:\n    time.sleep(0.01)\n")
    # The child imports torch (about 1.5 s, more on a loaded machine) before it reaches hang.py:
    # the budget leaves room for that, or the dump would show the import, not the user's loop.
    hang = plan_check(experiment(plan="hang.py:build", batch=8, budget=10.0), "t4", project.root)
    assert hang.error == "the plan was still running after its 10s budget at hang.py:4 (time.sleep(0.01))"
    project.write("gone.py", "import os\n\nos._exit(7)\n")
    gone = plan_check(experiment(plan="gone.py:build", batch=8), "t4", project.root)
    assert gone.error == "the plan's process ended before planning: exit code 7"


@pytest.mark.slow
def test_a_plan_stuck_outside_the_projects_code_names_no_library_line(project, tmp_path_factory):
    # torch's import hangs (here a stand-in outside the project): none of the project's frames is
    # on the stack, and the library line the dump ends in is not where the user's code hung.
    slow = tmp_path_factory.mktemp("slowtorch")
    (slow / "torch.py").write_text("import time\n\nwhile True:\n    time.sleep(0.01)\n")
    project.write("model.py", BUILD)
    check = plan_check(
        experiment(plan="model.py:build", batch=8, budget=2.0, env={"PYTHONPATH": str(slow)}),
        "t4",
        project.root,
    )
    assert check.error == (
        "the plan was still running after its 2s budget, outside the project's code (in trainmedic or a library, "
        "e.g. still importing torch); if it only needs more time, raise the experiment's budget"
    )
    assert "torch.py" not in check.error
