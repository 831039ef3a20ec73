"""_os.pid_alive with real processes: running, exited and reaped, exited but not yet reaped; and
_os.current_frames, the stack sampler's read of every thread's frame."""

import gc
import os
import subprocess
import sys
import threading

import pytest
from proc_kit import wait_for

from trainmedic import _os
from trainmedic._os import current_frames, pid_alive


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


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython 3.12 holds collections off itself")
def test_no_garbage_collection_runs_inside_the_frames_read(monkeypatch):
    # A collection inside sys._current_frames() on 3.11 can deadlock the process (CPython
    # gh-106883): a test worker hung so, its sampler thread in gc_collect_main.
    seen = []

    def frames():
        seen.append(gc.isenabled())
        return {threading.get_ident(): sys._getframe()}

    monkeypatch.setattr(_os.sys, "_current_frames", frames)
    assert threading.get_ident() in current_frames()
    assert seen == [False] and gc.isenabled()


def test_collections_the_program_turned_off_stay_off(monkeypatch):
    seen = []
    monkeypatch.setattr(_os.sys, "_current_frames", lambda: seen.append(gc.isenabled()) or {})
    gc.disable()
    try:
        current_frames()
        assert seen == [False] and not gc.isenabled()
    finally:
        gc.enable()
