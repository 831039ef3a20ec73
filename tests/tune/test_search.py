"""The search on real small models on the CPU: what it measures, skips, stops at and picks."""

from __future__ import annotations

from pathlib import Path

import pytest
import tune_builds

from trainmedic.errors import PlanError, TuneError
from trainmedic.tune import Callbacks, tune
from trainmedic.tune.model import SCHEMA, Config, TuneResult
from trainmedic.tune.ties import within_noise

FAST = dict(device="cpu", trials=3, min_trial_s=0.05, compile=(False,))


@pytest.mark.slow
@pytest.mark.alone
def test_a_workload_where_a_smaller_batch_wins_is_found_as_such():
    result = tune(tune_builds.pairwise, precisions=["fp32"], capacity="2GiB", **FAST)
    batches = [r.config.batch_size for r in result.measured]
    assert result.best is not None and result.best.batch_size < max(batches)
    fastest = max(result.measured, key=lambda r: r.samples_per_s)
    assert result.best == fastest.config or within_noise(fastest, result.row(result.best))
    assert any("not measured: two batches in a row were no faster" in n for n in result.notes)
    assert any(line.startswith(f"batch {2 * result.best.batch_size} is") for line in result.why)


@pytest.mark.slow
def test_configurations_the_plan_says_do_not_fit_are_skipped_never_run():
    started: list[Config] = []
    result = tune(
        tune_builds.pairwise_big,
        batch_sizes=[1, 2, 512],
        precisions=["fp32"],
        capacity="1GiB",
        headroom=0.0,
        callbacks=Callbacks(started=started.append),
        **FAST,
    )
    skipped = result.row(Config(512, "fp32"))
    assert skipped.status == "skipped" and skipped.measurement is None
    assert skipped.reason.startswith("the plan says batch 512 needs ")
    assert skipped.reason.endswith(", more than the 1.0 GiB usable; the largest fp32 batch that fits is 110")
    assert Config(512, "fp32") not in started
    assert [r.config.batch_size for r in result.measured] == [1, 2]


@pytest.mark.slow
def test_every_measured_row_has_a_roofline_and_an_mlp_gains_intensity_with_the_batch():
    result = tune(tune_builds.mlp, batch_sizes=[1, 64], precisions=["fp32"], **FAST)
    small, large = (result.row(Config(b, "fp32")).roofline for b in (1, 64))
    assert small.flops_per_step > 0 and large.flops_per_step == pytest.approx(
        64 * small.flops_per_step, rel=0.01
    )
    assert large.intensity > 4 * small.intensity
    assert result.ceilings is not None and result.ceilings.source == "measured"


@pytest.mark.slow
def test_memory_format_is_tried_on_the_fastest_configurations_of_a_conv_net():
    result = tune(tune_builds.conv2d, batch_sizes=[2, 4], precisions=["fp32"], **FAST)
    formats = {r.config.memory_format for r in result.measured}
    assert formats == {"contiguous", "channels_last"}
    assert sum(r.config.memory_format == "channels_last" for r in result.measured) == 2


@pytest.mark.slow
def test_compile_is_measured_with_its_compile_time_apart():
    result = tune(
        tune_builds.mlp, batch_sizes=[32], precisions=["fp32"], device="cpu", trials=3, min_trial_s=0.05
    )
    eager, compiled = result.row(Config(32, "fp32")), result.row(Config(32, "fp32", compile=True))
    assert compiled.status == "measured", compiled.reason
    assert (
        compiled.measurement.first_step_s > 5 * eager.measurement.first_step_s
    )  # compilation is in the first step only
    assert any("torch.compile" in line for line in result.why) or result.best == Config(32, "fp32")


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured():
    def interrupt(row, result):
        if len(result.measured) == 2:
            raise KeyboardInterrupt

    result = tune(
        tune_builds.mlp,
        batch_sizes=[1, 2, 4, 8],
        precisions=["fp32"],
        callbacks=Callbacks(finished=interrupt),
        **FAST,
    )
    assert len(result.measured) == 2
    assert result.stopped_early == "stopped by Ctrl+C after 2 measured configurations"
    assert result.best in {Config(1, "fp32"), Config(2, "fp32")}


