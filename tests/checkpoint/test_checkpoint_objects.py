"""What a checkpoint holds and gives back: containers and plain objects in place, immutable values
in ``resumed.values``, generator states, latest()/last_save facts, the manifest, the schedule of
writes, ``with`` and ``close()``, and keep_last rotation next to phase checkpoints."""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from ckpt_kit import checkpoints, manifest, phase_of, step_of

from trainmedic.checkpoint import Checkpointer


class Thing:
    """A plain object: restored in place through its __dict__."""

    def __init__(self, x: int) -> None:
        self.x = x
        self.seen: list[int] = []


def checkpointer(directory, **kw) -> Checkpointer:
    kw.setdefault("signals", ())
    return Checkpointer(directory, **kw)


def draws(gens: dict) -> list:
    return [
        torch.rand(3, generator=gens["torch_gen"]).tolist(),
        gens["np_gen"].random(3).tolist(),
        gens["np_legacy"].rand(3).tolist(),
        [gens["py"].random() for _ in range(3)],
    ]


def test_objects_come_back_in_place_and_values_in_resumed_values(tmp_path):
    box = {"a": 1, "nested": {"b": [1, 2]}}
    items = [1, 2, 3]
    tags = {"x", "y"}
    thing = Thing(5)
    thing.seen.append(1)
    gens = {
        "torch_gen": torch.Generator().manual_seed(3),
        "np_gen": np.random.default_rng(4),
        "np_legacy": np.random.RandomState(5),
        "py": random.Random(6),
    }
    draws(gens)  # move them off their seeds
    values = {"lr": 0.125, "name": "run-1", "shape": (3, 4), "count": 7, "arr": np.arange(4)}
    ckpt = checkpointer(tmp_path)
    assert ckpt.save(9, box=box, items=items, tags=tags, thing=thing, **gens, **values)
    expected_draws = draws(gens)

    box["a"] = 100
    box["extra"] = True
    items.append(4)
    tags.add("z")
    thing.x, thing.seen = 6, []
    draws(gens)
    fresh_values = {"lr": 1.0, "name": "other", "shape": (), "count": 0, "arr": np.zeros(1)}

    again = checkpointer(tmp_path)
    assert again.restore(box=box, items=items, tags=tags, thing=thing, **gens, **fresh_values, absent={}) == 9
    assert box == {"a": 1, "nested": {"b": [1, 2]}} and items == [1, 2, 3] and tags == {"x", "y"}
    assert (thing.x, thing.seen) == (5, [1])
    assert draws(gens) == expected_draws, "a generator's state was not restored"
    resumed = again.resumed
    for name, value in values.items():
        assert np.array_equal(resumed.values[name], value) if name == "arr" else resumed.values[name] == value
    assert set(resumed.loaded) == {"box", "items", "tags", "thing", *gens, *values}
    assert list(resumed.missing) == ["absent"]
    assert (resumed.step, resumed.phase, Path(resumed.path), list(resumed.skipped)) == (
        9,
        None,
        checkpoints(tmp_path)[-1],
        [],
    )


def test_global_rng_streams_are_restored_and_rng_false_leaves_them(tmp_path):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    ckpt = checkpointer(tmp_path / "with")
    ckpt.save(1, state={})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpointer(tmp_path / "with").restore(state={})
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected

    plain = checkpointer(tmp_path / "without", rng=False)
    plain.save(1, state={})
    assert "_rng.pt" not in manifest(checkpoints(tmp_path / "without")[-1])["files"]
    after = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpointer(tmp_path / "without", rng=False).restore(state={})
    assert (random.random(), np.random.rand(), torch.rand(1).item()) != after


