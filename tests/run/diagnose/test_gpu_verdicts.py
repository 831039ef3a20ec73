"""GPU verdicts from recorded H200 measurements (benchmarks/results/gpu_zoo-h200-2026-11-26.json).

No GPU runs here: the diagnosis inputs are built with the numbers the H200 recorded for
tests/scenarios/sync.py and memory_bandwidth.py, plus what the new measurements add: the
FLOPs and bytes of the census steps (counted for real on the CPU, on the scenario's own model
at CPU size: intensity does not depend on the volume's size) and the time inside synchronising
calls (probe/sync_waits.py). The H200 run predates the sync-wait timer, so its waits are an
assumption, stated in each test.
"""

import dataclasses

import pytest
import torch
from torch import nn

from trainmedic.run.diagnose import diagnose, intensity, launches
from trainmedic.run.diagnose.resolve import Cost
from trainmedic.run.probe.call_floor import CallCost
from trainmedic.run.probe.census import CallTally, Census
from trainmedic.run.probe.device_busy import DeviceBusy
from trainmedic.run.probe.op_costs import OpCostCounter, OpCosts
from trainmedic.run.probe.recorder import AFTER_MODEL
from trainmedic.run.probe.sync_waits import SyncWaits
from trainmedic.run.report.model import DeviceInfo

H200 = DeviceInfo("cuda", "NVIDIA H200", {"nvml": {"available": True, "util_gpu_pct_mean": 25.0}})
STEPS = 36  # steady steps of each recorded run
ms = 1e-3


def _on_gpu(m, **measured):
    return dataclasses.replace(m, device=H200, **measured)


# --- memory_bandwidth.py: 118.9 ms steps, compute 100 %, split optimizer 95 / forward 3 / backward 2 ---


class _ResBlock3d(nn.Module):  # tests/scenarios/memory_bandwidth.py's block
    def __init__(self, channels=16):
        super().__init__()
        self.norm = nn.GroupNorm(4, channels)
        self.proj = nn.Conv3d(channels, channels, kernel_size=1)
        self.gamma = nn.Parameter(torch.full((1, channels, 1, 1, 1), 0.1))

    def forward(self, x):
        return x + self.gamma * self.proj(nn.functional.silu(self.norm(x)))


def _counted(model, inputs, target, optimizer):
    def step():
        loss = nn.functional.l1_loss(model(inputs), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()
    counter = OpCostCounter()
    counter.start()
    try:
        step()
        step()
    finally:
        counter.stop(2)
    return counter.snapshot()


def _dosenet_costs(size=16):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(2, 16, 1), *[_ResBlock3d() for _ in range(8)], nn.Conv3d(16, 1, 1))
    x = torch.rand(2, 2, size, size, size)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999))
    return _counted(model, x, x[:, :1], optimizer)


def _mlp_costs():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    )
    x = torch.randn(1024, 1024)
    return _counted(model, x, torch.randn(1024, 10), torch.optim.SGD(model.parameters(), lr=0.01))


def _memory_bandwidth_run(measure):
    compute = 115.4 * ms * STEPS
    lines = {
        ("compute", "optimizer", "memory_bandwidth.py:63", "memory_bandwidth.py:1:<module>"): 0.95 * compute,
        ("compute", "forward", "memory_bandwidth.py:40", "memory_bandwidth.py:39:forward"): 0.03 * compute,
        ("compute", "backward", "memory_bandwidth.py:62", "memory_bandwidth.py:1:<module>"): 0.02 * compute,
    }
    # 504 calls a step; the 8 blocks' forwards issue ~6 each (too few for a tiny-op loop, as on the H200).
    ops = {"memory_bandwidth.py:1:<module>": 2 * 456, "memory_bandwidth.py:39:forward": 2 * 48}
    return measure(lines, [118.9 * ms] * STEPS, ops_by_function=ops, census_steps=2)