def test_a_spent_budget_stops_before_the_next_configuration():
    result = tune(tune_builds.mlp, batch_sizes=[1, 2], precisions=["fp32"], budget_s=1e-9, **FAST)
    assert result.measured == [] and result.best is None
    assert result.stopped_early.startswith("the budget of")
    assert result.verdict.startswith("nothing was measured: the budget of")


@pytest.mark.slow
def test_the_gain_is_against_the_current_batch_when_given():
    result = tune(tune_builds.mlp, batch_sizes=[2, 8], precisions=["fp32"], current_batch=4, **FAST)
    assert result.baseline == Config(4, "fp32") and result.baseline_source.startswith("your current")
    assert result.gain == pytest.approx(
        result.row(result.best).samples_per_s / result.row(Config(4, "fp32")).samples_per_s
    )


@pytest.mark.slow
def test_one_failing_configuration_is_a_row_and_the_search_goes_on():
    result = tune(tune_builds.nan_after_first, batch_sizes=[1, 2, 4], precisions=["fp32"], **FAST)
    failed = result.row(Config(2, "fp32"))
    assert failed.status == "failed"
    assert failed.reason.startswith("RuntimeError: batch 2 is not supported by this layer at ")
    raising = next(
        i
        for i, line in enumerate(Path(tune_builds.__file__).read_text().splitlines(), 1)
        if "is not supported by this layer" in line
    )
    assert failed.reason.endswith(f"tune_builds.py:{raising}")  # the user's line that raised
    assert result.row(Config(4, "fp32")).status == "failed"
    assert result.best == Config(1, "fp32")


def test_a_target_that_does_not_build_or_has_no_batch_axis_is_one_clear_error():
    with pytest.raises(PlanError, match="broken\\(1\\) raised ValueError: the data folder is missing"):
        tune(tune_builds.broken, **FAST)
    with pytest.raises(TuneError, match="no axis grows with the batch size"):
        tune(tune_builds.no_batch_axis, **FAST)
    with pytest.raises(TuneError, match="tf32' needs a CUDA GPU"):
        tune(tune_builds.mlp, precisions=["tf32"], **FAST)


@pytest.mark.slow
def test_the_result_is_the_json_contract(tmp_path):
    result = tune(tune_builds.mlp, batch_sizes=[1, 2], precisions=["fp32"], **FAST)
    data = TuneResult.to_dict(result)
    assert data["schema"] == SCHEMA and data["best"] == result.best.to_dict()
    assert {r["status"] for r in data["rows"]} == {"measured"}
    assert data["rows"][0]["roofline"]["bound"] in ("compute", "bandwidth")
    path = result.write_json(tmp_path / "tune.json")
    assert path.read_text().startswith("{")


@pytest.mark.slow
def test_fp16_is_measured_on_a_cpu_by_default_only_where_it_measured_faster_than_fp32():
    from trainmedic.tune.grid import cpu_has_fast_fp16

    result = tune(tune_builds.mlp, batch_sizes=[4], **FAST)
    precisions = {r.config.precision for r in result.rows}
    assert {"fp32", "bf16"} <= precisions
    assert ("fp16" in precisions) == cpu_has_fast_fp16(result.ceilings.peak_flops)  # False on the 2-vCPU Xeon
    asked = tune(tune_builds.mlp, batch_sizes=[4], precisions=["fp16"], **FAST)
    assert asked.row(Config(4, "fp16")).status == "measured"  # asked for: measured, slow path or not


def test_the_budget_counts_from_the_start_it_is_given():
    import time

    started_at = time.monotonic() - 10.0  # ten seconds already spent (importing, loading the build)
    result = tune(
        tune_builds.mlp, batch_sizes=[1, 2], precisions=["fp32"], budget_s=5.0, started_at=started_at, **FAST
    )
    assert result.measured == [] and result.stopped_early.startswith("the budget of 5.00 s ran out")
