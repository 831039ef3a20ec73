"""Device readings on a machine without a GPU: the report says why, nothing fails."""

import torch  # noqa: F401  (describe() reports on the torch the job imported)

from trainmedic.run.probe.device import NvmlSampler, cuda_in_use, describe


def test_cpu_device_names_the_cpu_and_why_cuda_is_missing():
    info = describe()
    assert info.kind == "cpu"
    assert info.name
    assert info.details["cpu_cores"] >= 1
    assert info.details["ram_bytes"] > 0
    assert "not available" in info.details["cuda"] or "not used" in info.details["cuda"]
    assert not cuda_in_use()


def test_nvml_without_a_driver_or_package_reports_the_reason():
    sampler = NvmlSampler(interval=0.05)
    assert sampler.start() is False
    summary = sampler.summary()
    assert summary["available"] is False
    assert "trainmedic[gpu]" in summary["reason"] or "NVML unavailable" in summary["reason"]
    sampler.stop()
