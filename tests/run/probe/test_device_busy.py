"""The GPU's busy time: the union of its activities' spans, and a probe that never breaks a run."""

import torch

from trainmedic.run.probe.device_busy import DeviceBusy, DeviceBusyProbe, union_seconds


def test_overlapping_spans_count_once_and_gaps_not_at_all():
    ms = 1_000_000  # ns
    spans = [(0, 2 * ms), (1 * ms, 3 * ms), (10 * ms, 11 * ms), (10 * ms, 10 * ms + 5), (20 * ms, 20 * ms)]
    assert union_seconds(spans) == 0.004  # 0-3 ms and 10-11 ms; a second stream inside them adds nothing
    assert union_seconds(list(reversed(spans))) == 0.004
    assert union_seconds([]) == 0.0


def test_per_step_busy_time():
    busy = DeviceBusy(busy_s=0.006, steps=2, activities=900)
    assert busy.measured and busy.per_step_s == 0.003
    assert not DeviceBusy().measured and not DeviceBusy(steps=2).measured


def test_without_cuda_the_probe_records_why_and_the_run_goes_on():
    probe = DeviceBusyProbe()
    probe.start()
    x = torch.randn(64, 64)
    (x @ x).sum()
    probe.stop(steps=2)
    if torch.cuda.is_available():  # a GPU machine: the kernels above ran on the CPU, so none were seen
        assert not probe.result.measured
        return
    assert not probe.result.measured
    assert probe.result.problem.startswith("the profiler did not start")