@pytest.mark.slow
def test_memory_bandwidth_scenario_reads_as_memory_bandwidth_at_its_forward_line(completed, measure):
    m = _on_gpu(_memory_bandwidth_run(measure), op_costs=_dosenet_costs())
    report = diagnose(m, ["memory_bandwidth.py"], completed)
    top = report.findings[0]
    assert report.bottleneck == "memory_bandwidth" and top.category == "memory_bandwidth"
    assert top.where == "memory_bandwidth.py:40"
    assert top.expected_speedup > 1
    bound = intensity.judge(m.op_costs, m.device)
    assert bound.intensity < 5 < bound.ridge  # a few FLOP per byte against a ridge of ~100 (TF32 convs)
    assert bound.bandwidth_share > 0.9
    assert f"arithmetic intensity {bound.intensity:.2g} FLOP/byte" in top.evidence
    assert f"ridge point of {bound.ridge:.0f} FLOP/byte" in top.evidence
    assert "split: optimizer 95%, forward 3%, backward 2%" in top.evidence


@pytest.mark.slow
def test_a_matmul_heavy_step_stays_compute(completed, measure):
    m = _on_gpu(_memory_bandwidth_run(measure), op_costs=_mlp_costs())
    report = diagnose(m, ["mlp.py"], completed)
    assert report.bottleneck == "compute" and report.findings[0].where == "memory_bandwidth.py:40"
    bound = intensity.judge(m.op_costs, m.device)
    assert bound.intensity > bound.ridge and not bound.bandwidth_bound
    assert "arithmetic intensity" in report.findings[0].evidence


@pytest.mark.slow
def test_no_roofline_verdict_without_counts_a_known_card_or_a_gpu(completed, measure):
    costs = _dosenet_costs(size=8)
    assert intensity.judge(costs, DeviceInfo("cpu", "test cpu", {})) is None
    assert intensity.judge(costs, DeviceInfo("cuda", "Some Future GPU 9000", {})) is None
    assert intensity.judge(OpCosts(), H200) is None
    m = _on_gpu(_memory_bandwidth_run(measure))  # the census counted nothing (e.g. a Keras fit)
    assert diagnose(m, ["memory_bandwidth.py"], completed).bottleneck == "compute"


# --- sync.py: 29.5 ms steps; 599 torch calls a step at 31 µs in <module>, 55 % of the step at line 54 ---

MODULE, BLOCK = "sync.py:1:<module>", "sync.py:37:forward"
SYNC_OPS = {MODULE: 2 * 599, BLOCK: 2 * 384}  # 983 calls a step over 2 census steps


def _waits(per_step, calls_per_step=8, where="sync.py:55", function=MODULE):
    return SyncWaits(
        seconds_by_where={where: per_step * STEPS} if per_step else {},
        calls_by_where={where: calls_per_step * STEPS} if per_step else {},
        function_by_where={where: function},
        call_by_where={where: "item"},
        total_s=per_step * STEPS,
        calls=calls_per_step * STEPS,
        measured=True,
    )


def test_sync_as_recorded_with_short_waits_stays_launch_bound(completed, measure):
    # The H200 sampler saw no time at line 55 (sync 0.0 although its .item() line rule was on):
    # the host returned from .item() at once. Assumed: the timer measures 0.2 ms a step there.
    lines = {
        ("compute", "backward", "sync.py:54", MODULE): 16.2 * ms * STEPS,
        ("compute", "forward", "sync.py:53", MODULE): 1.5 * ms * STEPS,
        ("compute", "optimizer", "sync.py:57", MODULE): 1.0 * ms * STEPS,
        ("compute", "forward", "sync.py:39", BLOCK): 10.8 * ms * STEPS,
    }
    m = measure(lines, [29.5 * ms] * STEPS, ops_by_function=SYNC_OPS, census_steps=2)
    report = diagnose(_on_gpu(m, sync_waits=_waits(0.2 * ms)), ["sync.py"], completed)
    top = report.findings[0]
    assert report.bottleneck == "tiny_ops" and top.where == "sync.py:54"
    # 18.7 ms in <module> less the 0.2 ms of waits, over 599 calls (the recorded 31.3 µs included them)
    assert "599 torch calls per step at 30.9 µs each" in top.evidence, top.evidence
    assert "the host waited only 0.2 ms per step inside synchronising calls" in top.evidence


