"""trainmedic preflight as a user runs it: the table, the JSON contract, exit codes 0/1/2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from proc_kit import alive, wait_for

pytestmark = [pytest.mark.slow]

PYPROJECT = """
[tool.trainmedic.preflight]
budget = "30s"

[tool.trainmedic.preflight.experiments]
toy2d = "python train.py --dataset 2d"
mnist = "python train.py --dataset mnist"
"""

TRAIN = """
import sys

import numpy as np


def velocity(x, y):
    return np.einsum("nd,md->nm", x, y)


shape = (256, 2) if sys.argv[-1] == "2d" else (128, 1, 28, 28)
x = np.zeros(shape)
velocity(x, x)
print("trained", sys.argv[-1])
"""

RESUMABLE = """
import random
from trainmedic.checkpoint import Checkpointer

random.seed(0)
noise = random.Random(1)  # never given to the Checkpointer: a resumed run draws other numbers
state = {"w": 0.0}
ckpt = Checkpointer("runs/exp")
start = ckpt.restore(state=state)
for step in range(start, 6):
    state["w"] += noise.random()
    ckpt.save(step + 1, state=state)
"""


def test_all_passed_exits_0(tm):
    tm.script("train.py", TRAIN)
    tm.script("pyproject.toml", PYPROJECT)
    result = tm("preflight", "toy2d")
    assert result.returncode == 0, result.stderr
    assert text(result.stdout) == (
        "Preflight: 1 experiment from pyproject.toml, run tiny on the CPU\n"
        f"project: {tm.cwd.resolve()}\n"
        "\n"
        "experiment  verdict    time  detail\n"
        f"toy2d       passed   {_time(result.stdout, 'toy2d')}\n"
        "\n"
        "The experiment passed.\n"
    )
    assert "trainmedic preflight: [1/1] toy2d: running (budget 30s)" in result.stderr


def text(stdout: str) -> str:
    """stdout without the spaces rich pads lines with to the console width."""
    return "\n".join(line.rstrip() for line in stdout.splitlines()) + "\n"


def _time(stdout: str, name: str) -> str:
    """The measured time column of a row: the one thing that differs from run to run."""
    row = next(line for line in stdout.splitlines() if line.startswith(name + " "))
    return row.split()[-2] + " " + row.split()[-1]


def test_the_header_and_json_name_pyproject_only_for_the_declared_experiments_that_ran(tm):
    tm.script("train.py", TRAIN)
    tm.script("pyproject.toml", PYPROJECT)
    result = tm("preflight", "-c", "python train.py --dataset 2d", "--json", "r.json")
    assert result.returncode == 0, result.stderr
    assert (
        text(result.stdout).splitlines()[0]
        == "Preflight: 1 experiment from the command line, run tiny on the CPU"
    )
    report = tm.report("r.json")
    assert report["pyproject"] is None
    assert [e["from_command_line"] for e in report["experiments"]] == [True]

    result = tm("preflight", "toy2d", "-c", "python train.py --dataset 2d", "--json", "r.json")
    assert result.returncode == 0, result.stderr
    assert text(result.stdout).splitlines()[0] == (
        "Preflight: 2 experiments, 1 from pyproject.toml and 1 from the command line, run tiny on the CPU"
    )
    report = tm.report("r.json")
    assert report["pyproject"] == str(tm.cwd.resolve() / "pyproject.toml")
    assert [e["from_command_line"] for e in report["experiments"]] == [False, True]


def test_a_failure_exits_1_with_the_users_line_and_the_json_report(tm):
    tm.script("train.py", TRAIN)
    tm.script("pyproject.toml", PYPROJECT)
    result = tm("preflight", "--json", "report.json")
    assert result.returncode == 1, result.stderr
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[4].startswith("toy2d       passed")
    assert lines[5].startswith("mnist       FAILED") and lines[5].endswith("ValueError at train.py:7")
    assert lines[7:] == [
        lines[7],  # "mnist: FAILED with exit code 1 after <time>"
        "  ValueError: operand has more dimensions than subscripts given in einstein sum, but no '...' ellipsis provided to",
        "  broadcast the extra dimensions.",
        "  at train.py:7 in velocity",
        '    7 | return np.einsum("nd,md->nm", x, y)',
        "",
        "1 of 2 experiments needs attention: 1 failed.",
    ]
    assert lines[7].startswith("mnist: FAILED with exit code 1 after ")
    assert "JSON report written to report.json" in result.stderr

    report = tm.report()
    assert report["schema"] == "trainmedic.preflight/1"
    assert (report["passed"], report["project"], report["resume_check"]) == (
        False,
        str(tm.cwd.resolve()),
        True,
    )
    toy, mnist = report["experiments"]
    assert (toy["name"], toy["verdict"], toy["exit_code"], toy["where"]) == ("toy2d", "passed", 0, None)
    assert "trained 2d" in toy["stdout_tail"]
    assert (mnist["verdict"], mnist["status"], mnist["exit_code"]) == ("failed", "failed", 1)
    assert mnist["error"].startswith("ValueError: operand has more dimensions")
    assert mnist["where"] == {
        "path": "train.py",
        "line": 7,
        "function": "velocity",
        "source": 'return np.einsum("nd,md->nm", x, y)',
        "loop_line": None,
        "loop_source": "",
    }
    assert set(mnist) >= {
        "command",
        "seconds",
        "budget_seconds",
        "configs",
        "resume",
        "plan",
        "session",
        "notes",
        "stderr_tail",
    }


def test_a_resume_that_diverges_exits_1_and_can_be_switched_off(tm):
    tm.script("ck.py", RESUMABLE)
    result = tm("preflight", "-c", "python ck.py")
    assert result.returncode == 1, result.stderr
    assert "python ck.py  RESUME DIVERGED" in result.stdout
    assert "resume check: diverged at step 4 in object 'state': after resuming from step 3" in result.stdout

    result = tm("preflight", "-c", "python ck.py", "--no-resume-check", "--json", "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    (experiment,) = tm.report("r.json")["experiments"]
    assert (experiment["uses_checkpointer"], experiment["resume"]) == (True, None)
    assert experiment["resume_note"] == "resume check off (resume_check = false or --no-resume-check)"


def test_project_folder_session_limit_and_device_from_the_command_line(tm, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    tm.script("train.py", TRAIN)
    tm.script(
        "pyproject.toml",
        PYPROJECT
        + 'fast = { command = "python train.py --dataset 2d", steps = 40000, step_time = "0.9s" }\n',
    )
    tm.cwd, project = elsewhere, tm.cwd
    result = tm(
        "preflight",
        "fast",
        "--project",
        str(project),
        "--session-limit",
        "9h",
        "--device",
        "t4",
        "--json",
        "s.json",
    )
    assert result.returncode == 0, result.stderr
    assert "needs 2 sessions of 9h: pass deadline='8h45m' to checkpoint.Checkpointer" in " ".join(
        text(result.stdout).split()
    )
    report = json.loads((elsewhere / "s.json").read_text())
    assert (report["device"], report["session_limit_seconds"]) == ("t4", 32400.0)
    assert report["experiments"][0]["session"]["sessions"] == 2


@pytest.mark.parametrize(
    "args, files, message",
    [
        ((), {}, "no experiments to run: no pyproject.toml in"),
        (("nope",), {"pyproject.toml": PYPROJECT}, "no experiment named 'nope' in"),
        (
            ("--budget", "soon"),
            {"pyproject.toml": PYPROJECT},
            "--budget = 'soon': cannot read 'soon' as a duration",
        ),
        (("--device", "t5", "-c", "python x.py"), {}, "--device = 't5': unknown GPU 't5'"),
        (
            (),
            {"pyproject.toml": PYPROJECT.replace('"30s"', '"30 parsecs"')},
            "[tool.trainmedic.preflight] budget = '30 parsecs'",
        ),
        (("-c", "python 'x.py"), {}, "cannot be split into arguments"),
    ],
)
def test_bad_input_exits_2_with_one_message_on_stderr(tm, args, files, message):
    for name, text in files.items():
        tm.script(name, text)
    result = tm("preflight", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("trainmedic preflight: error: ")
    assert message in result.stderr


def test_an_unwritable_json_path_exits_2_before_anything_runs(tm):
    tm.script("ok.py", "open('ran.txt', 'w').close()\n")
    tm.script("afile", "")
    for path, problem in [
        ("no/such/dir/r.json", "the folder no/such/dir does not exist; create it or give another path"),
        ("afile/r.json", "afile is a file, not a folder; give a path in a folder"),
        (".", "is a folder; give a file name, e.g. --json report.json"),
    ]:
        result = tm("preflight", "-c", "python ok.py", "--json", path)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == f"trainmedic preflight: error: --json {path}: {problem}\n"
    assert not (tm.cwd / "ran.txt").exists()


def test_shell_syntax_and_an_unknown_device_exit_2_with_preflights_own_fix(tm):
    result = tm("preflight", "-c", "FOO=1 python fail.py")
    assert result.returncode == 2 and result.stdout == ""
    assert "'FOO=1' is a shell variable assignment, but the command runs without a shell" in result.stderr
    result = tm("preflight", "-c", "python x.py", "--device", "foo")
    assert result.returncode == 2
    assert "--device = 'foo': unknown GPU 'foo'. Known: a10, " in result.stderr
    assert "--capacity" not in result.stderr  # plan's option, not preflight's
    assert result.stderr.rstrip().endswith("`trainmedic plan --list-devices` shows each card's memory.")


#: The build module parses its arguments at import, as training scripts do.
MODEL_WITH_ARGPARSE = """
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()


