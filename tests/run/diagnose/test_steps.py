import random

import pytest

from trainmedic.run.diagnose import steps


def test_growth_is_last_quarter_median_over_first():
    durations = [1.0] * 10 + [1.5] * 10 + [2.0] * 10 + [3.0] * 10
    assert steps.growth(durations) == pytest.approx(3.0)
    assert steps.growth([1.0] * 5) == 1.0  # too few steps to say


def test_a_steady_rise_is_flagged_but_a_burst_of_noise_is_not():
    rising = [0.02 + 0.001 * i for i in range(40)]
    assert steps.trend(rising) == steps.Trend(steps.growth(rising), "step time")
    rng = random.Random(0)
    burst = [0.02 + rng.uniform(0, 0.002) for _ in range(30)] + [0.04] * 10  # a noisy neighbour
    assert steps.growth(burst) >= steps.GROWTH_FLAG
    assert steps.trend(burst) is None
    assert steps.trend([1.0] * 40) is None


def test_a_rise_with_one_quarter_blurred_by_a_loaded_machine_is_still_a_trend():
    # pool_growth.py on a loaded 2-vCPU machine: the step keeps growing, but the third quarter's
    # median came out no slower than the second's, on wall and CPU clock alike.
    rng = random.Random(1)
    rising = [(0.03 + 0.0008 * i) * rng.uniform(0.9, 1.1) for i in range(36)]
    blurred = [d * (0.85 if 18 <= i < 27 else 1.0) for i, d in enumerate(rising)]
    medians = steps.quarter_medians(blurred)
    assert medians[2] < medians[1] * steps.STEADY_RISE  # not every quarter slower than the last
    assert steps.rank_correlation(blurred) >= steps.RANK_TREND
    assert steps.trend(blurred, cpu_durations=blurred).measure == "step time"


def test_step_order_and_step_time_rank_correlation():
    assert steps.rank_correlation([1.0, 2.0, 3.0, 4.0]) == 1.0
    assert steps.rank_correlation([4.0, 3.0, 2.0, 1.0]) == -1.0
    rng = random.Random(0)
    burst = [0.02 + rng.uniform(0, 0.002) for _ in range(30)] + [0.04] * 10
    assert steps.rank_correlation(burst) < steps.RANK_TREND
    long_rise = [float(i) for i in range(5000)]  # thinned, still perfectly ordered
    assert steps.rank_correlation(long_rise) == 1.0


def test_percentile_interpolates():
    assert steps.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == pytest.approx(4.6)
    assert steps.percentile([], 0.9) == 0.0


def test_a_machine_that_slows_down_is_not_a_growing_step():
    wall = [0.02 + 0.001 * i for i in range(40)]
    assert (
        steps.trend(wall, cpu_durations=[w * 1.5 for w in wall]).measure == "step time"
    )  # more work per step
    assert steps.trend(wall, cpu_durations=[0.02] * 40) is None  # same work, longer waits
    assert steps.trend(wall, cpu_durations=None).measure == "step time"  # on CUDA, CPU time says nothing


def test_a_neighbour_that_comes_and_goes_does_not_hide_a_growing_step():
    # Seed 004's growing pool on a shared 2-vCPU machine (pool_growth.py, measured): a neighbour
    # ran for the first half, so wall-time quarters fell while the work per step kept rising.
    cpu = [0.03 + 0.001 * i for i in range(40)]
    wall = [c * (2.0 if i < 20 else 1.0) for i, c in enumerate(cpu)]
    assert steps.growth(wall) < 1.0
    found = steps.trend(wall, cpu_durations=cpu)
    assert found.measure == "CPU time per step"
    assert found.ratio == pytest.approx(steps.growth(cpu))
    assert found.ratio >= steps.GROWTH_FLAG