@pytest.mark.parametrize("slot, kind", [("sync", "host read"), (AFTER_MODEL, "")])
def test_sync_with_the_host_waiting_in_item_reads_as_sync_at_the_item_line(completed, measure, slot, kind):
    # Same step, same census; assumed: the timer measures 16 ms a step inside the 8 .item() calls
    # of line 55 and the sampler sees the host there (as a read by the line's text, or as plain
    # user code when the text does not look like one, e.g. `if loss < best:`).
    lines = {
        (slot, kind, "sync.py:55", MODULE): 16.0 * ms * STEPS,
        ("compute", "backward", "sync.py:54", MODULE): 4.0 * ms * STEPS,
        ("compute", "forward", "sync.py:53", MODULE): 2.0 * ms * STEPS,
        ("compute", "optimizer", "sync.py:57", MODULE): 1.5 * ms * STEPS,
        ("compute", "forward", "sync.py:39", BLOCK): 6.0 * ms * STEPS,
    }
    m = measure(lines, [29.5 * ms] * STEPS, ops_by_function=SYNC_OPS, census_steps=2)
    report = diagnose(_on_gpu(m, sync_waits=_waits(16.0 * ms)), ["sync.py"], completed)
    top = report.findings[0]
    assert report.bottleneck == "sync" and top.category == "sync"
    assert top.where == "sync.py:55"
    assert "most in item() at sync.py:55 (16.0 ms per step)" in top.evidence
    assert report.breakdown["sync"] == pytest.approx(16.0 / 29.5, abs=0.01)
    # The launching around it is still a tiny-op loop, timed without the waits (7.5 ms / 599 calls).
    assert report.breakdown["tiny_ops"] == pytest.approx(13.5 / 29.5, abs=0.01)


# --- launch-bound steps ---
# A GPU step bound by its kernel launches is not compute, and not memory_bandwidth.
#
# pytorch/examples' MNIST on the H200 (benchmarks/results/wild-cuda-nvidia-h200-2026-11-27.json):
# 2.7 ms steps, the model 100 % of them (backward 44 %, forward 32 %, optimizer 24 %), 167 calls a
# step, and a roofline of its counted ops that put 95 % of the arithmetic under the bandwidth
# slope: the report said "memory-bandwidth-bound kernels, a larger batch does not help". With the
# device's busy time (wild-cuda-nvidia-h200-launches-2026-11-27.json) the GPU was busy 0.4 ms of
# the model's 2.9-3.3 ms a step, and a 4x batch took 2.8x the step time, not 4x.

MNIST_STEPS = 54


def _mnist_run(measure):
    model = 2.7 * ms * MNIST_STEPS
    lines = {
        ("compute", "backward", "main.py:45", "main.py:36:train"): 0.44 * model,
        ("compute", "forward", "main.py:24", "main.py:20:forward"): 0.20 * model,
        ("compute", "forward", "main.py:21", "main.py:20:forward"): 0.12 * model,
        ("compute", "optimizer", "main.py:46", "main.py:36:train"): 0.24 * model,
    }
    census = Census(
        steps=2,
        by_function={"main.py:36:train": CallTally(calls=18)},
        library_calls=316,
        floors={"cuda": CallCost("cuda", floor_s=8.5e-6, byte_s=1e-11, flop_s=1e-13)},
    )
    m = measure(lines, [2.7 * ms] * MNIST_STEPS, census_steps=2)
    # the roofline's verdict on MNIST's counted ops: bandwidth-bound (the recorded report's)
    return dataclasses.replace(m, device=H200, op_costs=_dosenet_costs(size=8), census=census)


