"""run_child with real processes: whom a stuck child's stack dump may signal (the stuck runs of
test_preflight_runs.py show the dump itself)."""

from __future__ import annotations

import os
import subprocess

from trainmedic.preflight import child
from trainmedic.preflight.process import run_child


def test_a_stale_site_pid_outside_the_childs_group_gets_no_sigusr2(tmp_path):
    # The instrumented Python process wrote site.pid and exited; a wrapper is still stuck; the
    # pid now belongs to another process (here: one of ours, in its own group). SIGUSR2's default
    # action would kill it.
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        directory = tmp_path / "run"
        directory.mkdir()
        (directory / child.SITE_PID).write_text(str(other.pid))
        outcome = run_child(["sleep", "60"], tmp_path, os.environ, directory, budget=0.5)
        assert outcome.stuck and outcome.returncode is None
        assert other.poll() is None, f"the unrelated process got a signal: {other.returncode}"
    finally:
        other.kill()
        other.wait()
