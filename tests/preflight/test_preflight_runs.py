"""Real experiments in real child processes: passed, failed at the user's line, stuck (where, why)."""

from __future__ import annotations

import sys
import time

import pytest
from proc_kit import alive, wait_for

#: Seed 004 #1/#3: the 2D experiment works, the image one was never run and fails inside the
#: library the user calls (here numpy, as geomloss did there) with (N, C, H, W) tensors.
TRAIN_NUMPY = """
import sys

import numpy as np


def velocity(x, y):
    # the OT cost wants (N, D) point clouds
    return np.einsum("nd,md->nm", x, y)


dataset = sys.argv[sys.argv.index("--dataset") + 1]
shape = (256, 2) if dataset == "2d" else (128, 1, 28, 28)
rng = np.random.default_rng(0)
for step in range(5):
    x = rng.standard_normal(shape)
    cost = velocity(x, x)
print("done", cost.shape)
"""

#: Seed 004 #7: --train-iters overrides two of the three num_iterations; phase 3 runs 40000.
CONFIG_YAML = """
nsgf_training:
  num_iterations: 20000
nsf_training:
  num_iterations: 20000
time_predictor:
  num_iterations: 40000
"""

TRAIN_PHASES = """
import argparse
import time

import yaml

parser = argparse.ArgumentParser()
parser.add_argument("--train-iters", type=int)
args = parser.parse_args()
with open("config.yaml") as handle:
    cfg = yaml.safe_load(handle)
if args.train_iters:
    cfg["nsgf_training"]["num_iterations"] = args.train_iters
    cfg["nsf_training"]["num_iterations"] = args.train_iters


def train_phase(name):
    for it in range(cfg[name]["num_iterations"]):
        time.sleep(0.01)


train_phase("nsgf_training")
train_phase("nsf_training")
train_phase("time_predictor")
"""


def line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_2d_experiment_passes_and_the_image_one_fails_at_the_users_line(project):
    script = project.write("train.py", TRAIN_NUMPY)
    project.pyproject(
        """
        [tool.trainmedic.preflight.experiments]
        toy2d = "python train.py --dataset 2d"
        mnist = "python train.py --dataset mnist"
        """
    )
    report = project.run()
    toy, mnist = report.experiments
    assert (toy.verdict, toy.exit_code, toy.error, toy.where) == ("passed", 0, None, None)
    assert "done (256, 256)" in toy.stdout
    assert (mnist.verdict, mnist.status, mnist.exit_code) == ("failed", "failed", 1)
    assert mnist.error.startswith("ValueError: ")
    assert "more dimensions than subscripts" in mnist.error  # numpy's own words, raised inside numpy
    frame = mnist.where.frame
    assert (frame.path, frame.line, frame.function) == (
        str(script.resolve()),
        line_of(script, "np.einsum"),
        "velocity",
    )
    assert frame.source == 'return np.einsum("nd,md->nm", x, y)'
    assert not report.passed


@pytest.mark.slow
def test_stuck_in_phase_3_at_the_loop_and_the_override_that_missed_a_copy(project):
    script = project.write("train.py", TRAIN_PHASES)
    project.write("config.yaml", CONFIG_YAML)
    project.pyproject(
        """
        [tool.trainmedic.preflight.experiments]
        smoke = { command = "python train.py --train-iters 5", budget = "3s" }
        """
    )
    started = time.monotonic()
    (result,) = project.run().experiments
    assert time.monotonic() - started < 3 + 5 + 2  # the budget, the bounded wait for the dump, slack
    assert (result.verdict, result.exit_code, result.seconds) == ("stuck", None, 3.0)
    where = result.where
    assert (where.frame.function, where.frame.line, where.frame.source) == (
        "train_phase",
        line_of(script, "time.sleep"),
        "time.sleep(0.01)",
    )
    assert (where.loop_line, where.loop_source) == (
        line_of(script, "for it in"),
        'for it in range(cfg[name]["num_iterations"]):',
    )
    missed = [c for c in result.configs if c.kind == "missed_override"]
    assert [(c.file, c.key, c.line) for c in missed] == [("config.yaml", "time_predictor.num_iterations", 6)]
    assert set(missed[0].related) == {"nsgf_training.num_iterations", "nsf_training.num_iterations"}
    assert "40000" in missed[0].message
    assert not [c for c in result.configs if c.kind == "never_read"]  # a stopped run cannot know


@pytest.mark.slow
def test_stuck_in_native_code_is_located_from_the_faulthandler_dump(project):
    # sum() over a huge range runs in C without checking for signals: the Python-level handler
    # never gets to run, faulthandler's C-level dump still says where.
    script = project.write(
        "crunch.py", "import sys\n\n\ndef total():\n    return sum(range(10**13))\n\n\ntotal()\n"
    )
    (result,) = project.run(commands=("python crunch.py",), budget="1.5s").experiments
    assert result.verdict == "stuck"
    assert (result.where.frame.path, result.where.frame.line, result.where.frame.function) == (
        str(script.resolve()),
        5,
        "total",
    )
    assert result.config_note == "no config snapshot: the process did not answer SIGUSR2 in time"