@pytest.mark.slow
def test_a_step_whose_gpu_idles_while_python_launches_is_launch_bound(completed, measure):
    # recorded: 0.4 ms of kernels, copies and memsets a step (MNIST's convolutions and Adam's
    # foreach kernels at batch 32 run a few µs each)
    m = dataclasses.replace(
        _mnist_run(measure), device_busy=DeviceBusy(busy_s=0.8 * ms, steps=2, activities=600)
    )
    report = diagnose(m, ["main.py"], completed)
    top = report.findings[0]
    assert report.bottleneck == "tiny_ops" and (top.category, top.kind) == ("tiny_ops", "launches")
    assert top.where == "main.py:24"  # the model's heaviest forward line, as for its compute
    assert "the GPU was busy 0.4 ms of the model's 2.7 ms per step (15%" in top.evidence
    assert "split: backward 44%, forward 32%, optimizer 24%" in top.evidence
    assert "larger batch costs little more" in top.fix and 'mode="reduce-overhead"' in top.fix
    assert "does not help" not in top.fix
    assert "167 calls a step" in top.fix
    assert 2 < top.expected_speedup < 4  # 1 / (0.15 + 0.85 / 4)
    assert report.breakdown["tiny_ops"] == 1.0 and report.breakdown["memory_bandwidth"] == 0.0


@pytest.mark.slow
def test_a_busy_device_keeps_the_roofline_verdict(completed, measure):
    # tests/scenarios/memory_bandwidth.py on the H200: NVML read the GPU 99 % busy
    m = _memory_bandwidth_run(measure)
    m = dataclasses.replace(
        m,
        device=H200,
        op_costs=_dosenet_costs(),
        device_busy=DeviceBusy(busy_s=2 * 110 * ms, steps=2, activities=1000),
    )
    report = diagnose(m, ["memory_bandwidth.py"], completed)
    assert report.bottleneck == "memory_bandwidth" and report.findings[0].kind == "model"
    assert "the GPU was busy 110.0 ms of the model's 115.4 ms per step (95%" in report.findings[0].evidence
    assert not any(n.startswith("Too close to call between the kernels") for n in report.notes)


@pytest.mark.slow
def test_between_the_bands_the_model_is_compute_and_the_report_says_it_is_close(completed, measure):
    m = dataclasses.replace(
        _mnist_run(measure), device_busy=DeviceBusy(busy_s=2 * 1.9 * ms, steps=2, activities=600)
    )
    report = diagnose(m, ["main.py"], completed)
    assert report.bottleneck == "compute"  # not memory_bandwidth: its kernels are not what the step waits for
    note = next(n for n in report.notes if n.startswith("Too close to call between the kernels"))
    assert "busy 1.9 ms of the model's 2.7 ms per step (70%" in note


@pytest.mark.slow
def test_without_the_busy_time_the_verdict_is_unchanged_and_the_report_says_why(completed, measure):
    m = dataclasses.replace(
        _mnist_run(measure), device_busy=DeviceBusy(problem="the profiler did not start (x)")
    )
    report = diagnose(m, ["main.py"], completed)
    assert report.bottleneck == "memory_bandwidth"
    assert any("busy time was not measured (the profiler did not start (x))" in n for n in report.notes)


def test_the_bands():
    def cost(category, seconds):
        return Cost("compute", category, "forward", "a.py:1", "a.py:1:f", seconds)

    costs = [cost("compute", 0.6), cost("memory_bandwidth", 0.4), cost("data", 5.0)]
    # nanoGPT's shakespeare_char model on the H200, recorded: 6.3 ms busy of the model's 14.3-16.1 ms
    # (39-44 %), the same side of the line in every run; a 4x batch took 1.6-2.4x the step time
    for busy_s, verdict in [
        (0.39, "launches"),
        (0.44, "launches"),
        (0.7, "close"),
        (0.8, "device"),
        (1.4, "device"),
    ]:
        judged = launches.judge(costs, DeviceBusy(busy_s=busy_s, steps=1, activities=10), n_steps=1)
        assert judged.verdict == verdict, busy_s
    settled = launches.settle(costs, launches.judge(costs, DeviceBusy(0.1, 1, 10), 1))
    assert [(c.category, c.kind, c.phase) for c in settled] == [
        ("tiny_ops", "launches", "forward"),
        ("tiny_ops", "launches", "forward"),
        ("data", "forward", None),  # not the model's: untouched
    ]
    assert launches.judge(costs, DeviceBusy(), 1) is None
