import pytest

from trainmedic.categories import CATEGORIES
from trainmedic.run.diagnose import diagnose
from trainmedic.run.probe.recorder import AFTER_MODEL, BEFORE_MODEL, SLOTS

STEPS = 40


def test_seed_000_reads_as_data_bound_with_a_70x_ceiling_pointing_at_the_read(completed, measure):
    # Seed 000: 36 s of a 36.5 s step waiting on an HDF5 read, 0.5 s of model.
    lines = {
        ("data", "hdf5", "receiver/data.py:88", "receiver/data.py:80:_generator"): 36.0 * STEPS,
        ("compute", "forward", "receiver/model.py:41", "receiver/model.py:30:call"): 0.3 * STEPS,
        ("compute", "backward", "receiver/train.py:120", "receiver/train.py:100:train"): 0.2 * STEPS,
    }
    report = diagnose(measure(lines, [36.5] * STEPS), ["train.py"], completed)
    assert report.bottleneck == "data"
    top = report.findings[0]
    assert (top.category, top.kind, top.where) == ("data", "hdf5", "receiver/data.py:88")
    assert top.ceiling == pytest.approx(73.0, rel=0.01)
    assert 1.0 < top.expected_speedup <= top.ceiling
    assert "36.00 s of a 36.50 s mean step" in top.evidence
    assert sum(report.breakdown.values()) == pytest.approx(1.0, abs=0.01)
    assert set(report.breakdown) == set(CATEGORIES)


def test_user_code_before_the_model_is_batch_preparation_and_after_is_compute(completed, measure):
    lines = {
        (BEFORE_MODEL, "", "train.py:10", "train.py:5:make_batch"): 3.0,
        ("compute", "forward", "train.py:20", "train.py:18:forward"): 1.0,
        (AFTER_MODEL, "", "train.py:30", "train.py:25:loop"): 1.0,
    }
    report = diagnose(measure(lines, [0.125] * STEPS), ["train.py"], completed)
    assert report.breakdown["data"] == pytest.approx(0.6)
    assert report.breakdown["compute"] == pytest.approx(0.4)
    assert report.findings[0].kind == "batch preparation"


def test_a_function_issuing_thousands_of_cheap_ops_is_a_tiny_op_loop(completed, measure):
    fn = "gen.py:3:make_sample"
    lines = {
        (BEFORE_MODEL, "", "gen.py:7", fn): 0.9 * STEPS,
        ("compute", "forward", "train.py:20", "train.py:18:forward"): 0.1 * STEPS,
    }
    # 2 census steps x 20,000 ops: 0.9 s / 20,000 = 45 us per op: dispatch-bound.
    m = measure(lines, [1.0] * STEPS, ops_by_function={fn: 40_000, "train.py:18:forward": 20}, census_steps=2)
    report = diagnose(m, ["gen.py"], completed)
    assert report.bottleneck == "tiny_ops"
    assert report.findings[0].where == "gen.py:7"
    assert "20,000 torch calls per step" in report.findings[0].evidence


def test_expensive_ops_in_a_loop_are_not_tiny(completed, measure):
    fn = "train.py:3:big"
    lines = {
        (BEFORE_MODEL, "", "train.py:7", fn): 1.0 * STEPS,
        ("compute", "forward", "train.py:20", "f"): 0.5 * STEPS,
    }
    m = measure(lines, [1.5] * STEPS, ops_by_function={fn: 400}, census_steps=2)  # 5 ms per op
    assert diagnose(m, ["train.py"], completed).breakdown["tiny_ops"] == 0.0


def growing_pool(work: list[float], wall: list[float]) -> tuple[dict, list]:
    """Sampled lines and per-step slots of a pool read (ot.py:44) that costs ``work`` - 20 ms a step."""
    per_step = []
    for i, seconds in enumerate(work, start=3):
        slots = [0.0] * len(SLOTS)
        slots[SLOTS.index(BEFORE_MODEL)] = seconds - 0.02
        slots[SLOTS.index("compute")] = 0.02
        per_step.append((i, slots))
    share = 1 - 0.02 * len(work) / sum(work)
    lines = {
        (BEFORE_MODEL, "", "ot.py:44", "ot.py:40:sample"): sum(wall) * share,
        ("compute", "forward", "ot.py:60", "ot.py:55:forward"): sum(wall) * (1 - share),
    }
    return lines, per_step