STUCK_WITH_CHILD = """
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
with open("child.pid", "w") as out:
    out.write(str(child.pid))
while True:
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_a_wrapper_script_is_looked_into_and_the_whole_group_killed(project):
    script = project.write("train.py", STUCK_WITH_CHILD)
    project.write("run.sh", f"'{sys.executable}' train.py\n")  # not exec: sh stays the group's leader
    (result,) = project.run(commands=("sh run.sh",), budget="2s").experiments
    # SIGUSR2 went to the instrumented Python process, not to sh (which it would have killed);
    # the grandchild Python did not install the instrumentation (else the dump would be its).
    assert result.verdict == "stuck"
    assert (result.where.frame.path, result.where.frame.line) == (
        str(script.resolve()),
        line_of(script, "time.sleep(0.05)"),
    )
    pid = int((project.root / "child.pid").read_text())
    try:
        wait_for(lambda: not alive(pid), timeout=10)
    except AssertionError:
        raise AssertionError("the grandchild survived the group's SIGKILL") from None


def test_a_library_in_the_projects_venv_is_not_the_users_line(project):
    project.write(
        ".venv/lib/python3.11/site-packages/fakelib.py",
        "def solve(x):\n    raise RuntimeError(f'bad shape {x}')\n",
    )
    script = project.write(
        "train.py",
        """
        import sys

        sys.path.insert(0, ".venv/lib/python3.11/site-packages")
        import fakelib

        fakelib.solve((3, 2))
        """,
    )
    (result,) = project.run(commands=("python train.py",)).experiments
    assert result.error == "RuntimeError: bad shape (3, 2)"
    assert (result.where.frame.path, result.where.frame.line) == (
        str(script.resolve()),
        line_of(script, "fakelib.solve"),
    )


def test_a_replaced_excepthook_falls_back_to_the_printed_traceback(project):
    script = project.write(
        "train.py",
        """
        import sys

        sys.excepthook = sys.__excepthook__


        def load(name):
            return {"a": 1}[name]


        load("b")
        """,
    )
    (result,) = project.run(commands=("python train.py",)).experiments
    assert result.error == "KeyError: 'b'"
    assert (result.where.frame.line, result.where.frame.function, result.where.frame.source) == (
        line_of(script, '{"a": 1}[name]'),
        "load",
        'return {"a": 1}[name]',
    )


@pytest.mark.parametrize(
    "command, script, error",
    [
        ("nosuchcommand-tm --x", None, "cannot start 'nosuchcommand-tm': No such file or directory"),
        (
            "python exit.py",
            "import sys\nprint('loading')\nsys.exit('no data folder: set DATA=...')\n",
            "no data folder: set DATA=...",
        ),
        ("python crash.py", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed by SIGSEGV"),
        ("python quiet.py", "import sys\nsys.exit(3)\n", "exit code 3"),
    ],
)
def test_failures_without_a_traceback(project, command, script, error):
    if script:
        project.write(command.split()[1], script)
    (result,) = project.run(commands=(command,)).experiments
    assert (result.verdict, result.error, result.where) == ("failed", error, None)


def test_environment_of_the_child_and_the_users_own_sitecustomize(project, monkeypatch):
    project.write("mysite/sitecustomize.py", "open('site-ran.txt', 'w').write('yes')\n")
    project.write(
        "check.py",
        """
        import os
        import sys

        assert os.environ["CUDA_VISIBLE_DEVICES"] == "", os.environ["CUDA_VISIBLE_DEVICES"]
        assert os.environ["DATA"] == "tiny"
        assert os.path.isdir(os.environ["TRAINMEDIC_PREFLIGHT_DIR"])
        assert sys.executable == os.environ["EXPECTED_PYTHON"], sys.executable
        assert "trainmedic" not in sys.modules, "the instrumentation must not import trainmedic into the user's process"
        print("env ok")
        """,
    )
    project.pyproject(
        """
        [tool.trainmedic.preflight.experiments]
        env = { command = "python check.py", env = { DATA = "tiny", PYTHONPATH = "mysite" } }
        """
    )
    monkeypatch.setenv("EXPECTED_PYTHON", sys.executable)
    (result,) = project.run().experiments
    assert (result.verdict, result.stderr) == ("passed", "")
    assert "env ok" in result.stdout
    assert (project.root / "site-ran.txt").read_text() == "yes"
    assert not result.notes  # the instrumentation installed without a problem


def test_a_finished_run_reports_keys_it_never_read(project):
    project.write("config.json", '{"model": {"width": 64, "dropout": 0.1}, "lr": 0.01}\n')
    project.write(
        "train.py",
        """
        import json

        with open("config.json") as handle:
            cfg = json.load(handle)
        print(cfg["model"]["width"], cfg["lr"])
        """,
    )
    (result,) = project.run(commands=("python train.py",)).experiments
    assert result.verdict == "passed"  # a finding to read, not a failure
    assert [(c.kind, c.file, c.key) for c in result.configs] == [
        ("never_read", "config.json", "model.dropout")
    ]


@pytest.mark.slow
def test_keys_read_only_in_forked_dataloader_workers_are_not_reported_never_read(project):
    project.write("aug.yaml", "augment:\n  flip_prob: 0.5\n  noise: 0.1\nepochs: 1\n")
    project.write(
        "train.py",
        """
        import torch
        import yaml
        from torch.utils.data import DataLoader, Dataset

        with open("aug.yaml") as f:
            cfg = yaml.safe_load(f)


        class Noisy(Dataset):
            def __init__(self, aug):
                self.aug = aug

            def __len__(self):
                return 8

            def __getitem__(self, i):  # runs in the workers only
                return torch.tensor(float(i) * self.aug["flip_prob"] + self.aug["noise"])


        for _ in range(cfg["epochs"]):
            for batch in DataLoader(Noisy(cfg["augment"]), batch_size=4, num_workers=2, multiprocessing_context="fork"):
                pass
        """,
    )
    (result,) = project.run(commands=("python train.py",)).experiments
    assert (result.verdict, result.configs, result.config_note) == ("passed", [], None)
