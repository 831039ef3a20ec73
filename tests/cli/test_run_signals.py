"""Ctrl+C (SIGINT) and SIGTERM cut a single-process `trainmedic run` short: the report of what was
measured is still printed and written, outcome "interrupted", exit code 130 / 143 as python's.
Real child processes, real signals; each signal is sent once the child has printed the line that
says where it is."""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import termios

import pytest
from proc_kit import wait_for
from warm_kit import WarmProcess, popen_trainmedic

#: A real training loop that prints a line per step; from step 4 on it is steady state (3 warm-up steps).
TRAIN = """
import sys
import torch

sys.stderr.write("{filler}")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(512, 64), torch.randn(512, 1)
{setup}
for step in range(10**9):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, flush=True)
{in_step}
"""

SIGNALS = [(signal.SIGINT, 130, "Ctrl+C (SIGINT)"), (signal.SIGTERM, 143, "SIGTERM")]


def _start(tm, setup: str = "", in_step: str = "", filler: int = 0) -> WarmProcess:
    tm.script("train.py", TRAIN.format(setup=setup, in_step=in_step, filler="." * filler))
    env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    # Forked from the warm interpreter (torch imported): a real process with real pipes and signals.
    return popen_trainmedic(
        ["run", "--json", "report.json", "--html", "report.html", "train.py"], cwd=tm.cwd, env=env
    )


def _wait_for_line(proc: WarmProcess, wanted: str) -> None:
    for line in proc.stdout:
        if line.strip() == wanted:
            return
    raise AssertionError(f"the script ended before printing {wanted!r}: {proc.communicate(timeout=60)}")


def _assert_cut_short(tm, proc: WarmProcess, code: int, name: str) -> dict:
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-3000:]
    report = tm.report()
    assert report["outcome"] == "interrupted" and report["exit_code"] == code
    assert name in report["message"] and "cut short" in report["message"]
    assert "trainmedic report  train.py" in err  # the console report
    assert f"outcome: interrupted, exit code {code}" in err and "cut short" in err
    assert "Traceback" not in err
    assert (tm.cwd / "report.html").is_file()
    assert [p.name for p in tm.cwd.iterdir() if p.name.startswith(".tmp-")] == []
    return report


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "name"), SIGNALS)
def test_a_signal_during_steady_steps_reports_what_was_measured(tm, signum, code, name):
    proc = _start(tm)
    _wait_for_line(proc, "step 10")
    proc.send_signal(signum)
    report = _assert_cut_short(tm, proc, code, name)
    assert report["steps"]["count"] > 0
    assert report["steps"]["source"] == "optimizer"


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "name"), SIGNALS)
def test_a_signal_during_set_up_reports_no_steps(tm, signum, code, name):
    # The script blocks in a read (a C call) before its first step, as a slow import or load would.
    proc = _start(tm, setup="print('set up', flush=True)\nsys.stdin.read()")
    _wait_for_line(proc, "set up")
    proc.send_signal(signum)
    report = _assert_cut_short(tm, proc, code, name)
    assert report["steps"]["count"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "name"), SIGNALS)
def test_a_signal_inside_a_long_torch_call_ends_the_run_when_it_returns(tm, signum, code, name):
    # Python runs a signal's handler only once the C call under way returns; then the run ends.
    in_step = """
    if step == 5:
        print("in torch", flush=True)
        torch.mm(torch.randn(2500, 2500), torch.randn(2500, 2500))
"""
    proc = _start(tm, in_step=in_step)
    _wait_for_line(proc, "in torch")
    proc.send_signal(signum)
    assert _assert_cut_short(tm, proc, code, name)["steps"]["count"] > 0


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux's F_SETPIPE_SZ")
def test_a_second_ctrl_c_while_the_report_is_written_loses_nothing(tm):
    # An unread stderr pipe of one page, which the script's own output fills all but 200 bytes:
    # the console report cannot get through. Once its first byte is in the pipe the child is
    # inside the report's write (the files are written before it), and the second Ctrl+C lands
    # there for sure.
    filler = 4096 - 200
    proc = _start(tm, filler=filler)
    fcntl.fcntl(proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, 4096)  # before the child has written
    assert fcntl.fcntl(proc.stderr.fileno(), fcntl.F_GETPIPE_SZ) == 4096
    _wait_for_line(proc, "step 5")
    proc.send_signal(signal.SIGINT)

    def report_started() -> bool:
        waiting = bytearray(4)
        fcntl.ioctl(proc.stderr.fileno(), termios.FIONREAD, waiting)
        return int.from_bytes(waiting, sys.byteorder) > filler

    wait_for(report_started)
    assert (tm.cwd / "report.json").exists()  # written before the console report
    proc.send_signal(signal.SIGINT)
    report = _assert_cut_short(tm, proc, 130, "Ctrl+C (SIGINT)")
    assert report["steps"]["count"] > 0
