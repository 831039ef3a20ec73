from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import tune_builds

from trainmedic.errors import PlanError
from trainmedic.tune.budget import OutOfTime
from trainmedic.tune.measure import MIN_TRIALS, measure
from trainmedic.tune.model import Config
from trainmedic.tune.step import TrainingStep

CPU = torch.device("cpu")


def test_a_step_trains_the_model():
    step = TrainingStep(tune_builds.mlp, Config(8), CPU)
    before = [p.detach().clone() for p in step.model.parameters()]
    step()
    assert any(not torch.equal(a, b) for a, b in zip(before, step.model.parameters()))
    assert all(p.grad is None for p in step.model.parameters())  # zero_grad(set_to_none) after the step


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_runs_the_forward_in_that_dtype(precision):
    step = TrainingStep(tune_builds.mlp, Config(4, precision), CPU)
    seen = []
    step.model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    step()
    assert seen == [torch.bfloat16 if precision == "bf16" else torch.float16]
    assert (step.scaler is not None) == (precision == "fp16")
    assert all(p.dtype == torch.float32 for p in step.model.parameters())  # autocast: weights stay fp32


def test_channels_last_3d_reformats_the_model_and_the_volumes():
    step = TrainingStep(tune_builds.conv3d, Config(2, memory_format="channels_last_3d"), CPU)
    assert step.inputs.is_contiguous(memory_format=torch.channels_last_3d)
    assert not step.inputs.is_contiguous()
    assert step.model[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    step()


def test_a_build_that_raises_names_its_error():
    with pytest.raises(PlanError, match="broken\\(2\\) raised ValueError: the data folder is missing"):
        TrainingStep(tune_builds.broken, Config(2), CPU)


@pytest.mark.slow
def test_measure_reports_samples_per_second_per_trial_and_the_first_step_apart():
    step = TrainingStep(tune_builds.mlp, Config(16), CPU)
    m = measure(step, trials=4, min_trial_s=0.01)
    assert len(m.trials) == 4
    assert m.low <= m.samples_per_s <= m.high
    assert m.steps_per_trial >= 1 and m.first_step_s > 0 and 1 <= m.warmup_steps <= 5


def test_measure_starts_no_trial_that_would_end_past_the_deadline():
    def ticking() -> Callable[[], float]:  # one second per reading: every step takes 1 s
        ticks = iter(range(1000))
        return lambda: float(next(ticks))

    step = TrainingStep(tune_builds.mlp, Config(16), CPU)
    # Readings 0-8 go to the first step and two warm-up steps; then each trial is a check, a
    # start and an end reading (9-11, 12-14, ...); a trial runs when check + 1 s <= deadline.
    m = measure(step, trials=50, min_trial_s=0.5, deadline=20.0, clock=ticking())
    assert len(m.trials) == 4 > MIN_TRIALS
    # Too little time for the 3 trials a speed needs: the configuration is not measured at all,
    # rather than measured past the budget (it used to run 3 trials whatever the deadline).
    with pytest.raises(OutOfTime):
        measure(step, trials=50, min_trial_s=0.5, deadline=13.0, clock=ticking())
    with pytest.raises(OutOfTime):
        measure(step, trials=50, min_trial_s=0.01, deadline=0.0)  # already past: no step runs


def test_samples_per_second_count_the_batch():
    ticks = iter(range(1000))

    def clock() -> float:  # one second per reading: every trial of one step takes exactly 1 s
        return float(next(ticks))

    step = TrainingStep(tune_builds.mlp, Config(8), CPU)
    m = measure(step, trials=3, min_trial_s=0.5, clock=clock)
    assert m.trials == (8.0, 8.0, 8.0) and m.steps_per_trial == 1 and m.first_step_s == 1.0


def test_fp16_without_an_optimizer_runs_without_a_grad_scaler():
    step = TrainingStep(tune_builds.no_optimizer, Config(4, "fp16"), CPU)
    assert step.scaler is None
    step()


def test_tf32_is_switched_for_one_configuration_and_put_back():
    from trainmedic.tune.step import tf32

    before = torch.get_float32_matmul_precision()
    with tf32(True):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


def test_a_build_written_for_the_gpu_steps_on_the_cpu_as_plan_traces_it():
    # .cuda() on the model, .to("cuda") on the inputs, device="cuda" in the loss of every step:
    # plan's CudaToCpu puts them on the CPU (a CPU build of torch raised "not compiled with CUDA").
    step = TrainingStep(tune_builds.gpu_written, Config(8), CPU)
    assert step.cuda_on_cpu and all(p.device.type == "cpu" for p in step.model.parameters())
    before = [p.detach().clone() for p in step.model.parameters()]
    step()
    assert any(not torch.equal(a, b) for a, b in zip(before, step.model.parameters()))
    assert not TrainingStep(tune_builds.mlp, Config(8), CPU).cuda_on_cpu  # no mode, no per-op cost
