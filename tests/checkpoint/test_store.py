"""The checkpoint folder on disk: names, manifest checks, retention, leftovers, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from trainmedic import _os
from trainmedic.checkpoint import serialize, store
from trainmedic.errors import CheckpointError


def _write(directory: Path, seq: int, step: int, phase: str | None = None, payload=None) -> store.Written:
    payloads = {"state": payload if payload is not None else {"w": np.arange(1000.0)}}
    return store.write_checkpoint(directory, seq, step, payloads, {"phase": phase})


def test_write_names_lists_and_verifies(tmp_path):
    written = _write(tmp_path, 1, 100)
    _write(tmp_path, 2, 200, phase="pool warmup")
    assert written.path.name == "000001-step-100"
    entries = store.list_entries(tmp_path)
    assert [(e.seq, e.step, e.phase) for e in entries] == [(2, 200, "pool_warmup"), (1, 100, None)]
    manifest, problem = store.verify(written.path)
    assert problem is None
    facts = manifest["files"]["state.pt"]
    assert (
        manifest["step"] == 100 and facts["serializer"] == "pickle"
    )  # NumPy arrays: pickle 5, never torch.save
    assert facts["bytes"] == (written.path / "state.pt").stat().st_size
    assert (
        serialize.load_file(written.path / "state.pt", facts["serializer"])["w"].sum()
        == np.arange(1000.0).sum()
    )
    assert store.leftovers(tmp_path) == []
    assert store.next_seq(tmp_path) == 3


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: (p / "manifest.json").unlink(), "no manifest.json"),
        (lambda p: (p / "manifest.json").write_text("{not json"), "cannot be read"),
        (
            lambda p: (p / "manifest.json").write_text(json.dumps({"format": "other"})),
            "not a trainmedic.checkpoint/1",
        ),
        (lambda p: (p / "state.pt").unlink(), "state.pt is missing"),
        (lambda p: os.truncate(p / "state.pt", 10), "truncated"),
        (lambda p: _flip_byte(p / "state.pt"), "SHA-256"),
    ],
)
def test_verify_says_what_is_wrong(tmp_path, damage, reason):
    written = _write(tmp_path, 1, 5)
    damage(written.path)
    manifest, problem = store.verify(written.path)
    assert manifest is None
    assert reason in problem


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_keeps_the_newest_and_each_phase_s_last_checkpoint():
    entries = [
        store.Entry(Path(f"/c/{seq}"), seq, seq * 10, phase)
        for seq, phase in [
            (1, None),
            (2, "pool"),
            (3, None),
            (4, "pool"),
            (5, None),
            (6, "train"),
            (7, None),
            (8, None),
        ]
    ]
    kept = {int(p.name) for p in store.to_keep(entries, keep_last=2)}
    assert kept == {8, 7, 6, 4}


def test_remove_leaves_no_checkpoint_looking_directory(tmp_path):
    written = _write(tmp_path, 1, 5)
    store.remove([written.path, tmp_path / "000009-step-9"])
    assert store.list_entries(tmp_path) == [] and store.leftovers(tmp_path) == []


def test_leftovers_of_dead_processes_are_cleaned_and_numbered_past(tmp_path):
    dead = tmp_path / f".tmp-000007-step-70.{_os.HOST}.999999999"
    dead.mkdir()
    trash = tmp_path / ".trash-000003-step-30"
    trash.mkdir()
    # Another host's save on a shared file system: its pid means nothing here, so it is left
    # alone until it has not changed for a day.
    remote = tmp_path / ".tmp-000009-step-90-pool.othernode.4242"
    remote.mkdir()
    assert store.next_seq(tmp_path) == 10
    assert set(store.clean_leftovers(tmp_path)) == {dead, trash}
    assert store.leftovers(tmp_path) == [remote]
    old = remote.stat().st_mtime - 2 * 86400
    os.utime(remote, (old, old))
    assert store.clean_leftovers(tmp_path) == [remote]


def test_a_number_taken_meanwhile_by_another_writer_is_skipped(tmp_path):
    first = _write(tmp_path, 1, 10)
    second = _write(tmp_path, 1, 20)  # this process still believed 1 was free
    assert (first.path.name, second.path.name) == ("000001-step-10", "000002-step-20")
    assert store.verify(second.path)[0]["seq"] == 2


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    class Unpicklable:
        def __reduce__(self):
            raise OSError(28, "No space left on device")

    with pytest.raises(CheckpointError) as info:
        store.write_checkpoint(tmp_path, 1, 5, {"state": Unpicklable()}, {"phase": None})
    message = str(info.value)
    assert "could not save step 5" in message and "previous checkpoints are intact" in message
    assert store.leftovers(tmp_path) == [] and store.list_entries(tmp_path) == []


def test_an_unwritable_directory_is_refused_before_anything_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(CheckpointError) as info:
        store.prepare_directory(blocker / "runs")
    assert str(blocker / "runs") in str(info.value) and "before training starts" in str(info.value)


def test_room_is_checked_against_the_free_space(tmp_path):
    with pytest.raises(CheckpointError, match="free but the next checkpoint needs"):
        store.check_room(tmp_path, 1 << 62, "the next checkpoint")
    store.check_room(tmp_path, 1024, "the next checkpoint")


def test_each_file_gets_the_serializer_that_writes_its_arrays_without_a_copy(tmp_path):
    torch = pytest.importorskip("torch")
    written = store.write_checkpoint(
        tmp_path,
        1,
        5,
        {"model": {"w": torch.ones(3)}, "pool": [np.ones(3)], "nested": {"a": [{"t": torch.ones(1)}]}},
        {"phase": None},
    )
    kinds = {name: facts["serializer"] for name, facts in written.manifest["files"].items()}
    assert kinds == {"model.pt": "torch", "pool.pt": "pickle", "nested.pt": "torch"}


def test_an_object_that_cannot_be_saved_is_named_and_nothing_is_left(tmp_path):
    with pytest.raises(CheckpointError, match="'hook' .*cannot be saved.*state_dict"):
        store.write_checkpoint(tmp_path, 1, 5, {"hook": lambda x: x}, {"phase": None})
    assert store.leftovers(tmp_path) == [] and store.list_entries(tmp_path) == []
