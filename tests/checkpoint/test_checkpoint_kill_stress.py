"""SIGKILL a checkpointed training loop at random moments, dozens of times, most of them mid-save.

Each kill is followed by a restart that must restore, and restore no older a step than the last
save() that returned True before the kill (one newer at most: a save that completed just before
its "saved" line was logged). The run then finishes and must equal an uninterrupted run exactly.
"""

from __future__ import annotations

import pickle
import random
import signal
import time

import pytest
from ckpt_kit import Child, assert_same, checkpoints, manifest, run_child, temp_entries

KILLS = 40
KEEP_LAST = 2
SIZE_MB = 12  # ~12 MB of state: a save takes tens of milliseconds, most of the loop's time


@pytest.mark.slow
def test_random_sigkills_never_fail_a_restore_nor_lose_a_completed_save(tmp_path):
    rng = random.Random(5)
    directory = tmp_path / "ckpt"
    common = ["--dir", directory, "--size-mb", SIZE_MB, "--every", 1, "--keep-last", KEEP_LAST]
    floor = 0  # newest step known saved: restored, or save() returned True, before the last kill
    mid_save = 0  # kills that left a temporary directory the killed run had created
    history = []
    for run in range(KILLS):
        before = set(temp_entries(directory))
        child = Child("numpy_loop.py", [*common, "--total", 10**6], tmp_path, f"run{run}")
        if run % 5 == 4:
            # Random moment from spawn: some of these land during start-up or inside restore().
            time.sleep(rng.uniform(0.0, 0.4))  # the kill's random timing, not a synchronisation
        else:
            child.wait_tag("restored")
            time.sleep(rng.uniform(0.0, 0.25))  # the kill's random timing, not a synchronisation
        code = child.kill()
        assert code == -signal.SIGKILL, (
            f"run {run} ended by itself before the kill ({code}):\n{child.describe()}"
        )

        restored = child.find("restored")
        if restored:
            _, step, _skipped, consistent, torch_loaded = restored[0]
            assert int(step) in (floor, floor + 1), (
                f"run {run} restored step {step}; the last completed save before the kill was step {floor}"
            )
            assert consistent == "1", f"run {run}: the restored state is not the state of step {step}"
            assert torch_loaded == "0", "the numpy-only child imported torch (slow start, pickle expected)"
            floor = int(step)
            saved = [int(p[1]) for p in child.find("step") if p[2] == "1"]
            assert saved == list(range(floor + 1, floor + 1 + len(saved))), f"every=1 skipped a save: {saved}"
            if saved:
                floor = saved[-1]
        history.append(floor)

        complete = checkpoints(directory)
        assert len(complete) <= KEEP_LAST + 1, (
            f"after kill {run}: {len(complete)} complete checkpoints: {complete}"
        )
        leftovers = temp_entries(directory)
        assert len(leftovers) <= 2, f"after kill {run}: temporary directories pile up: {leftovers}"
        if set(leftovers) - before:
            mid_save += 1

    print(f"{KILLS} kills, {mid_save} inside a save, steps reached: {history}")
    assert mid_save >= KILLS // 4, (
        f"only {mid_save} of {KILLS} kills landed inside a save; the test lost its teeth"
    )
    assert floor >= 10, f"the run made almost no progress across {KILLS} restarts: {history}"

    total = floor + 5
    final = run_child(
        "numpy_loop.py", [*common, "--total", total, "--out", tmp_path / "resumed.pkl"], tmp_path, "final"
    )
    assert final.proc.returncode == 0, final.describe()
    assert int(final.find("restored")[0][1]) in (floor, floor + 1)
    reference = run_child(
        "numpy_loop.py",
        ["--plain", "--size-mb", SIZE_MB, "--total", total, "--out", tmp_path / "plain.pkl"],
        tmp_path,
        "plain",
    )
    assert reference.proc.returncode == 0, reference.describe()
    resumed = pickle.loads((tmp_path / "resumed.pkl").read_bytes())
    plain = pickle.loads((tmp_path / "plain.pkl").read_bytes())
    assert resumed["history"] == list(range(1, total + 1))
    assert_same(resumed, plain)

    complete = checkpoints(directory)
    assert len(complete) == KEEP_LAST, complete
    assert manifest(complete[-1])["step"] == total
    assert {f["serializer"] for f in manifest(complete[-1])["files"].values()} == {"pickle"}
    assert temp_entries(directory) == [], (
        "a completed save in a fresh process left stale temporary directories"
    )