def test_growing_step_time_is_flagged_on_the_growing_category(completed, measure):
    durations = [0.02 + 0.002 * i for i in range(STEPS)]
    lines, per_step = growing_pool(durations, durations)
    report = diagnose(measure(lines, durations, per_step=per_step), ["ot.py"], completed)
    assert report.steps.growth > 2.0
    pool = report.findings[0]
    assert (pool.category, pool.kind, pool.where) == ("data", "pool", "ot.py:44")
    assert "step time grew" in pool.evidence


def test_a_growing_step_hidden_by_a_busy_neighbour_is_found_on_cpu_time(completed, measure):
    # The first half of the run shares the CPU with another process: wall time falls when it
    # leaves while the pool -- and the process's own CPU time per step -- keeps growing.
    cpu = [0.02 + 0.002 * i for i in range(STEPS)]
    wall = [c * (2.5 if i < STEPS // 2 else 1.0) for i, c in enumerate(cpu)]
    lines, per_step = growing_pool(cpu, wall)
    report = diagnose(measure(lines, wall, per_step=per_step, cpu_durations=cpu), ["ot.py"], completed)
    assert report.steps.growth < 1.3 < report.steps.cpu_growth
    pool = report.findings[0]
    assert (pool.category, pool.kind, pool.where) == ("data", "pool", "ot.py:44")
    assert f"CPU time per step grew {report.steps.cpu_growth:.2f}x" in pool.evidence
    assert f"grows {report.steps.cpu_growth:.1f}x" in pool.title


def test_no_steps_reports_the_whole_run_and_says_how_to_mark_steps(completed, measure):
    m = measure({("compute", "forward", "a.py:1", "f"): 1.0}, [])
    m.step_source, m.setup, m.steady = None, m.steady, type(m.steady)()
    report = diagnose(m, ["a.py"], completed)
    assert report.steps.count == 0
    assert any("trainmedic.step()" in note for note in report.notes)
    assert report.breakdown["compute"] == pytest.approx(1.0)


def test_a_cuda_run_reports_nvml_readings_and_the_synchronised_boundaries(completed, measure):
    from trainmedic.run.report.model import DeviceInfo

    m = measure({("compute", "forward", "t.py:1", "f"): 1.0}, [0.1] * STEPS)
    nvml = {
        "available": True,
        "util_gpu_pct_mean": 97.5,
        "power_w_mean": 610.0,
        "power_limit_w": 700.0,
        "sm_clock_mhz_mean": 1980.0,
        "pstate_mean": 0.0,
    }
    m.device = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", {"nvml": nvml})
    notes = " ".join(diagnose(m, ["t.py"], completed).notes)
    assert "GPU busy 97.5 %" in notes and "610.0 W of 700.0 W" in notes
    assert "queued CUDA work" in notes


def test_a_cuda_run_without_nvml_says_why(completed, measure):
    from trainmedic.run.report.model import DeviceInfo

    m = measure({("compute", "forward", "t.py:1", "f"): 1.0}, [0.1] * STEPS)
    reason = "nvidia-ml-py is not installed: pip install 'trainmedic[gpu]'"
    m.device = DeviceInfo("cuda", "NVIDIA T4", {"nvml": {"available": False, "reason": reason}})
    assert any(reason in note for note in diagnose(m, ["t.py"], completed).notes)


def test_a_category_that_is_all_of_the_time_is_a_share_of_one_not_an_error(completed, measure):
    # Summed per line, these seconds come out one rounding error above their total summed in
    # order (0.6 + 0.18 + 0.4 > 0.6 + 0.4 + 0.18): a share above 1 once stopped the report.
    lines = {
        ("compute", "backward", "train.py:30", "train.py:1:<module>"): 0.6,
        ("compute", "backward", "train.py:31", "train.py:1:<module>"): 0.4,
        ("compute", "backward", "train.py:30", "train.py:5:step"): 0.18,
    }
    report = diagnose(measure(lines, [0.03] * 40), ["train.py"], completed)
    assert report.bottleneck == "compute"
    assert report.findings[0].share == 1.0 and report.findings[0].ceiling == float("inf")
