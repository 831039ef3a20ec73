from __future__ import annotations

import pytest
import torch
import tune_builds

from trainmedic.errors import TuneError
from trainmedic.tune.grid import (
    batch_ladder,
    check_batches,
    check_memory_formats,
    check_precisions,
    default_precisions,
    inspect_build,
)


def test_ladder_is_powers_of_two_up_to_the_largest_batch_that_fits_and_that_batch():
    assert batch_ladder(48) == [1, 2, 4, 8, 16, 32, 48]
    assert batch_ladder(64) == [1, 2, 4, 8, 16, 32, 64]
    assert batch_ladder(1) == [1]


def test_ladder_without_a_memory_limit_stops_at_its_top():
    assert batch_ladder(None, top=16) == [1, 2, 4, 8, 16]
    assert batch_ladder(10**9, top=8) == [1, 2, 4, 8]


def test_cpu_precisions_are_fp32_and_bf16_and_fp16_only_where_it_measured_faster_than_fp32():
    cpu = torch.device("cpu")
    # The ceilings measured on the 2-vCPU Xeon (torch 2.13 CPU): fp16 has no fast path there.
    slow = {"fp32": 66e9, "bf16": 17.6e9, "fp16": 1.47e9}
    assert default_precisions(cpu, slow) == ["fp32", "bf16"]
    assert default_precisions(cpu) == ["fp32", "bf16"]  # no measured evidence of a fast path
    assert default_precisions(cpu, {"fp32": 66e9, "bf16": 130e9, "fp16": 260e9}) == ["fp32", "bf16", "fp16"]


def test_bad_grid_values_name_the_value_and_the_fix():
    with pytest.raises(TuneError, match="'fp8' is not one of fp32, tf32, bf16, fp16"):
        check_precisions(["fp8"], torch.device("cpu"))
    with pytest.raises(TuneError, match="'tf32' needs a CUDA GPU"):
        check_precisions(["tf32"], torch.device("cpu"))
    with pytest.raises(TuneError, match="batch size 0 cannot be measured"):
        check_batches([4, 0])
    with pytest.raises(TuneError, match="'nhwc' is not one of contiguous"):
        check_memory_formats(["nhwc"])
    assert check_precisions(["BF16", "fp32", "bf16"], torch.device("cpu")) == ["bf16", "fp32"]


def test_memory_format_follows_the_convolutions():
    assert inspect_build(tune_builds.mlp) is None
    assert inspect_build(tune_builds.conv2d) == "channels_last"
    assert inspect_build(tune_builds.conv3d) == "channels_last_3d"  # a Conv3d subclass counts


def test_a_build_whose_inputs_do_not_grow_with_the_batch_is_refused():
    with pytest.raises(
        TuneError,
        match=r"no_batch_axis\(1\) and no_batch_axis\(2\) return inputs of shapes \[\(4, 8\)\] and \[\(4, 8\)\]",
    ):
        inspect_build(tune_builds.no_batch_axis)


def test_no_ladder_when_even_batch_1_does_not_fit():
    assert batch_ladder(0) == []
