"""_os.pid_alive with real processes: running, exited and reaped, exited but not yet reaped."""

import os
import subprocess
import sys

from proc_kit import wait_for

from trainmedic._os import pid_alive


def test_a_running_process_is_alive_and_a_reaped_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    assert pid_alive(child.pid)
    child.communicate(b"")
    assert not pid_alive(child.pid)


def test_an_exited_process_its_parent_has_not_reaped_is_gone():
    # A rank or cache builder killed by the OOM killer stays a zombie until its parent waits for it.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: _state(child.pid) == "Z")
    assert not pid_alive(child.pid)
    child.wait()


def test_this_process_is_alive():
    assert pid_alive(os.getpid())


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[-1].split()[0]
