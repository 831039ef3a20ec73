"""`trainmedic run` parses its command line like python: its own options before the script (or
`-m MODULE`), everything after belongs to the script; `-h` and `--version` as everywhere else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer.main

from trainmedic._version import __version__
from trainmedic.cli import main
from trainmedic.cli.script_args import mark_script_args

#: Prints what the script was given, as one line the tests read back.
SHOW_ARGV = "import sys\nprint('script argv', sys.argv[1:])\n"

#: Marks steps without torch, so that `--steps 3` has something to stop.
MARKED = """
import sys
import trainmedic
print('script argv', sys.argv[1:])
for step in range(40):
    sum(i * i for i in range(2_000))
    trainmedic.step()
"""


def _package(tm) -> None:
    (tm.cwd / "pkg").mkdir()
    (tm.cwd / "pkg" / "__init__.py").write_text("")
    tm.script("pkg/train.py", MARKED)


@pytest.mark.slow
def test_a_module_is_found_in_the_current_folder_as_python_m_finds_it(tm):
    # The installed `trainmedic` command starts with its bin folder first on sys.path, not the
    # current folder; PYTHONSAFEPATH gives `python -m trainmedic` the same start.
    _package(tm)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "COLUMNS": "120"}
    result = subprocess.run(
        [sys.executable, "-m", "trainmedic", "run", "--quiet", "-m", "pkg.train", "--lr", "1"],
        cwd=tm.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "script argv ['--lr', '1']" in result.stdout


@pytest.mark.slow
def test_options_after_the_module_belong_to_the_module(tm):
    _package(tm)
    result = tm("run", "--quiet", "-m", "pkg.train", "--steps", "9", "-h")
    assert result.returncode == 0, result.stderr
    assert "script argv ['--steps', '9', '-h']" in result.stdout


@pytest.mark.slow
def test_options_after_the_module_belong_to_the_module_with_nproc(tm):
    # --nproc takes a value: it was missing from the hand-kept list, so --steps 9 went to trainmedic.
    _package(tm)
    result = tm("run", "--quiet", "--nproc", "1", "-m", "pkg.train", "--steps", "9", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "script argv ['--steps', '9']" in result.stdout


def test_the_same_option_before_and_after_the_script(tm):
    tm.script("train.py", MARKED)
    result = tm("run", "--steps", "3", "--warmup", "1", "--json", "report.json", "train.py", "--steps", "7")
    assert result.returncode == 0, result.stderr
    assert "script argv ['--steps', '7']" in result.stdout
    report = tm.report()
    assert report["outcome"] == "step_limit" and report["steps"]["count"] == 3  # trainmedic's 3


def test_h_after_the_script_is_the_scripts(tm):
    tm.script("train.py", SHOW_ARGV)
    result = tm("run", "--quiet", "train.py", "-h")
    assert result.returncode == 0, result.stderr
    assert "script argv ['-h']" in result.stdout
    assert "Usage:" not in result.stdout + result.stderr


@pytest.mark.slow
def test_h_is_help_for_the_app_and_every_command(tm):
    for args in [("-h",), ("run", "-h"), ("plan", "-h"), ("tune", "-h"), ("lint", "-h")]:
        result = tm(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout.startswith("Usage: trainmedic"), args
        assert result.stdout == tm(*args[:-1], "--help").stdout


def test_version_option_and_command(tm):
    for args in [("--version",), ("version",)]:
        result = tm(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == __version__


def test_an_unknown_option_before_the_script_is_a_usage_error(tm):
    tm.script("train.py", "open('ran.txt', 'w').close()\n")
    result = tm("run", "--stpes", "3", "train.py")
    assert result.returncode == 2
    assert "No such option: --stpes" in result.stderr
    assert not (tm.cwd / "ran.txt").exists()


def test_which_options_take_a_value_comes_from_the_command_itself():
    # Every option of `run` that takes a value, given before -m: the module's --flag stays its own.
    group = typer.main.get_command(main.app)
    run = group.commands["run"]
    before = []
    for param in run.params:
        if param.param_type_name == "option" and param.name != "module" and not param.is_flag:
            before += [param.opts[0], "1"]
    argv = ["run", *before, "-m", "pkg.train", "--flag", "x"]
    assert mark_script_args(argv, group) == [*argv[:-2], "--", "--flag", "x"]
    # Short options bundled as click reads them: -q then -m with its value.
    assert mark_script_args(["run", "-qm", "pkg.train", "-h"], group) == [
        "run",
        "-qm",
        "pkg.train",
        "--",
        "-h",
    ]
