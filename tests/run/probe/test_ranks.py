"""Rank identity from torchrun's environment, and the per-rank parts folder."""

from __future__ import annotations

import subprocess
import sys

from trainmedic._os import HOST
from trainmedic.run.probe import ranks
from trainmedic.run.probe.ranks import RankIdentity

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "abc"}


def test_identity_comes_from_torchruns_environment():
    me = RankIdentity.from_env(TORCHRUN)
    assert (me.rank, me.local_rank, me.world_size, me.run_id, me.host) == (1, 1, 2, "abc", HOST)


def test_each_torchrun_restart_attempt_is_a_run_of_its_own():
    again = RankIdentity.from_env({**TORCHRUN, "TORCHELASTIC_RESTART_COUNT": "2"})
    assert again.run_id == "abc-restart2"
    assert RankIdentity.from_env({**TORCHRUN, "TORCHELASTIC_RESTART_COUNT": "0"}).run_id == "abc"


def test_a_single_process_is_no_rank_unless_a_parts_folder_asks_for_one():
    assert RankIdentity.from_env({}) is None
    assert RankIdentity.from_env({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert RankIdentity.from_env({"RANK": "0", "WORLD_SIZE": "1", ranks.PARTS_ENV: "/tmp/x"}) is not None
    assert RankIdentity.from_env({"RANK": "2", "WORLD_SIZE": "2"}) is None  # not a rank of that world
    assert RankIdentity.from_env({"RANK": "x", "WORLD_SIZE": "2"}) is None


def test_parts_of_another_run_in_a_reused_folder_are_never_read(tmp_path):
    me = RankIdentity.from_env(TORCHRUN)
    folder = ranks.parts_dir(me, {ranks.PARTS_ENV: str(tmp_path)})
    ranks.write_part(folder, me, ranks.DONE, {"report": {"x": 1}})
    assert ranks.read_parts(folder, 2, run_id="abc")[1]["report"] == {"x": 1}
    assert ranks.read_parts(folder, 2, run_id="other") == {}
    (folder / "rank-00000.json").write_text("{not json")
    assert set(ranks.read_parts(folder, 2)) == {1}


def test_waiting_ends_when_a_running_ranks_process_is_gone(tmp_path):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead = RankIdentity(0, 0, 2, HOST, int(gone.stdout), "abc")
    ranks.write_part(tmp_path, dead, ranks.RUNNING)
    ranks.write_part(tmp_path, RankIdentity(1, 1, 2, HOST, 1, "abc"), ranks.DONE)
    parts = ranks.wait_for_parts(tmp_path, 2, timeout_s=60)  # no wait: both are settled
    assert parts[0]["state"] == ranks.RUNNING and parts[1]["state"] == ranks.DONE


def test_waiting_for_a_rank_that_never_writes_stops_at_the_timeout(tmp_path):
    now = [0.0]
    pauses = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    parts = ranks.wait_for_parts(tmp_path, 2, timeout_s=1.0, clock=lambda: now[0], pause=pause)
    assert parts == {} and 1.0 <= now[0] < 1.2 and pauses
