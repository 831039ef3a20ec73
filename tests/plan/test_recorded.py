"""Reading a recorded step: gpu-alloc-trace/1 files, torch's allocator snapshot, and the phases."""

from __future__ import annotations

import gzip
import json

import pytest

from trainmedic.errors import PlanError
from trainmedic.plan.recorded import SCHEMA, from_snapshot, load_recorded, parse_recorded, phase_of_frames

RESULT = {
    "peak_bytes": 3072,
    "reserved_bytes": 2 << 20,
    "before_step_bytes": 512,
    "batch": 8,
    "precision": "bf16",
}


def _frame(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


FORWARD = [
    _frame("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward"),
    _frame("train.py", 9, "step"),
]
OPTIMIZER = [_frame("/usr/lib/python3/site-packages/torch/optim/adam.py", 178, "_init_group")]


def _snapshot(*entries) -> dict:
    return {
        "device_traces": [
            [{"action": a, "addr": addr, "size": size, "frames": frames} for a, addr, size, frames in entries]
        ]
    }


def test_a_snapshot_becomes_a_recording_with_steps_and_phases():
    snapshot = _snapshot(
        ("segment_alloc", 7000, 2 << 20, FORWARD),
        ("alloc", 100, 1024, FORWARD),  # step 1 forward
        ("alloc", 200, 2048, []),  # autograd's engine thread: no Python stack
        ("free_requested", 100, 1024, FORWARD),  # `del out` after backward stays in backward
        ("alloc", 300, 512, OPTIMIZER),
        ("free_completed", 300, 512, OPTIMIZER),  # not an allocator decision: left out
        ("alloc", 100, 1024, FORWARD),  # a forward allocation after the optimizer: step 2
    )
    recorded = from_snapshot(snapshot, RESULT)
    assert [(e.kind, e.nbytes, e.step, e.phase) for e in recorded.events] == [
        ("alloc", 1024, 1, "forward"),
        ("alloc", 2048, 1, "backward"),
        ("free", 1024, 1, "backward"),
        ("alloc", 512, 1, "optimizer"),
        ("alloc", 1024, 2, "forward"),
    ]
    # An address freed and taken again keeps its id: each free pairs with the alloc before it.
    blocks = [e.block for e in recorded.events]
    assert blocks[0] == blocks[2] == blocks[4] and len(set(blocks)) == 3
    assert recorded.segments == [2 << 20]
    assert recorded.events[0].where.startswith("torch/nn/modules/linear.py:134:forward < train.py:9:step")
    assert (recorded.peak_bytes, recorded.reserved_bytes, recorded.before_step_bytes) == (3072, 2 << 20, 512)
    assert (recorded.batch_size, recorded.precision) == (8, "bf16")


def test_a_recording_survives_its_own_file(tmp_path):
    recorded = from_snapshot(
        _snapshot(("alloc", 1, 4096, FORWARD), ("free_requested", 1, 4096, FORWARD)), RESULT
    )
    path = tmp_path / "step.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(recorded.to_dict(), handle)
    again = load_recorded(path)
    assert again.events == recorded.events and again.result == recorded.result


def test_an_out_of_memory_event_marks_the_recording():
    snapshot = _snapshot(("alloc", 1, 4096, FORWARD), ("oom", 0, 1 << 40, FORWARD))
    assert from_snapshot(snapshot, RESULT).out_of_memory


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"schema": "trainmedic.plan/1"}, "is not a gpu-alloc-trace/1 document (schema 'trainmedic.plan/1')"),
        ([1, 2], "is not a gpu-alloc-trace/1 document (schema 'list')"),
        (
            {"schema": SCHEMA, "frames": [], "events": [["a", 1]], "result": RESULT},
            "has a malformed gpu-alloc-trace/1 body",
        ),
        (
            {"schema": SCHEMA, "frames": [], "events": [], "result": {"peak_bytes": 1}},
            "has a malformed gpu-alloc-trace/1 body",
        ),
        (
            {"schema": SCHEMA, "frames": [], "events": [], "result": {"peak_bytes": 0, "reserved_bytes": 0}},
            "records no allocation",
        ),
    ],
)
def test_a_document_that_is_no_recording_is_refused_by_name(document, message):
    with pytest.raises(PlanError, match="step.json") as error:
        parse_recorded(document, "step.json")
    assert message in str(error.value)


def test_unreadable_and_missing_files_are_refused(tmp_path):
    (tmp_path / "broken.json.gz").write_bytes(b"not gzip")
    with pytest.raises(PlanError, match="cannot be read as JSON"):
        load_recorded(tmp_path / "broken.json.gz")
    with pytest.raises(PlanError, match="does not exist"):
        load_recorded(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("frames", "phase"),
    [
        ("torch/optim/optimizer.py:1066:zero_grad < train.py:30:main", "optimizer"),
        ("", "backward"),
        ("torch/autograd/__init__.py:231:_make_grads < torch/_tensor.py:631:backward", "backward"),
        ("torch/nn/modules/conv.py:548:_conv_forward < train.py:12:step", "forward"),
    ],
)
def test_the_phase_is_read_off_the_stack(frames, phase):
    assert phase_of_frames(frames) == phase
