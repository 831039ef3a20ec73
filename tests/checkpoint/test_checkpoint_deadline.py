"""The deadline: the last save is started early enough, from the measured save time, to finish
before it; the run then exits with 75 and says how to resume."""

from __future__ import annotations

import json

import pytest
from ckpt_kit import Child, checkpoints, manifest, step_of

DEADLINE_S = 3.0
STEP_S = 0.06


@pytest.mark.slow
def test_the_deadline_save_finishes_before_the_deadline_and_exits_75(tmp_path):
    directory = tmp_path / "ckpt"
    child = Child(
        "numpy_loop.py",
        [
            "--dir",
            directory,
            "--every",
            "10m",
            "--size-mb",
            60,
            "--total",
            10**6,
            "--step-seconds",
            STEP_S,
            "--deadline-in",
            DEADLINE_S,
        ],
        tmp_path,
        "deadline",
    )
    code = child.finish()
    assert code == 75, f"exit {code}, expected 75 (EX_TEMPFAIL) after the deadline save:\n{child.describe()}"
    deadline = float(child.find("deadline")[0][1])
    _, _, step, stopped_at = child.find("preempted")[0]
    step, stopped_at = int(step), float(stopped_at)

    newest = checkpoints(directory)[-1]
    assert step_of(newest) == step
    facts = manifest(newest)
    save_seconds = facts["save_seconds"]
    assert save_seconds > 0.02, f"the 60 MB state saved in {save_seconds} s: too fast to test the timing"
    # stopped_at is taken when save() has returned (Preempted raised): the save was over by then.
    assert stopped_at <= deadline, f"the deadline save ended {stopped_at - deadline:.3f} s after the deadline"
    # ... and not absurdly early: the run used its time, stopping within the last few save+step lengths.
    assert stopped_at >= deadline - 1.5 - 3 * (save_seconds + STEP_S), (
        f"stopped {deadline - stopped_at:.2f} s before the deadline"
    )
    # The schedule wrote only the first call; the deadline save raised Preempted (no "step" line).
    assert [int(p[1]) for p in child.find("step") if p[2] == "1"] == [1]
    assert int(child.find("step")[-1][1]) == step - 1

    message = json.loads(" ".join(child.find("message")[0][1:]))
    assert "deadline" in message and f"step {step}" in message and "resume" in message.lower(), message
    assert message in child.stderr, "the resume message is not on stderr (logger trainmedic.checkpoint)"
