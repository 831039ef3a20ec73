"""Phases: a run killed in phase 2 resumes phase 2, never redoes phase 1, and gets phase 1's output
back from the phase checkpoint even though the newest step checkpoints do not hold it."""

from __future__ import annotations

import pytest
from ckpt_kit import Child, checkpoints, manifest, phase_of, step_of


@pytest.mark.slow
def test_killed_in_phase_two_resumes_there_with_the_pool_of_phase_one(tmp_path):
    directory = tmp_path / "ckpt"
    first = Child("phases.py", ["--dir", directory, "--hold-at", 12], tmp_path, "first")
    first.wait_for(lambda parts: parts == ["step", "12"], "step 12")
    first.kill()
    assert [p[1] for p in first.find("ran")] == ["pool", "train"]
    pool_digest = first.find("pool")[0][1]

    # keep_last=2 rotated steps 1..10 away; the phase checkpoint of "pool" stays.
    names = [p.name for p in checkpoints(directory)]
    assert [(step_of(n), phase_of(n)) for n in names] == [(0, "pool"), (11, None), (12, None)], names
    assert "pool.pt" not in manifest(checkpoints(directory)[-1])["files"]
    assert manifest(checkpoints(directory)[-1])["phases_done"] == ["pool"]

    second = Child("phases.py", ["--dir", directory], tmp_path, "second")
    second.expect_success()
    _, step, phase, phases_done, done_pool, loaded = second.find("restored")[0]
    assert (step, phases_done, done_pool) == ("12", "pool", "1")
    assert phase == "-", "a step checkpoint inside phase 2 is not itself a phase boundary"
    assert set(loaded.split(",")) == {"pool", "state"}, "the pool was not restored from the phase checkpoint"
    assert [p[1:] for p in second.find("ran")] == [["train", "12"], ["finetune", "30"]], "phase 1 was redone"
    assert second.find("pool")[0][1] == pool_digest, "the pool is not the one phase 1 built"
    assert [int(p[1]) for p in second.find("step")] == list(range(13, 41))

    # Every phase's closing checkpoint survives rotation, next to the keep_last newest.
    final = [(step_of(p), phase_of(p)) for p in checkpoints(directory)]
    assert final == [(0, "pool"), (30, "train"), (40, None), (40, "finetune")], final
    assert manifest(checkpoints(directory)[-1])["phases_done"] == ["pool", "train", "finetune"]

    third = Child("phases.py", ["--dir", directory], tmp_path, "third")
    third.expect_success()
    assert third.find("restored")[0][1:5] == ["40", "finetune", "pool,train,finetune", "1"]
    assert third.find("ran") == [], "a finished run redid a phase"
