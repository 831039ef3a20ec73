"""Bad input: an unwritable or full directory, a checkpoint of another model, corrupted files, a
deadline already past, reserved or unpicklable objects — each a clear error or a skipped
checkpoint with its reason, never a half-written checkpoint taken for the latest."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from ckpt_kit import checkpoints, published, run_child, temp_entries

from trainmedic.checkpoint import Checkpointer, CheckpointError, CheckpointMismatchError


def checkpointer(directory, **kw) -> Checkpointer:
    kw.setdefault("every", 1)
    kw.setdefault("signals", ())
    return Checkpointer(directory, **kw)


# -- the directory -------------------------------------------------------------------------------


def test_a_directory_that_cannot_be_created_fails_at_construction(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError) as error:
        Checkpointer(blocker / "ckpt")
    assert str(blocker / "ckpt") in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["numpy", "torch"])  # pickle, and torch.save's C++ writer
def test_a_disk_that_fills_mid_save_raises_and_keeps_the_previous_checkpoint(tmp_path, kind):
    directory = tmp_path / "ckpt"
    child = run_child("diskfull.py", ["--dir", directory, "--when", "save", "--kind", kind], tmp_path, "full")
    assert child.proc.returncode == 0, child.describe()
    report = json.loads(child.stdout)
    assert report["first"] is True and "second" not in report, report
    assert "step 2" in report["error"] and "File too large" in report["error"], report["error"]
    assert report["latest"] == 1, "a half-written checkpoint became the latest"
    assert [e for e in report["entries"] if e.startswith(".")] == [], (
        f"the failed save left {report['entries']}"
    )
    assert report["after"] is True and report["latest_after"] == 3, (
        "the Checkpointer is unusable after a failed save"
    )


def test_a_full_disk_is_reported_before_training_starts(tmp_path):
    directory = tmp_path / "ckpt"
    child = run_child("diskfull.py", ["--dir", directory, "--when", "init"], tmp_path, "full-init")
    assert child.proc.returncode == 0, child.describe()
    report = json.loads(child.stdout)
    assert str(directory) in report.get("error", ""), report
    assert temp_entries(directory) == []


# -- a checkpoint from another model ---------------------------------------------------------------


def model(head: int, extra: str) -> torch.nn.Module:
    torch.manual_seed(head)
    return torch.nn.ModuleDict(
        {"enc": torch.nn.Linear(4, 8), "head": torch.nn.Linear(8, head), extra: torch.nn.Linear(3, 3)}
    )


def test_a_checkpoint_of_another_model_names_the_keys_and_changes_nothing(tmp_path):
    saved = model(2, "old")
    ckpt = checkpointer(tmp_path)
    assert ckpt.save(
        1, model=saved, optimizer=torch.optim.SGD(saved.parameters(), lr=0.1), notes={"epoch": 1}
    )

    other = model(3, "new")
    optimizer = torch.optim.SGD(other.parameters(), lr=0.5)
    notes = {"epoch": 7}
    before = {k: v.clone() for k, v in other.state_dict().items()}
    rng_before = torch.get_rng_state()
    with pytest.raises(CheckpointMismatchError) as error:
        checkpointer(tmp_path).restore(model=other, optimizer=optimizer, notes=notes)
    message = str(error.value)
    for key in ("new.weight", "old.weight", "head.weight", "head.bias"):
        assert key in message, f"{key} not named in: {message}"
    assert "'model'" in message
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items()), "the model was modified"
    assert optimizer.param_groups[0]["lr"] == 0.5, "the optimizer was modified"
    assert notes == {"epoch": 7}, "another object of the same restore was modified"
    assert torch.equal(rng_before, torch.get_rng_state()), "the RNG was restored from a mismatched checkpoint"


# -- corrupted checkpoints ---------------------------------------------------------------------------


def flip_bytes(path):
    data = bytearray((path / "state.pt").read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 8):
        data[i] ^= 0xFF
    (path / "state.pt").write_bytes(bytes(data))


def truncate(path):
    data = (path / "state.pt").read_bytes()
    (path / "state.pt").write_bytes(data[: len(data) // 2])


def delete_manifest(path):
    (path / "manifest.json").unlink()


def garbage_manifest(path):
    (path / "manifest.json").write_bytes(b"\x00{not json")


def foreign_manifest(path):
    (path / "manifest.json").write_text(json.dumps({"format": "something/9", "step": 3, "files": {}}))


CORRUPTIONS = {
    "flipped bytes": (flip_bytes, "state.pt"),
    "truncated": (truncate, "state.pt"),
    "no manifest": (delete_manifest, "manifest"),
    "garbage manifest": (garbage_manifest, "manifest"),
    "foreign manifest": (foreign_manifest, "manifest"),
}


@pytest.mark.parametrize("damage", list(CORRUPTIONS))
def test_a_corrupted_checkpoint_is_skipped_with_its_reason(tmp_path, caplog, damage):
    corrupt, named = CORRUPTIONS[damage]
    ckpt = checkpointer(tmp_path, keep_last=5)
    for step in (1, 2, 3):
        assert ckpt.save(step, state={"step": step, "w": np.full(10_000, step)})
    newest = checkpoints(tmp_path)[-1]
    corrupt(newest)

    fresh = checkpointer(tmp_path, keep_last=5)
    assert fresh.latest().step == 2
    state: dict = {}
    with caplog.at_level(logging.WARNING, logger="trainmedic.checkpoint"):
        assert fresh.restore(state=state) == 2
    assert state["step"] == 2 and np.array_equal(state["w"], np.full(10_000, 2))
    reasons = {Path(path): reason for path, reason in fresh.resumed.skipped}
    assert newest in reasons, fresh.resumed.skipped
    assert named in reasons[newest], reasons[newest]
    assert newest.name in caplog.text and named in caplog.text
    # The next save supersedes it and the corrupt one is dropped, not kept as a "newest" forever.
    assert fresh.save(3, force=True, state=state)
    assert newest not in published(tmp_path)
    assert fresh.latest().step == 3


# -- arguments ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "deadline",
    [
        dt.datetime.now() - dt.timedelta(minutes=5),
        dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1),
        "0s",
        dt.timedelta(seconds=-3),
        -1.0,
    ],
    ids=["naive datetime", "aware datetime", "0s", "negative timedelta", "negative seconds"],
)
def test_a_deadline_already_past_is_refused_at_construction(tmp_path, deadline):
    with pytest.raises(CheckpointError) as error:
        Checkpointer(tmp_path, deadline=deadline, signals=())
    message = str(error.value)
    assert "deadline" in message, message
    assert "past" in message or ("negative" in message and "-1.0" in message), message


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"keep_last": 0}, "keep_last"),
        ({"every": 0}, "every"),
        ({"every": "soon"}, "soon"),
        ({"signals": ("SIGNOPE",)}, "SIGNOPE"),
        ({"deadline": "tomorrow"}, "tomorrow"),
    ],
)
def test_bad_arguments_are_named(tmp_path, kwargs, named):
    with pytest.raises(CheckpointError) as error:
        Checkpointer(tmp_path, **kwargs)
    assert named in str(error.value)


def test_names_with_a_leading_underscore_are_refused(tmp_path):
    ckpt = checkpointer(tmp_path)
    with pytest.raises(CheckpointError) as error:
        ckpt.save(1, _rng={"mine": 1})
    assert "_rng" in str(error.value)
    with pytest.raises(CheckpointError):
        ckpt.restore(_private={})
    assert checkpoints(tmp_path) == []


def test_an_object_that_cannot_be_pickled_is_named_and_nothing_is_written(tmp_path):
    ckpt = checkpointer(tmp_path)
    assert ckpt.save(1, state={"a": 1})
    with pytest.raises(CheckpointError) as error:
        ckpt.save(2, force=True, state={"a": 2}, lock=threading.Lock())
    assert "'lock'" in str(error.value)
    assert ckpt.latest().step == 1
    assert temp_entries(tmp_path) == [] and len(checkpoints(tmp_path)) == 1


def test_a_bad_step_is_refused(tmp_path):
    ckpt = checkpointer(tmp_path)
    for step in (1.5, "3", -1):
        with pytest.raises(CheckpointError) as error:
            ckpt.save(step, force=True, state={})
        assert repr(step) in str(error.value) or str(step) in str(error.value)
    assert ckpt.save(np.int64(4), state={}) and ckpt.latest().step == 4
