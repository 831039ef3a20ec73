"""SIGTERM / SIGUSR1: the loop saves at its next save() call and exits with 128 + signum and a
message saying what was saved and how to resume; the resumed run continues from exactly there."""

from __future__ import annotations

import json
import pickle
import signal

import pytest
from ckpt_kit import Child, assert_same, checkpoints, manifest, run_child, step_of

TOTAL = 60


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_signal_saves_at_the_next_step_and_exits_with_a_resume_message(tmp_path, signum):
    directory = tmp_path / "ckpt"
    # every=1000: only the first call writes by schedule; the signal's save is the only other.
    common = ["--dir", directory, "--every", 1000, "--size-mb", 0.5, "--total", TOTAL]
    child = Child("numpy_loop.py", [*common, "--step-seconds", 0.01], tmp_path, "signalled")
    child.wait_for(lambda parts: parts[:2] == ["step", "5"], "step 5")
    code = child.kill(signum)
    assert code == 128 + signum, f"exit {code}, expected {128 + signum}:\n{child.describe()}"

    logged = [int(p[1]) for p in child.find("step")]
    saved = step_of(checkpoints(directory)[-1])
    assert saved == logged[-1] + 1, (
        f"saved step {saved}; the last save() call that returned was step {logged[-1]}"
    )
    assert [int(p[1]) for p in child.find("step") if p[2] == "1"] == [1], (
        "wrote other than the first and the signal save"
    )
    preempted = child.find("preempted")[0]
    assert preempted[1:3] == [str(128 + signum), str(saved)]
    message = json.loads(" ".join(child.find("message")[0][1:]))
    for text in (message, child.stderr):
        assert f"step {saved}" in text and signal.Signals(signum).name in text, text
        assert "resume" in text.lower() and str(checkpoints(directory)[-1]) in text, text
    assert "Traceback" not in child.stderr

    resumed = run_child("numpy_loop.py", [*common, "--out", tmp_path / "resumed.pkl"], tmp_path, "resumed")
    assert resumed.proc.returncode == 0, resumed.describe()
    assert resumed.find("restored")[0][1] == str(saved)
    assert [int(p[1]) for p in resumed.find("step")] == list(range(saved + 1, TOTAL + 1))
    plain = run_child(
        "numpy_loop.py",
        ["--plain", "--size-mb", 0.5, "--total", TOTAL, "--out", tmp_path / "plain.pkl"],
        tmp_path,
        "plain",
    )
    assert plain.proc.returncode == 0, plain.describe()
    assert_same(
        pickle.loads((tmp_path / "resumed.pkl").read_bytes()),
        pickle.loads((tmp_path / "plain.pkl").read_bytes()),
    )


def test_with_exit_on_stop_false_the_save_returns_and_the_loop_ends_itself(tmp_path):
    directory = tmp_path / "ckpt"
    child = Child(
        "numpy_loop.py",
        [
            "--dir",
            directory,
            "--every",
            1000,
            "--size-mb",
            0.5,
            "--total",
            10**6,
            "--step-seconds",
            0.01,
            "--exit-on-stop",
            0,
        ],
        tmp_path,
        "stopping",
    )
    child.wait_for(lambda parts: parts[:2] == ["step", "3"], "step 3")
    assert child.kill(signal.SIGTERM) == 0, child.describe()
    stopped = child.find("stopped")
    assert len(stopped) == 1, child.describe()
    step, written = int(stopped[0][1]), stopped[0][2]
    assert written == "1", "save() did not return True for the save the signal asked for"
    newest = checkpoints(directory)[-1]
    assert step_of(newest) == step and manifest(newest)["step"] == step
    assert child.find("preempted") == []
