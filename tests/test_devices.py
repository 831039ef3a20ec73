"""The GPU catalog: lookups by any common spelling, helpful errors, numbers that make sense."""

import pytest

from trainmedic.devices import _ALIASES, _AMBIGUOUS, DEVICES, Device, GiB, get_device, known_devices
from trainmedic.errors import DeviceError, TrainmedicError

GPUS = [d for d in DEVICES.values() if d.is_gpu]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("rtx3090", "rtx3090"),
        ("3090", "rtx3090"),
        ("rtx-3090", "rtx3090"),
        ("RTX 3090", "rtx3090"),
        ("rtx_3090", "rtx3090"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("RTX 3090 Ti", "rtx3090ti"),
        ("T4", "t4"),
        ("Tesla T4", "t4"),
        ("h100", "h100"),
        ("H100 SXM", "h100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("h100 pcie", "h100-pcie"),
        ("A100-80GB", "a100-80gb"),
        ("a100_80gb", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("4090D-48GB", "rtx4090d-48gb"),
        ("rtx 4090 d", "rtx4090d"),
        ("A10G", "a10g"),
        ("a10", "a10"),
        ("L40S", "l40s"),
        ("RTX A6000", "rtxa6000"),
        ("RTX 6000 Ada", "rtx6000ada"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada"),
        ("3060", "rtx3060-12gb"),
        ("NVIDIA H200", "h200"),
        ("CPU", "cpu"),
    ],
)
def test_lookup_accepts_common_spellings(name, key):
    assert get_device(name).key == key


def test_every_key_name_and_alias_finds_its_device():
    for key, device in DEVICES.items():
        assert get_device(key) is device
        assert get_device(key.upper()) is device
        assert get_device(device.name) is device
        for alias in _ALIASES.get(key, ()):
            assert get_device(alias) is device, alias
    assert set(_ALIASES) <= set(DEVICES)


def test_ambiguous_a100_lists_both_sizes():
    with pytest.raises(DeviceError) as info:
        get_device("A100")
    message = str(info.value)
    assert "'A100'" in message
    assert "a100-40gb" in message and "a100-80gb" in message


@pytest.mark.parametrize("name", sorted(_AMBIGUOUS))
def test_every_ambiguous_name_lists_real_keys(name):
    with pytest.raises(DeviceError) as info:
        get_device(name)
    for key in _AMBIGUOUS[name]:
        assert key in DEVICES
        assert key in str(info.value)


def test_unknown_name_lists_every_key_and_the_capacity_option():
    with pytest.raises(DeviceError) as info:
        get_device("radeon-7900xtx")
    message = str(info.value)
    assert "'radeon-7900xtx'" in message
    for key in known_devices():
        assert key in message
    assert "--capacity" in message and "48GiB" in message
    assert isinstance(info.value, TrainmedicError)


def test_unknown_name_close_to_a_key_suggests_it():
    with pytest.raises(DeviceError, match="Did you mean rtx3090"):
        get_device("rtx3900")


def test_known_devices_is_sorted_and_complete():
    keys = known_devices()
    assert keys == sorted(DEVICES)
    for key in (
        "cpu",
        "t4",
        "p100",
        "v100-16gb",
        "v100-32gb",
        "l4",
        "a10",
        "a10g",
        "a40",
        "l40s",
        "rtx3060-12gb",
        "rtx3080-10gb",
        "rtx3090",
        "rtx3090ti",
        "rtx4080",
        "rtx4090",
        "rtx4090d-48gb",
        "rtxa6000",
        "rtx6000ada",
        "a100-40gb",
        "a100-80gb",
        "h100",
        "h100-pcie",
        "h200",
    ):
        assert key in keys


def test_keys_are_canonical():
    for key, device in DEVICES.items():
        assert device.key == key
        assert key == key.lower() and " " not in key


@pytest.mark.parametrize("device", GPUS, ids=lambda d: d.key)
def test_gpu_numbers_are_positive_and_plausible(device: Device):
    assert 8 * GiB <= device.memory_bytes <= 200 * GiB
    assert device.memory_source in ("torch", "nvidia-smi", "sold")
    if device.memory_source == "sold":
        # A sold size is a whole number of GiB; reported ones come in below it.
        assert device.memory_bytes % GiB == 0
    assert 200e9 <= device.bandwidth_bytes_per_s <= 10e12
    assert device.pcie_gen in (3, 4, 5)
    assert 0 < device.cuda_context_bytes < 1 * GiB
    assert device.peak_flops["fp32"] > 1e12
    for dtype, rate in device.peak_flops.items():
        assert dtype in ("fp32", "tf32", "fp16", "bf16")
        # Every fast path is at least as fast as plain fp32, and no card here reaches 2 PFLOP/s dense.
        assert device.peak_flops["fp32"] <= rate < 2e15
    if "bf16" in device.peak_flops:
        assert device.peak_flops["bf16"] == device.peak_flops["fp16"]
        assert "tf32" in device.peak_flops


def test_cpu_entry_leaves_memory_to_the_host():
    cpu = DEVICES["cpu"]
    assert not cpu.is_gpu
    assert cpu.memory_bytes == 0 and cpu.bandwidth_bytes_per_s == 0
    assert cpu.pcie_gen is None and cpu.compute_capability is None
    assert cpu.cuda_context_bytes == 0 and cpu.family == "cpu"


def test_modded_4090d_has_48_gib():
    device = get_device("4090D-48GB")
    assert 45 * GiB <= device.memory_bytes <= 48 * GiB
    assert device.family == "ada" and device.compute_capability == (8, 9)
    assert device.memory_bytes > 1.9 * get_device("4090d").memory_bytes


@pytest.mark.parametrize(
    ("family", "capabilities"),
    [
        ("pascal", {(6, 0), (6, 1)}),
        ("volta", {(7, 0)}),
        ("turing", {(7, 5)}),
        ("ampere", {(8, 0), (8, 6)}),
        ("ada", {(8, 9)}),
        ("hopper", {(9, 0)}),
    ],
)
def test_compute_capability_matches_family(family, capabilities):
    members = [d for d in GPUS if d.family == family]
    assert members, family
    for device in members:
        assert device.compute_capability in capabilities, device.key


def test_known_compute_capabilities():
    assert get_device("t4").compute_capability == (7, 5)
    assert get_device("a100-80gb").compute_capability == (8, 0)
    assert get_device("rtx3090").compute_capability == (8, 6)
    assert get_device("a10g").compute_capability == (8, 6)
    assert get_device("l4").compute_capability == (8, 9)
    assert get_device("rtx4090").compute_capability == (8, 9)
    assert get_device("h100").compute_capability == (9, 0)


def test_bf16_and_tf32_only_from_ampere_on():
    for device in GPUS:
        newer = device.compute_capability >= (8, 0)
        assert ("bf16" in device.peak_flops) == newer, device.key
        assert ("tf32" in device.peak_flops) == newer, device.key


def test_context_estimate_is_per_family():
    by_family = {}
    for device in GPUS:
        by_family.setdefault(device.family, set()).add(device.cuda_context_bytes)
    assert all(len(sizes) == 1 for sizes in by_family.values()), by_family
    assert get_device("h100").cuda_context_bytes > get_device("a100-80gb").cuda_context_bytes


def test_devices_are_frozen_and_hashable():
    device = get_device("t4")
    with pytest.raises(AttributeError):
        device.memory_bytes = 1
    assert len({device, get_device("Tesla T4")}) == 1


def test_anchor_numbers():
    # Datasheet figures the planner's worked examples rely on.
    assert get_device("t4").memory_bytes == 15_843_721_216
    assert get_device("h100").bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert get_device("a100-40gb").peak_flops["bf16"] == pytest.approx(312e12)
    assert get_device("rtx3090").peak_flops["fp16"] == pytest.approx(71e12)
    assert get_device("h200").memory_bytes > get_device("h100").memory_bytes
