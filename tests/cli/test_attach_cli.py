"""`trainmedic attach PID`'s errors, as a user meets them: exit code 2, the reason and the fix on
stderr, no traceback; and `--dump`, which shows where a running job is now.

Each command runs as a real process (the `tm` fixture, tests/cli/conftest.py) against real
processes this test starts: a reaped child's PID, `sleep`, a Python child blocked in a named
function. py-spy missing is made in-process, on the command's own lookup of it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner
from warm_kit import run_python

from trainmedic.cli import main

#: A training job blocked in a named function of the user's, in a file of its own.
WAITING = """
import time


def wait_for_data():
    time.sleep(60)


print("ready", flush=True)
wait_for_data()
"""

#: A launcher that starts a worker process and waits for it, as torchrun waits for its ranks.
LAUNCHER = """
import subprocess
import sys
import time


def wait_for_workers():
    time.sleep(60)


worker = subprocess.Popen([sys.executable, "train.py"], stdout=subprocess.PIPE, text=True)
worker.stdout.readline()  # the worker is in wait_for_data
print("ready", worker.pid, flush=True)
wait_for_workers()
"""

#: Runs the command as user `nobody`, started as root: `runuser -u nobody -- python` needs an
#: interpreter `nobody` may run, and one under /root (pyenv: mode 0700) is not. So the child
#: drops to `nobody` after it has started, with the modules the error path imports already loaded
#: (a dry run as root), since the interpreter's own library stays unreadable to it.
AS_NOBODY = """
import contextlib, io, os, sys

from trainmedic.cli import main


def attach(*args):
    try:
        main.app(args=["attach", *args], prog_name="trainmedic")
    except SystemExit as exit:
        return exit.code
    return 0


with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
    attach("0")
    attach("0", "--dump")
uid, gid = int(os.environ["AS_UID"]), int(os.environ["AS_GID"])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
sys.exit(attach(*sys.argv[1:]))
"""


def _message(result: subprocess.CompletedProcess) -> str:
    """The error the command printed, checked to be one with exit code 2 and no traceback.

    Rich wraps a long line at the terminal's width (COLUMNS): the message is read back whole."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("trainmedic: error: "))
    return " ".join(line.strip() for line in lines[first:] if line.strip())


def _unused_pid() -> int:
    """The PID of a child that has ended and been reaped: no process has it (until one reuses it)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def sleeper():
    """A process that is not Python: `sleep`."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def waiting(tm):
    """A Python job in ``tm``'s folder, blocked in ``wait_for_data``; its PID and the line."""
    script = tm.script("train.py", WAITING)
    child = subprocess.Popen([sys.executable, str(script)], cwd=tm.cwd, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        yield child.pid, WAITING.lstrip().splitlines().index("    time.sleep(60)") + 1
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def launcher(tm):
    """A launcher in ``tm``'s folder waiting for its worker, itself waiting for data; both PIDs."""
    tm.script("train.py", WAITING)
    script = tm.script("launch.py", LAUNCHER)
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tm.cwd, stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        word, worker = parent.stdout.readline().split()
        assert word == "ready"
        yield parent.pid, int(worker)
    finally:
        parent.kill()
        parent.wait()
        if worker is not None:  # the launcher, killed, does not end its worker: this test does
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(worker), signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--dump"]], ids=["sample", "dump"])
def test_a_pid_no_process_has(tm, mode):
    pid = _unused_pid()
    message = _message(tm("attach", str(pid), *mode))
    assert f"no process with PID {pid} is running" in message
    assert "pgrep -af python" in message


@pytest.mark.parametrize("pid", ["0", "-3"])
def test_a_pid_that_cannot_be_a_process(tm, pid):
    # `--` so that click reads -3 as the PID, not as an option.
    message = _message(tm("attach", "--", pid))
    assert f"PID {pid} is not a process id; expected a positive number" in message


@pytest.mark.parametrize("duration", ["0s", "abc"])
def test_a_duration_under_a_second_or_unreadable(tm, duration):
    result = tm("attach", str(os.getpid()), "--duration", duration)
    message = _message(result)
    assert f"--duration {duration!r}: expected at least one second of sampling" in message
    assert "30s, 2m" in message
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(
            ["--duration", "1s"],
            id="sample",
        ),
        pytest.param(["--dump"], id="dump"),
    ],
)
def test_a_process_that_is_not_python(tm, sleeper, mode):
    message = _message(tm("attach", str(sleeper), *mode))
    assert f"PID {sleeper} is not a Python process" in message
    assert "pgrep -af python" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to run a process that another user may not read")
@pytest.mark.parametrize("mode", [[], ["--dump"]], ids=["sample", "dump"])
def test_a_process_of_another_user(tm, waiting, mode):
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user `nobody` to run the command as")
    pid, _ = waiting
    script = tm.script("as_nobody.py", AS_NOBODY)
    env = {**os.environ, "COLUMNS": "120", "AS_UID": str(nobody.pw_uid), "AS_GID": str(nobody.pw_gid)}
    result = run_python([str(script), str(pid), *mode], cwd=tm.cwd, env=env, timeout=120)
    message = _message(result)
    assert f"no permission to read PID {pid}" in message
    assert f"sudo trainmedic attach {pid}" in message


@pytest.mark.parametrize("mode", [["--duration", "1s"], ["--dump"]], ids=["sample", "dump"])
def test_py_spy_not_installed(monkeypatch, tmp_path, sleeper, mode):
    # Nothing beside the interpreter, nothing on PATH: the two places the command looks.
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    monkeypatch.setenv("PATH", str(empty))
    result = CliRunner().invoke(main.app, ["attach", str(sleeper), *mode])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # typer.Exit: no traceback
    message = " ".join(result.stderr.split())  # read back whole: rich wraps at its width
    assert "py-spy, which is not installed" in message
    assert "pip install 'trainmedic[attach]'" in message


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            ["0"],
            id="pid-0",
        ),
        pytest.param(
            ["--dump", "unused"],
            id="long-message",
        ),
    ],
)
def test_an_error_is_one_line_on_stderr(tm, args):
    args = [str(_unused_pid()) if a == "unused" else a for a in args]
    result = tm("attach", *args)
    _message(result)
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_dump_shows_the_main_thread_with_the_users_line_marked(tm, waiting):
    pid, line = waiting
    result = tm("attach", str(pid), "--dump")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"PID {pid} thread {pid}"), out  # the main thread: its tid is the PID
    lines = out.splitlines()
    marked = [i for i, text in enumerate(lines) if "▶" in text]
    # Traceback order: the module's call first, the function it waits in last, each with its code.
    assert [lines[i].strip() for i in marked] == [
        f"▶ train.py:{WAITING.lstrip().splitlines().index('wait_for_data()') + 1} in <module>",
        f"▶ train.py:{line} in wait_for_data",
    ]
    assert lines[marked[-1] + 1].strip() == "time.sleep(60)"


def test_dump_shows_the_child_processes_too(tm, launcher):
    parent, worker = launcher
    result = tm("attach", str(parent), "--dump")
    assert result.returncode == 0, result.stderr
    assert f"PID {parent} thread {parent}" in result.stdout
    assert "in wait_for_workers" in result.stdout
    assert f"PID {worker} thread {worker}" in result.stdout, result.stdout
    assert "in wait_for_data" in result.stdout
