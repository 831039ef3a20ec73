"""SIGKILL a process at every file-system call a save makes, one kill per process.

The child wraps os.mkdir/os.fsync/os.rename/os.replace/os.unlink/os.rmdir/shutil.rmtree so that
the Nth call made inside ``save(3)`` SIGKILLs the process before it runs: before the data, between
the files, before the manifest, before the publishing rename, after it, before and during the
deletion of the oldest checkpoint. A calibration run (no kill) lists the calls. After each kill a
fresh Checkpointer must restore step 2 until the rename published step 3, step 3 from then on,
name the interrupted save it cleaned up, and save again leaving only keep_last checkpoints.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from ckpt_kit import CKPT_NAME, Child, ForkedChild, checkpoints, manifest, published, step_of, temp_entries

from trainmedic.checkpoint import Checkpointer

BATCH = 4  # children started together: each is a short, mostly start-up bound process


def state_of(step: int) -> dict:
    return {"step": step, "blob": np.arange(50_000, dtype=np.int64) * step}


def blob(state: dict) -> np.ndarray:
    return np.asarray(state["blob"])


def start(tmp_path, args: list, tag: str, serializer: str) -> Child:
    if serializer == "torch":
        # Forked from a server that imported torch once: a torch child per kill point stays cheap.
        return ForkedChild("kill_points.py", [*args, "--torch"], tmp_path, tag)
    return Child("kill_points.py", args, tmp_path, tag)


def calibrate(tmp_path, during: str, directory, serializer: str = "pickle") -> list[list[str]]:
    trace = tmp_path / f"trace-{during}.json"
    child = start(
        tmp_path, ["--dir", directory, "--during", during, "--trace", trace], f"calib-{during}", serializer
    )
    assert child.finish() == 0, child.describe()
    assert manifest(checkpoints(directory)[-1])["files"]["state.pt"]["serializer"] == serializer
    return json.loads(trace.read_text())


def kill_runs(tmp_path, during: str, count: int, setup=None, serializer: str = "pickle") -> dict[int, tuple]:
    """Run the child once per kill point 1..count (+ one that is not killed); return {n: (dir, child)}."""
    runs = {}
    points = list(range(1, count + 2))
    for first in range(0, len(points), BATCH):
        started = []
        for n in points[first : first + BATCH]:
            directory = tmp_path / f"{during}-kill-{n}"
            if setup is not None:
                setup(directory)
            args = ["--dir", directory, "--during", during, "--arm-at", n]
            started.append((n, directory, start(tmp_path, args, f"{during}-{n}", serializer)))
        for n, directory, child in started:
            code = child.finish()
            expected = -signal.SIGKILL if n <= count else 0
            assert code == expected, f"kill point {n}: exit {code}, expected {expected}:\n{child.describe()}"
            runs[n] = (directory, child)
    return runs


def restore_fresh(directory, caplog):
    ckpt = Checkpointer(directory, keep_last=2, every=1, signals=())
    state, extra = {}, {}
    before = temp_entries(directory)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trainmedic.checkpoint"):
        step = ckpt.restore(state=state, extra=extra)
    return ckpt, step, state, extra, before


@pytest.mark.slow
@pytest.mark.parametrize("serializer", ["pickle", "torch"])
def test_a_kill_at_any_point_of_a_save_restores_the_newest_complete_checkpoint(tmp_path, caplog, serializer):
    trace = calibrate(tmp_path, "save", tmp_path / "calib-save", serializer)
    names = [call[0] for call in trace]
    publish = [
        i + 1
        for i, call in enumerate(trace)
        if call[0] in ("os.rename", "os.replace", "shutil.move")
        and CKPT_NAME.match(call[-1].rsplit("/", 1)[-1])
        and step_of(call[-1]) == 3
    ]
    assert len(publish) == 1, f"expected one rename publishing step 3 in {trace}"
    publish_at = publish[0]
    fsyncs_before = names[: publish_at - 1].count("os.fsync")
    assert fsyncs_before >= 3, f"the files and the directory must be fsynced before the rename: {trace}"
    deletes = [i + 1 for i, call in enumerate(trace) if any("-step-1" in str(arg) for arg in call[1:])]
    assert deletes and min(deletes) > publish_at, (
        f"the oldest checkpoint was touched before step 3 was published: {trace}"
    )

    runs = kill_runs(tmp_path, "save", len(trace), serializer=serializer)
    for n, (directory, _child) in runs.items():
        where = (
            f"killed before call {n}/{len(trace)} {trace[n - 1][:2] if n <= len(trace) else '(not killed)'}"
        )
        assert len(checkpoints(directory)) <= 3, f"{where}: {checkpoints(directory)}"
        ckpt, step, state, extra, before = restore_fresh(directory, caplog)
        expected = 3 if n > publish_at else 2
        assert step == expected, f"{where}: restored step {step}, expected {expected}"
        assert state["step"] == step and np.array_equal(blob(state), state_of(step)["blob"]), where
        assert extra == {"lr": 0.5}, where
        assert ckpt.latest().step == step, where

        interrupted = [p for p in before if p.name.startswith(".tmp-")]
        skipped = {Path(p).name: reason for p, reason in ckpt.resumed.skipped}
        for path in interrupted:
            assert path.name in skipped, (
                f"{where}: restore did not report the interrupted save {path.name}: {skipped}"
            )
            assert "interrupted" in skipped[path.name], skipped[path.name]
            assert path.name in caplog.text, f"{where}: the interrupted save is not logged:\n{caplog.text}"
        if 1 < n <= publish_at:
            assert interrupted, (
                f"{where}: a save killed before publishing left no temporary directory to report"
            )
        assert temp_entries(directory) == [], f"{where}: leftovers after restore: {temp_entries(directory)}"

        assert ckpt.save(4, state=state_of(4), extra=extra), where
        assert [step_of(p) for p in published(directory)] == [expected, 4], f"{where}: {published(directory)}"
        assert temp_entries(directory) == [], where


@pytest.mark.slow
def test_a_kill_while_the_checkpointer_starts_leaves_nothing_behind(tmp_path, caplog):
    """Killed in the constructor's write probe or in restore(): the next start is clean."""
    seeded = tmp_path / "seeded"
    calibrate(tmp_path, "save", seeded)  # steps 2 and 3 on disk

    def setup(directory):
        shutil.copytree(seeded, directory)

    setup(tmp_path / "calib-init-dir")
    trace = calibrate(tmp_path, "init", tmp_path / "calib-init-dir")
    assert "os.fsync" in [call[0] for call in trace], (
        f"construction does not prove the directory takes a synced file: {trace}"
    )
    runs = kill_runs(tmp_path, "init", len(trace), setup=setup)
    for n, (directory, _child) in runs.items():
        where = f"killed before init call {n}/{len(trace)} {trace[n - 1][:2] if n <= len(trace) else '(not killed)'}"
        ckpt, step, state, extra, _before = restore_fresh(directory, caplog)
        # Step 3 was on disk before; the child that was not killed went on to save 4, 5 and 6.
        expected = 3 if n <= len(trace) else 6
        assert step == expected and state["step"] == expected, where
        assert ckpt.save(step + 1, state=state_of(step + 1), extra=extra), where
        assert temp_entries(directory) == [], (
            f"{where}: a start-up killed mid-way leaves {temp_entries(directory)} forever"
        )
        assert len(published(directory)) == 2, where
