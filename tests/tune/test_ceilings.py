"""Device ceilings (measured on the CPU and cached, from the catalog for a known GPU) and the
roofline verdict built on them.

The CPU measurement is real (a matmul per precision, a 256 MiB copy: about two seconds on two
cores), so the module measures into one cache folder once and the cache tests start from it.
"""

from __future__ import annotations

import json

import pytest
import torch

from trainmedic.errors import TuneError
from trainmedic.roofline.model import Ceilings, StepCost
from trainmedic.roofline.place import catalog_ceilings, roofline
from trainmedic.tune.ceilings import CACHE_FILE, cpu_cache_key, device_ceilings


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ceilings")


@pytest.fixture(scope="module")
def measured(cache_dir) -> Ceilings:
    return device_ceilings("cpu", cache_dir=cache_dir)


def _entries(cache_dir) -> dict:
    return json.loads((cache_dir / CACHE_FILE).read_text())["entries"]


@pytest.mark.slow
def test_cpu_ceilings_are_measured_and_plausible(measured):
    assert measured.source == "measured"
    assert measured.device.startswith("cpu (") and f"{torch.get_num_threads()} threads" in measured.device
    assert 1e8 < measured.bandwidth_bytes_per_s < 1e12
    assert 1e8 < measured.peak("fp32") < 1e14
    # Whatever else was measured is recorded as measured: positive, and no GPU-only precision.
    assert set(measured.peak_flops) <= {"fp32", "bf16", "fp16"}
    assert all(rate > 0 for rate in measured.peak_flops.values())
    assert measured.ridge["fp32"] == pytest.approx(measured.peak("fp32") / measured.bandwidth_bytes_per_s)


@pytest.mark.slow
def test_the_second_call_reads_the_cache(measured, cache_dir):
    path = cache_dir / CACHE_FILE
    data = json.loads(path.read_text())
    assert set(data["entries"]) == {cpu_cache_key()}
    data["entries"][cpu_cache_key()]["peak_flops"]["fp32"] = 1.234e9  # a value no measurement gives
    path.write_text(json.dumps(data))
    cached = device_ceilings("cpu", cache_dir=cache_dir)
    assert cached.peak("fp32") == 1.234e9
    assert cached.bandwidth_bytes_per_s == measured.bandwidth_bytes_per_s
    assert cached.source == "measured"


@pytest.mark.slow
def test_refresh_measures_again(measured, cache_dir):
    path = cache_dir / CACHE_FILE
    data = json.loads(path.read_text())
    data["entries"][cpu_cache_key()]["peak_flops"]["fp32"] = 1.234e9
    path.write_text(json.dumps(data))
    fresh = device_ceilings("cpu", cache_dir=cache_dir, refresh=True)
    assert fresh.peak("fp32") != 1.234e9
    assert _entries(cache_dir)[cpu_cache_key()]["peak_flops"]["fp32"] == fresh.peak("fp32")


@pytest.mark.slow
def test_a_corrupt_cache_is_measured_again_and_rewritten(tmp_path):
    (tmp_path / CACHE_FILE).write_text('{"format": "trainmedic.ceilings/1", "entries": {')
    ceilings = device_ceilings("cpu", cache_dir=tmp_path)
    assert ceilings.source == "measured"
    assert _entries(tmp_path)[cpu_cache_key()]["bandwidth_bytes_per_s"] == ceilings.bandwidth_bytes_per_s


@pytest.mark.slow
def test_another_thread_count_is_another_entry(measured, cache_dir):
    threads = torch.get_num_threads()
    other = 1 if threads != 1 else 2
    torch.set_num_threads(other)
    try:
        key = cpu_cache_key()
        ceilings = device_ceilings("cpu", cache_dir=cache_dir)
    finally:
        torch.set_num_threads(threads)
    assert key != cpu_cache_key() and f"threads={other}" in key
    assert f"{other} threads" in ceilings.device
    entries = _entries(cache_dir)
    assert set(entries) == {key, cpu_cache_key()}  # the first machine state's entry is kept


def test_known_gpus_get_catalog_ceilings():
    h100 = catalog_ceilings("NVIDIA H100 80GB HBM3")  # as torch.cuda.get_device_name() says it
    assert h100 == Ceilings(
        "NVIDIA H100 80GB HBM3 (SXM)",
        {"fp32": 67e12, "tf32": 494.5e12, "fp16": 989.5e12, "bf16": 989.5e12},
        3350e9,
        "catalog",
    )
    t4 = catalog_ceilings("Tesla T4")
    assert set(t4.peak_flops) == {"fp32", "fp16"}  # no tf32, no bf16 fast path on Turing


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 9990 Hyper", "cpu", "A100"])
def test_unknown_or_ambiguous_cards_have_no_catalog_ceilings(name):
    assert catalog_ceilings(name) is None  # device_ceilings then measures the card itself


@pytest.mark.parametrize(
    ("device", "says"), [("mps", "tune measures on cpu or cuda"), ("gpu please", "is not a device")]
)
def test_devices_without_ceilings_are_tune_errors(device, says):
    with pytest.raises(TuneError, match=says):
        device_ceilings(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_cuda_device_is_a_tune_error(tmp_path):
    with pytest.raises(TuneError, match=r"'cuda:0' asked for, but this torch \(.*\) sees 0 CUDA device"):
        device_ceilings("cuda:0", cache_dir=tmp_path)


# --- roofline ------------------------------------------------------------------------------------

ROOFS = Ceilings("hand-made", {"fp32": 1e12, "bf16": 4e12}, 1e11, "measured")  # ridges: 10 and 40 FLOP/byte


def _cost(flops: float, nbytes: float) -> StepCost:
    return StepCost(batch_size=8, precision="fp32", flops=flops, bytes=nbytes)


def test_low_intensity_is_bandwidth_bound():
    line = roofline(_cost(1e9, 1e9), ROOFS, "fp32", step_seconds=0.02)
    assert (line.intensity, line.ridge, line.bound) == (1.0, 10.0, "bandwidth")
    assert line.attainable_flops == 1e11  # intensity x bandwidth, under the 1e12 roof
    assert line.achieved_flops == 5e10
    assert line.share_of_ceiling == 0.5


def test_high_intensity_is_compute_bound():
    line = roofline(_cost(1e11, 1e9), ROOFS, "fp32", step_seconds=0.2)
    assert (line.intensity, line.bound, line.attainable_flops, line.share_of_ceiling) == (
        100.0,
        "compute",
        1e12,
        0.5,
    )


def test_the_precision_picks_the_roof():
    cost = _cost(2e10, 1e9)  # 20 FLOP/byte: right of the fp32 ridge, left of the bf16 one
    assert roofline(cost, ROOFS, "fp32", 1.0).bound == "compute"
    assert roofline(cost, ROOFS, "bf16", 1.0).bound == "bandwidth"
    # tf32 runs under the fp32 roof where there is no tf32 one (every CPU), under its own on a GPU.
    assert roofline(cost, ROOFS, "tf32", 1.0).peak_flops == 1e12
    assert roofline(cost, catalog_ceilings("h100"), "tf32", 1.0).peak_flops == 494.5e12
    assert roofline(cost, ROOFS, "fp16", 1.0) is None  # no roof measured or known for it


def test_a_step_time_that_is_not_positive_is_a_tune_error():
    with pytest.raises(TuneError, match="step time 0"):
        roofline(_cost(1e9, 1e9), ROOFS, "fp32", 0)