def build(batch):
    return dict(model=torch.nn.Linear(4, 4), inputs=torch.randn(batch, 4))
"""


@pytest.mark.slow
def test_a_build_module_that_parses_sys_argv_is_planned_in_its_own_process(tm):
    tm.script("model.py", MODEL_WITH_ARGPARSE)
    (tm.cwd / "sub").mkdir()
    tm.script("sub/x.py", "open('ran-here.txt', 'w').close()\n")
    tm.script(
        "pyproject.toml",
        """
        [tool.trainmedic.preflight]
        device = "t4"

        [tool.trainmedic.preflight.experiments]
        a = { command = "python x.py", cwd = "sub", plan = "model.py:build", batch = 8 }
        """,
    )
    result = tm("preflight", "--json", "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "plan on t4, batch 8, fp32: needs " in result.stdout and ": fits" in result.stdout
    (experiment,) = tm.report("r.json")["experiments"]
    assert (experiment["plan"]["fits"], experiment["plan"]["error"]) == (True, None)
    assert (tm.cwd / "sub" / "ran-here.txt").exists()  # cwd = "sub": the command ran there


STUCK = """
import os
import time

with open("stuck.pid.tmp", "w") as out:
    out.write(str(os.getpid()))
os.replace("stuck.pid.tmp", "stuck.pid")
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_kills_the_running_child_and_removes_the_temporary_folder(tm, signum):
    tm.script("stuck.py", STUCK)
    tmp = tm.cwd / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    preflight = subprocess.Popen(
        [sys.executable, "-m", "trainmedic", "preflight", "-c", "python stuck.py", "--budget", "2m"],
        cwd=tm.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid_file = tm.cwd / "stuck.pid"
        wait_for(lambda: pid_file.exists() or preflight.poll() is not None)
        assert preflight.poll() is None, preflight.communicate()
        stuck = int(pid_file.read_text())
        assert [p.name for p in tmp.iterdir() if p.name.startswith("trainmedic-preflight-")]  # TMPDIR is used
        preflight.send_signal(signum)
        out, err = preflight.communicate(timeout=60)
    finally:
        if preflight.poll() is None:
            preflight.kill()
            preflight.communicate()
    try:
        assert preflight.returncode == 128 + signum, err
        assert f"trainmedic preflight: error: stopped by {signal.Signals(signum).name}" in err
        wait_for(lambda: not alive(stuck), timeout=10)
        assert [p.name for p in tmp.iterdir() if p.name.startswith("trainmedic-preflight-")] == []
    finally:
        if alive(stuck):  # left behind: do not leave it running after the test
            os.kill(stuck, signal.SIGKILL)
