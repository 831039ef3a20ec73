"""`trainmedic run` end to end: real child processes, real scripts, real signals."""

from __future__ import annotations

import os
import signal

import pytest
from warm_kit import popen_trainmedic

from trainmedic.categories import CATEGORIES

#: A small real training loop: a module, an optimizer, a DataLoader-free batch loop.
LOOP = """
import sys
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(512, 64), torch.randn(512, 1)
steps = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 20
for step in range(steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_runs_the_script_with_its_own_argv_name_and_exit_code(tm):
    tm.script(
        "train.py",
        LOOP
        + """
print("argv", sys.argv[1:], __name__)
sys.exit(3)
""",
    )
    # 120 steps of ~0.5 ms: long enough for the 10 ms sampler to see inside steady steps, which
    # a verdict needs (a handful of sub-millisecond steps gives none: tests/run/diagnose/test_evidence.py).
    # A fresh interpreter, as from a shell: the one test here of the whole start-up path.
    result = tm("run", "--json", "report.json", "train.py", "--iters", "120", "--flag", fresh=True)
    assert result.returncode == 3
    assert "argv ['--iters', '120', '--flag'] __main__" in result.stdout
    report = tm.report()
    assert report["schema"] == "trainmedic.report/1"
    assert report["command"] == ["train.py", "--iters", "120", "--flag"]
    assert report["exit_code"] == 3
    # 120 optimizer steps close 119 steps (the first opens counting), 3 of them warm-up.
    assert report["steps"]["count"] == 120 - 1 - 3
    assert report["steps"]["source"] == "optimizer"
    assert set(report["breakdown"]) == set(CATEGORIES)
    assert abs(sum(report["breakdown"].values()) - 1) <= 0.01
    assert report["evidence"] == "steps"
    assert report["bottleneck"] in CATEGORIES
    for key in ("count", "median_s", "p90_s", "growth"):
        assert key in report["steps"]
    assert report["device"]["kind"] == "cpu"
    assert "Where steady-state step time goes" in result.stderr


def test_module_mode_passes_its_own_options(tm):
    pkg = tm.cwd / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    tm.script("mypkg/train.py", LOOP + "\nprint('module argv', sys.argv[1:])\n")
    result = tm("run", "--json", "report.json", "-m", "mypkg.train", "--lr", "1e-3", "--iters", "8")
    assert result.returncode == 0, result.stderr
    assert "module argv ['--lr', '1e-3', '--iters', '8']" in result.stdout
    assert tm.report()["command"] == ["-m", "mypkg.train", "--lr", "1e-3", "--iters", "8"]


def test_steps_stops_after_n_steady_state_steps(tm):
    tm.script("train.py", LOOP + "\nprint('never reached')\n")
    result = tm("run", "--steps", "5", "--json", "report.json", "train.py", "--iters", "100000")
    assert result.returncode == 0
    assert "never reached" not in result.stdout
    report = tm.report()
    assert report["steps"]["count"] == 5
    assert report["outcome"] == "step_limit"


def test_a_script_that_raises_shows_its_traceback_the_report_and_exits_1(tm):
    tm.script("train.py", LOOP + "\nraise RuntimeError('shape mismatch in phase 2')\n")
    result = tm("run", "--json", "report.json", "train.py")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: shape mismatch in phase 2" in result.stderr
    assert "runpy" not in result.stderr and "trainmedic/run/probe" not in result.stderr
    report = tm.report()
    assert report["outcome"] == "exception"
    assert "train.py:" in report["message"]
    assert report["steps"]["count"] > 0  # what was measured before the crash is reported


def test_missing_script_is_a_clear_error_with_exit_2(tm):
    result = tm("run", "nope.py")
    assert result.returncode == 2
    assert "script 'nope.py' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_module_is_a_clear_error_with_exit_2(tm):
    result = tm("run", "-m", "no_such_pkg.train")
    assert result.returncode == 2
    assert "module 'no_such_pkg.train' cannot be found" in result.stderr


def test_a_notebook_is_refused_with_how_to_convert_it(tm):
    (tm.cwd / "train.ipynb").write_text('{"cells": []}')
    result = tm("run", "train.ipynb")
    assert result.returncode == 2
    assert "not a Python script" in result.stderr
    assert "nbconvert" in result.stderr


def test_a_binary_file_is_refused(tm):
    (tm.cwd / "model.bin").write_bytes(b"\x00\x01\x02" * 100)
    result = tm("run", "model.bin")
    assert result.returncode == 2
    assert "binary file" in result.stderr


def test_no_detectable_steps_says_how_to_mark_them(tm):
    tm.script(
        "busy.py",
        """
        total = sum(map(abs, range(-3_000_000, 3_000_000)))  # busy, but in no loop of Python's
        print(total > 0)
    """,
    )
    result = tm("run", "--json", "report.json", "busy.py")
    assert result.returncode == 0
    assert "No steps were detected" in result.stderr
    assert "trainmedic.step()" in result.stderr
    report = tm.report()
    assert (report["steps"]["count"], report["evidence"], report["bottleneck"]) == (0, "whole run", None)


def test_explicit_markers_define_steps_without_torch(tm):
    tm.script(
        "loop.py",
        """
        import trainmedic
        for step in range(12):
            sum(i * i for i in range(20_000))
            trainmedic.step()
    """,
    )
    result = tm("run", "--json", "report.json", "--warmup", "2", "loop.py")
    assert result.returncode == 0, result.stderr
    report = tm.report()
    assert report["steps"]["source"] == "marker"
    assert report["steps"]["count"] == 12 - 1 - 2  # the first marker opens counting; 2 warm-up


@pytest.mark.slow
def test_ctrl_c_reports_what_was_measured_and_exits_130(tm):
    tm.script(
        "train.py",
        LOOP.replace(
            "    opt.step()", "    opt.step()\n    if step == 30:\n        print('ready', flush=True)"
        ),
    )
    env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    proc = popen_trainmedic(
        ["run", "--json", "report.json", "train.py", "--iters", "10000000"], cwd=tm.cwd, env=env
    )
    assert proc.stdout.readline().strip() == "ready"  # wait for real steps, no sleeping
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted by Ctrl+C" in err
    report = tm.report()
    assert report["outcome"] == "interrupted"
    assert report["steps"]["count"] >= 20


def test_html_report_is_written(tm):
    tm.script("train.py", LOOP)
    # 120 steps of ~0.5 ms: enough for the sampler to see inside them, so the report has a timeline.
    result = tm("run", "--html", "report.html", "--quiet", "train.py", "--iters", "120")
    assert result.returncode == 0
    html = (tm.cwd / "report.html").read_text(encoding="utf-8")
    assert "timeline-chart" in html
    assert "Where steady-state" not in result.stderr  # --quiet


def test_no_target_is_a_usage_error(tm):
    result = tm("run")
    assert result.returncode == 2
    assert "give a script to run" in result.stderr


@pytest.mark.slow
def test_an_unwritable_report_path_exits_2_before_the_script_runs(tm):
    tm.script("train.py", "open('ran.txt', 'w').close()\n")
    tm.script("afile", "")
    for flag, path, problem in [
        (
            "--json",
            "no/such/dir/r.json",
            "the folder no/such/dir does not exist; create it or give another path",
        ),
        ("--json", "afile/r.json", "afile is a file, not a folder; give a path in a folder"),
        ("--html", ".", "is a folder; give a file name, e.g. --html report.html"),
    ]:
        result = tm("run", flag, path, "train.py")
        assert result.returncode == 2
        assert result.stderr == f"trainmedic: error: {flag} {path}: {problem}\n"
    assert not (tm.cwd / "ran.txt").exists()


@pytest.mark.slow
def test_a_report_path_lost_during_the_run_is_an_error_not_a_traceback(tm):
    # The folder is replaced by a file while the script runs: the report cannot be written.
    tm.script(
        "train.py", LOOP + "\nimport shutil\nshutil.rmtree('out')\nopen('out', 'w').close()\nsys.exit(3)\n"
    )
    (tm.cwd / "out").mkdir()
    result = tm(
        "run", "--json", "out/report.json", "train.py", "--iters", "120"
    )  # steps long enough for findings
    assert result.returncode == 3  # still the script's own exit code
    assert "trainmedic: error: cannot write the JSON report to out/report.json: " in result.stderr
    assert "Traceback" not in result.stderr
    assert "Findings" in result.stderr  # the console report was still printed
