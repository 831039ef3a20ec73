"""Helpers for tests that drive real processes: is a pid still running, wait for a condition, run a
command and kill all it started if it overruns."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

import psutil


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition: Callable[[], object], timeout: float = 60.0) -> None:
    """Poll ``condition`` until it is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)  # polling interval only; the condition is what synchronises


def run_group(
    cmd: list[str], timeout: float, *, check: bool = False, capture_output: bool = False, **kwargs
) -> subprocess.CompletedProcess:
    """``subprocess.run`` whose timeout kills every process the command started, not just the command.

    subprocess.run kills only its direct child: a launcher's workers (torchrun's ranks) live on as
    orphans, still running when later tests start."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with subprocess.Popen(cmd, start_new_session=True, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as overran:
            kill_tree(proc.pid)
            overran.stdout, overran.stderr = proc.communicate()
            raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd, stdout, stderr)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and all its descendants, also those in sessions of their own (torchrun
    puts each rank in one). Stopped first, so none can start a child the walk misses."""
    try:
        parent = psutil.Process(root)
    except psutil.NoSuchProcess:
        return
    stopped: set[psutil.Process] = set()
    while True:
        try:
            found = {parent, *parent.children(recursive=True)}
        except psutil.NoSuchProcess:
            found = set()
        if found <= stopped:
            break
        for process in found - stopped:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.suspend()
        stopped |= found
    with contextlib.suppress(ProcessLookupError):
        os.killpg(root, signal.SIGKILL)  # what left the tree (an orphan) but not the command's group
    for process in stopped:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
