"""Runs that ran out of GPU memory or came close are pointed at trainmedic plan."""

from trainmedic.run.diagnose.memory import memory_notes
from trainmedic.run.report.model import DeviceInfo

GiB = 1 << 30


def test_out_of_memory_exception_points_at_the_planner():
    notes = memory_notes(
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB (train.py:88)",
        DeviceInfo("cpu", "cpu"),
    )
    assert len(notes) == 1
    assert (
        "trainmedic plan model.py:build" in notes[0]
        and "--max-batch" in notes[0]
        and "train.py:88" in notes[0]
    )


def test_a_peak_above_ninety_percent_of_the_card_is_a_warning_with_the_card_name():
    device = DeviceInfo(
        "cuda",
        "NVIDIA A100-SXM4-80GB",
        {"gpu_memory_bytes": 80 * GiB, "max_memory_allocated_bytes": 75 * GiB},
    )
    (note,) = memory_notes(None, device)
    assert "75.0 GiB of 80.0 GiB (94%)" in note and '--device "NVIDIA A100-SXM4-80GB"' in note


def test_a_run_with_room_to_spare_gets_no_note():
    device = DeviceInfo(
        "cuda", "NVIDIA T4", {"gpu_memory_bytes": 16 * GiB, "max_memory_allocated_bytes": 4 * GiB}
    )
    assert memory_notes(None, device) == []
    assert memory_notes("ValueError: bad shape", device) == []