def test_latest_last_save_and_the_manifest_describe_the_checkpoint(tmp_path):
    model = torch.nn.Linear(3, 2)
    ckpt = checkpointer(tmp_path, every=1)
    assert ckpt.latest() is None and ckpt.last_save is None
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    assert ckpt.save(4, model=model, meta={"k": 1})
    assert ckpt.save(5, phase="warmup", model=model, meta={"k": 2})
    info = ckpt.latest()
    path = checkpoints(tmp_path)[-1]
    assert (info.step, info.phase, Path(info.path), tuple(info.phases_done)) == (
        5,
        "warmup",
        path,
        ("warmup",),
    )
    assert (step_of(path), phase_of(path)) == (5, "warmup")
    assert info.seq == int(path.name[:6]) > int(checkpoints(tmp_path)[0].name[:6])
    assert before <= info.time <= dt.datetime.now(dt.timezone.utc)
    assert info.save_seconds > 0 and info.bytes == sum(p.stat().st_size for p in path.glob("*.pt"))
    last = ckpt.last_save
    assert (last.step, Path(last.path), last.bytes) == (5, path, info.bytes) and last.seconds > 0

    facts = manifest(path)
    assert facts["format"] == "trainmedic.checkpoint/1"
    assert (facts["step"], facts["phase"], facts["phases_done"], facts["seq"]) == (
        5,
        "warmup",
        ["warmup"],
        info.seq,
    )
    assert dt.datetime.fromisoformat(facts["time"]) >= before
    assert set(facts["files"]) == {"model.pt", "meta.pt", "_rng.pt"} and set(facts["objects"]) == {
        "model",
        "meta",
    }
    # Tensors go through torch.save, plain values through pickle 5: each without a copy in memory.
    serializers = {"model.pt": "torch", "meta.pt": "pickle", "_rng.pt": "torch"}
    for name, entry in facts["files"].items():
        data = (path / name).read_bytes()
        assert entry == {
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "serializer": serializers[name],
        }
    assert (ckpt.done("warmup"), ckpt.done("train")) == (True, False)


def test_which_calls_write(tmp_path):
    ckpt = checkpointer(tmp_path, every=3, keep_last=10)
    written = [step for step in range(1, 11) if ckpt.save(step, s={"step": step})]
    assert written == [1, 4, 7, 10], "the first call writes, then every 3 steps"
    assert ckpt.save(11, force=True, s={}) and ckpt.save(12, phase="p", s={})
    timed = checkpointer(tmp_path / "timed", every="10m")
    assert [timed.save(step, s={}) for step in (1, 2, 3)] == [True, False, False]


def test_with_block_writes_the_last_skipped_call_on_normal_exit_only(tmp_path):
    state = {"v": 0}
    with checkpointer(tmp_path / "ok", every=100) as ckpt:
        for step in (1, 2, 3):
            state["v"] = step
            ckpt.save(step, state=state)
        assert ckpt.latest().step == 1
    assert ckpt.latest().step == 3 and ckpt.last_save.step == 3
    restored: dict = {}
    checkpointer(tmp_path / "ok").restore(state=restored)
    assert restored == {"v": 3}

    with pytest.raises(ValueError):
        with checkpointer(tmp_path / "failed", every=100) as ckpt:
            ckpt.save(1, state=state)
            ckpt.save(2, state=state)
            raise ValueError("the step blew up")
    assert ckpt.latest().step == 1, "a step interrupted by an exception was written as finished"

    closing = checkpointer(tmp_path / "closed", every=100)
    closing.save(1, state=state)
    closing.save(2, state=state)
    closing.close()
    assert closing.latest().step == 2
    closing.close()  # nothing pending: writes nothing
    assert len(checkpoints(tmp_path / "closed")) == 2


def test_keep_last_keeps_the_newest_and_every_phase_boundary(tmp_path):
    ckpt = checkpointer(tmp_path, every=1, keep_last=3)
    for step in range(1, 11):
        ckpt.save(step, s={"step": step})
        if step == 3:
            ckpt.save(3, phase="warmup", s={"step": 3})
        assert len(checkpoints(tmp_path)) <= 3 + (step >= 3)
    kept = [(step_of(p), phase_of(p)) for p in checkpoints(tmp_path)]
    assert kept == [(3, "warmup"), (8, None), (9, None), (10, None)]
    assert sorted(tmp_path.iterdir()) == sorted(checkpoints(tmp_path)), (
        "something else was left in the directory"
    )
