"""Catalog of GPUs: memory, bandwidth, peak FLOP/s, PCIe generation, compute capability.

The planner uses it to say whether a training step fits a card nobody has at hand, and the
reports use it to put measured throughput next to what the card could do.

Conventions, so that every entry reads the same way:

- ``memory_bytes`` is what a CUDA program can see, as close as we know it. ``memory_source`` says
  where the number comes from: ``"torch"`` is ``torch.cuda.get_device_properties().total_memory``
  (the best value: the driver has already taken its reservation, and ECC where it is on);
  ``"nvidia-smi"`` is the ``Memory-Usage`` total nvidia-smi prints (a few hundred MiB above what
  torch reports); ``"sold"`` is the advertised size in GiB, an over-estimate of a few per cent,
  used only where no reported value is known. Replace ``"sold"`` entries by measurement.
- ``bandwidth_bytes_per_s`` is the datasheet figure in SI units (NVIDIA's GB/s are 10**9 B/s).
- ``peak_flops`` holds dense rates (no 2:4 sparsity): ``fp32`` on the CUDA cores; ``tf32``,
  ``fp16`` and ``bf16`` on the tensor cores *with FP32 accumulation*, which is what torch
  matmuls and convolutions use. GeForce cards run FP32 accumulation at half the rate of the
  FP16-accumulate figure their marketing quotes, hence their lower numbers here. A missing key
  means the card has no fast path for that type (no tensor cores, no bf16).
- ``cuda_context_bytes`` is memory taken outside the caching allocator by the CUDA context and
  the cuBLAS/cuDNN handles (CUDA 12, lazy module loading). These per-family numbers are
  estimates, to be replaced by measurement.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from trainmedic.errors import DeviceError

MiB = 2**20
GiB = 2**30
T = 1e12  # one TFLOP/s
GBps = 1e9  # one datasheet GB/s

# Estimates, not measurements: what a process holds on the card before its first tensor.
_CONTEXT_BYTES = {
    "pascal": 300 * MiB,
    "volta": 300 * MiB,
    "turing": 300 * MiB,
    "ampere": 420 * MiB,
    "ada": 420 * MiB,
    "hopper": 520 * MiB,
    "blackwell": 600 * MiB,
    "cpu": 0,
}


@dataclass(frozen=True)
class Device:
    """One card (or the host CPU), with the numbers the planner and the reports need."""

    key: str
    name: str
    memory_bytes: int
    memory_source: str  # "torch", "nvidia-smi", "sold" or "host": see the module docstring
    bandwidth_bytes_per_s: float
    peak_flops: dict[str, float] = field(hash=False)
    pcie_gen: int | None
    family: str
    compute_capability: tuple[int, int] | None
    is_gpu: bool
    cuda_context_bytes: int
    #: Streaming multiprocessors: how many blocks a kernel's grid is sized to fill.
    sm_count: int = 0

    @property
    def threads_per_sm(self) -> int:
        """Resident threads per SM (``maxThreadsPerMultiProcessor``), by compute capability."""
        return _THREADS_PER_SM.get(self.compute_capability or (0, 0), 2048)


def _gpu(key, name, memory_bytes, memory_source, bandwidth, flops, pcie_gen, family, cc) -> Device:
    return Device(
        sm_count=_SM_COUNTS[key],
        key=key,
        name=name,
        memory_bytes=int(memory_bytes),
        memory_source=memory_source,
        bandwidth_bytes_per_s=float(bandwidth),
        peak_flops={k: float(v) for k, v in flops.items()},
        pcie_gen=pcie_gen,
        family=family,
        compute_capability=cc,
        is_gpu=True,
        cuda_context_bytes=_CONTEXT_BYTES[family],
    )


# SMs per card, from NVIDIA's datasheets and architecture whitepapers (the GeForce and A10G counts
# from the same whitepapers' per-model tables); torch reports the same as multi_processor_count.
_SM_COUNTS = {
    "p100": 56,
    "v100-16gb": 80,
    "v100-32gb": 80,
    "t4": 40,
    "a100-40gb": 108,
    "a100-80gb": 108,
    "a100-80gb-pcie": 108,
    "a10": 72,
    "a10g": 80,
    "a40": 84,
    "rtxa6000": 84,
    "rtx3060-12gb": 28,
    "rtx3080-10gb": 68,
    "rtx3090": 82,
    "rtx3090ti": 84,
    "l4": 58,
    "l40": 142,
    "l40s": 142,
    "rtx6000ada": 142,
    "rtx4070ti": 60,
    "rtx4080": 76,
    "rtx4090": 128,
    "rtx4090d": 114,
    "rtx4090d-48gb": 114,
    "h100": 132,
    "h100-pcie": 114,
    "h200": 132,
}
# CUDA programming guide, "Technical Specifications per Compute Capability".
_THREADS_PER_SM = {
    (6, 0): 2048,
    (7, 0): 2048,
    (7, 5): 1024,
    (8, 0): 2048,
    (8, 6): 1536,
    (8, 9): 1536,
    (9, 0): 2048,
}


def _flops(fp32, tf32=None, fp16=None, bf16=None) -> dict[str, float]:
    rates = {"fp32": fp32, "tf32": tf32, "fp16": fp16, "bf16": bf16}
    return {k: v * T for k, v in rates.items() if v is not None}


# fmt: off
_CATALOG = [
    # The host: its memory is this machine's RAM at run time, which a catalog cannot know; the
    # planner asks psutil instead.
    Device(key="cpu", name="CPU (host memory)", memory_bytes=0, memory_source="host",
           bandwidth_bytes_per_s=0.0, peak_flops={}, pcie_gen=None, family="cpu",
           compute_capability=None, is_gpu=False, cuda_context_bytes=0),

    # --- Pascal, Volta, Turing ---
    # NVIDIA Tesla P100 datasheet (PCIe): 16 GB CoWoS HBM2, 732 GB/s, 9.3 TFLOPS fp32,
    # 18.7 TFLOPS fp16 (packed half2 on the CUDA cores: no tensor cores, no bf16). Memory: sold
    # 16 GiB; torch's figure on Kaggle's P100 is about 15.9 GiB but not known to the byte.
    _gpu("p100", "NVIDIA Tesla P100 PCIe 16 GB", 16 * GiB, "sold", 732 * GBps,
         _flops(9.3, fp16=18.7), 3, "pascal", (6, 0)),
    # NVIDIA Tesla V100 datasheet (SXM2): 900 GB/s, 15.7 TFLOPS fp32, 125 TFLOPS tensor fp16.
    # Memory: sold 16 / 32 GiB; nvidia-smi shows roughly 16160 / 32510 MiB (unconfirmed).
    _gpu("v100-16gb", "NVIDIA Tesla V100 SXM2 16 GB", 16 * GiB, "sold", 900 * GBps,
         _flops(15.7, fp16=125), 3, "volta", (7, 0)),
    _gpu("v100-32gb", "NVIDIA Tesla V100 SXM2 32 GB", 32 * GiB, "sold", 900 * GBps,
         _flops(15.7, fp16=125), 3, "volta", (7, 0)),
    # NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, 8.1 TFLOPS fp32, 65 TFLOPS fp16 (mixed
    # precision). torch reports 15,843,721,216 B (14.76 GiB, the Colab/Kaggle OOM figure);
    # nvidia-smi shows 15360 MiB.
    _gpu("t4", "NVIDIA T4", 15_843_721_216, "torch", 320 * GBps,
         _flops(8.1, fp16=65), 3, "turing", (7, 5)),

    # --- Ampere, data center and workstation (full-rate FP32 accumulation) ---
    # NVIDIA A100 datasheet: 40 GB HBM2 at 1,555 GB/s (SXM4 and PCIe alike); 19.5 TFLOPS fp32,
    # 156 tf32, 312 fp16/bf16 dense. torch reports 42,505,273,344 B (39.59 GiB) on the SXM4.
    _gpu("a100-40gb", "NVIDIA A100 40GB (SXM4)", 42_505_273_344, "torch", 1555 * GBps,
         _flops(19.5, 156, 312, 312), 4, "ampere", (8, 0)),
    # NVIDIA A100 80GB datasheet: HBM2e, 2,039 GB/s (SXM4), 1,935 GB/s (PCIe); same FLOP/s as
    # the 40 GB. torch reports 85,089,648,640 B (79.25 GiB) on the SXM4; nvidia-smi 81920 MiB.
    _gpu("a100-80gb", "NVIDIA A100 80GB (SXM4)", 85_089_648_640, "torch", 2039 * GBps,
         _flops(19.5, 156, 312, 312), 4, "ampere", (8, 0)),
    # Memory: sold 80 GiB; the PCIe board's torch figure is unknown (expect ~79.2 GiB).
    _gpu("a100-80gb-pcie", "NVIDIA A100 80GB PCIe", 80 * GiB, "sold", 1935 * GBps,
         _flops(19.5, 156, 312, 312), 4, "ampere", (8, 0)),
    # NVIDIA A10 datasheet: 24 GB GDDR6, 600 GB/s, 31.2 TFLOPS fp32, 62.5 tf32, 125 fp16/bf16
    # dense. Memory: nvidia-smi total 23028 MiB as listed by Modal (modal-labs/modal-client#2797).
    _gpu("a10", "NVIDIA A10", 23028 * MiB, "nvidia-smi", 600 * GBps,
         _flops(31.2, 62.5, 125, 125), 4, "ampere", (8, 6)),
    # A10G (AWS G5 only): no NVIDIA datasheet. AWS: 24 GB GDDR6, 600 GB/s. 80 SMs at 1.71 GHz
    # give 35 TFLOPS fp32 and, at GeForce-style FP32-accumulate tensor rates, 70 TFLOPS fp16/bf16
    # (figures as compared by Baseten, "NVIDIA A10 vs A10G"); tf32 assumed equal to fp32, as on
    # the GA102 GeForce cards. torch reports 23,836,098,560 B (22.20 GiB).
    _gpu("a10g", "NVIDIA A10G", 23_836_098_560, "torch", 600 * GBps,
         _flops(35.0, 35.0, 70, 70), 4, "ampere", (8, 6)),
    # NVIDIA A40 datasheet: 48 GB GDDR6 with ECC, 696 GB/s, 37.4 TFLOPS fp32, 74.8 tf32,
    # 149.7 fp16/bf16 dense. Memory: the L40S figure below (same 48 GB GDDR6, ECC on by default,
    # which takes 1/16); not measured on an A40.
    _gpu("a40", "NVIDIA A40", 46068 * MiB, "nvidia-smi", 696 * GBps,
         _flops(37.4, 74.8, 149.7, 149.7), 4, "ampere", (8, 6)),
    # NVIDIA RTX A6000 datasheet: 48 GB GDDR6, 768 GB/s, 38.7 TFLOPS fp32, 309.7 TFLOPS tensor
    # (sparse fp16): dense fp16/bf16 154.8, tf32 77.4. Memory: sold 48 GiB (ECC off by default;
    # turning it on removes 1/16).
    _gpu("rtxa6000", "NVIDIA RTX A6000", 48 * GiB, "sold", 768 * GBps,
         _flops(38.7, 77.4, 154.8, 154.8), 4, "ampere", (8, 6)),

    # --- Ampere GeForce (GA10x: tensor FP32 accumulation at half rate; tf32 = fp32 rate) ---
    # No NVIDIA datasheet gives tensor rates for the 3060; derived from the GA102 whitepaper's
    # per-SM rates: 28 SMs x 1.777 GHz -> 12.74 TFLOPS fp32, 25.5 fp16/bf16. 12 GB GDDR6 at
    # 15 Gbps x 192 bit = 360 GB/s. Memory: sold 12 GiB.
    _gpu("rtx3060-12gb", "NVIDIA GeForce RTX 3060 (12 GB)", 12 * GiB, "sold", 360 * GBps,
         _flops(12.74, 12.74, 25.5, 25.5), 4, "ampere", (8, 6)),
    # NVIDIA Ampere GA102 whitepaper, RTX 3080 (10 GB GDDR6X, 760 GB/s): 29.8 TFLOPS fp32,
    # 29.8 tf32, 59.5 fp16/bf16 with FP32 accumulate. Memory: sold 10 GiB.
    _gpu("rtx3080-10gb", "NVIDIA GeForce RTX 3080 (10 GB)", 10 * GiB, "sold", 760 * GBps,
         _flops(29.8, 29.8, 59.5, 59.5), 4, "ampere", (8, 6)),
    # NVIDIA Ampere GA102 whitepaper, RTX 3090 (24 GB GDDR6X, 936 GB/s): 35.6 TFLOPS fp32,
    # 35.6 tf32, 71 fp16/bf16 with FP32 accumulate. torch reports 25,438,715,904 B (23.69 GiB).
    _gpu("rtx3090", "NVIDIA GeForce RTX 3090", 25_438_715_904, "torch", 936 * GBps,
         _flops(35.6, 35.6, 71, 71), 4, "ampere", (8, 6)),
    # RTX 3090 Ti: NVIDIA spec page gives 10752 cores at 1.86 GHz (40 TFLOPS fp32), 24 GB
    # GDDR6X at 21 Gbps x 384 bit = 1008 GB/s; tensor rates derived from the GA102 per-SM rates
    # (84 SMs): 80 fp16/bf16. Memory: sold 24 GiB (the 3090 reports 23.69 GiB of the same).
    _gpu("rtx3090ti", "NVIDIA GeForce RTX 3090 Ti", 24 * GiB, "sold", 1008 * GBps,
         _flops(40.0, 40.0, 80.0, 80.0), 4, "ampere", (8, 6)),

    # --- Ada Lovelace, data center and workstation ---
    # NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s, 30.3 TFLOPS fp32, tf32 120 / fp16 242 /
    # bf16 242 with sparsity -> 60 / 121 / 121 dense. torch: 23,580,639,232 B (21.96 GiB), a
    # value not confirmed independently; nvidia-smi shows 23034 MiB (modal-labs/modal-client#2797).
    _gpu("l4", "NVIDIA L4", 23_580_639_232, "torch", 300 * GBps,
         _flops(30.3, 60, 121, 121), 4, "ada", (8, 9)),
    # NVIDIA L40 datasheet: 48 GB GDDR6 ECC, 864 GB/s, 90.5 TFLOPS fp32, tf32 90.5, fp16/bf16
    # 181.05 dense. Memory: the L40S figure (same memory, ECC on by default).
    _gpu("l40", "NVIDIA L40", 46068 * MiB, "nvidia-smi", 864 * GBps,
         _flops(90.5, 90.5, 181.05, 181.05), 4, "ada", (8, 9)),
    # NVIDIA L40S datasheet: 48 GB GDDR6 ECC, 864 GB/s, 91.6 TFLOPS fp32, tf32 183,
    # fp16/bf16 362.05 dense. nvidia-smi total 46068 MiB (modal-labs/modal-client#2797).
    _gpu("l40s", "NVIDIA L40S", 46068 * MiB, "nvidia-smi", 864 * GBps,
         _flops(91.6, 183, 362.05, 362.05), 4, "ada", (8, 9)),
    # NVIDIA RTX 6000 Ada datasheet: 48 GB GDDR6 ECC, 960 GB/s, 91.1 TFLOPS fp32; Ada whitepaper:
    # 364.2 fp16/bf16 with FP32 accumulate, 182.1 tf32. Memory: sold 48 GiB (ECC off by default).
    _gpu("rtx6000ada", "NVIDIA RTX 6000 Ada Generation", 48 * GiB, "sold", 960 * GBps,
         _flops(91.1, 182.1, 364.2, 364.2), 4, "ada", (8, 9)),

    # --- Ada GeForce (FP32 accumulation at half rate; tf32 = fp32 rate) ---
    # NVIDIA Ada whitepaper (as "RTX 4080 12GB", renamed 4070 Ti): 12 GB GDDR6X, 504 GB/s,
    # 40.1 TFLOPS fp32, 80.2 fp16/bf16 with FP32 accumulate. Memory: sold 12 GiB.
    _gpu("rtx4070ti", "NVIDIA GeForce RTX 4070 Ti", 12 * GiB, "sold", 504 * GBps,
         _flops(40.1, 40.1, 80.2, 80.2), 4, "ada", (8, 9)),
    # NVIDIA Ada whitepaper, RTX 4080 16GB: 716.8 GB/s, 48.7 TFLOPS fp32, 97.5 fp16/bf16 with
    # FP32 accumulate. Memory: sold 16 GiB.
    _gpu("rtx4080", "NVIDIA GeForce RTX 4080", 16 * GiB, "sold", 716.8 * GBps,
         _flops(48.7, 48.7, 97.5, 97.5), 4, "ada", (8, 9)),
    # NVIDIA Ada whitepaper, RTX 4090: 24 GB GDDR6X, 1008 GB/s, 82.6 TFLOPS fp32, 165.2
    # fp16/bf16 with FP32 accumulate. torch reports 25,393,692,672 B (23.65 GiB).
    _gpu("rtx4090", "NVIDIA GeForce RTX 4090", 25_393_692_672, "torch", 1008 * GBps,
         _flops(82.6, 82.6, 165.2, 165.2), 4, "ada", (8, 9)),
    # RTX 4090 D (China): NVIDIA lists 14592 cores at 2.52 GHz -> 73.5 TFLOPS fp32; 114 SMs at
    # the 4090's per-SM tensor rate -> 147.1 fp16/bf16. Same 24 GB GDDR6X at 1008 GB/s.
    # Memory: sold 24 GiB.
    _gpu("rtx4090d", "NVIDIA GeForce RTX 4090 D", 24 * GiB, "sold", 1008 * GBps,
         _flops(73.5, 73.5, 147.1, 147.1), 4, "ada", (8, 9)),
    # The 48 GB boards rebuilt from the 4090 D (24 x 2 GB GDDR6X, both sides of the board): the
    # 4090 D's die and rates, bandwidth assumed unchanged. Memory: sold 48 GiB; no reported value
    # known, so expect a few hundred MiB less.
    _gpu("rtx4090d-48gb", "NVIDIA GeForce RTX 4090 D (modified, 48 GB)", 48 * GiB, "sold",
         1008 * GBps, _flops(73.5, 73.5, 147.1, 147.1), 4, "ada", (8, 9)),

    # --- Hopper ---
    # NVIDIA H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, 67 TFLOPS fp32; tf32 989, fp16/bf16
    # 1,979 with sparsity -> 494.5 / 989.5 dense. torch reports 85,031,714,816 B (79.19 GiB);
    # nvidia-smi 81559 MiB.
    _gpu("h100", "NVIDIA H100 80GB HBM3 (SXM)", 85_031_714_816, "torch", 3350 * GBps,
         _flops(67, 494.5, 989.5, 989.5), 5, "hopper", (9, 0)),
    # NVIDIA H100 datasheet (PCIe): 80 GB HBM2e, 2 TB/s, 51 TFLOPS fp32; tf32 756, fp16/bf16
    # 1,513 with sparsity -> 378 / 756.5 dense. Memory: sold 80 GiB.
    _gpu("h100-pcie", "NVIDIA H100 PCIe", 80 * GiB, "sold", 2000 * GBps,
         _flops(51, 378, 756.5, 756.5), 5, "hopper", (9, 0)),
    # NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s; compute as the H100 SXM. torch
    # reports 150,101,082,112 B (139.79 GiB).
    _gpu("h200", "NVIDIA H200 (SXM, 141 GB)", 150_101_082_112, "torch", 4800 * GBps,
         _flops(67, 494.5, 989.5, 989.5), 5, "hopper", (9, 0)),
]
# fmt: on

DEVICES: dict[str, Device] = {device.key: device for device in _CATALOG}

# Other spellings, including the names torch.cuda.get_device_name() returns, so that a measured
# device can be looked up too. Keys and marketing names are always accepted; these add to them.
_ALIASES: dict[str, tuple[str, ...]] = {
    "p100": ("Tesla P100-PCIE-16GB", "p100-16gb"),
    "v100-16gb": ("Tesla V100-SXM2-16GB", "v100-16g"),
    "v100-32gb": ("Tesla V100-SXM2-32GB", "v100-32g"),
    "t4": ("Tesla T4",),
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "a100-40g", "a100-40"),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", "a100-80g", "a100-80", "a100-sxm-80gb"),
    "a100-80gb-pcie": ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    "rtxa6000": ("a6000",),
    "rtx3060-12gb": ("rtx3060", "3060", "3060-12gb", "NVIDIA GeForce RTX 3060"),
    "rtx3080-10gb": ("rtx3080", "3080", "3080-10gb", "NVIDIA GeForce RTX 3080"),
    "rtx3090": ("3090",),
    "rtx3090ti": ("3090ti",),
    "rtx6000ada": ("6000ada", "rtx6000-ada"),
    "rtx4070ti": ("4070ti",),
    "rtx4080": ("4080",),
    "rtx4090": ("4090",),
    "rtx4090d": ("4090d",),
    "rtx4090d-48gb": ("4090d-48gb", "4090d-48g", "rtx4090d-48g"),
    "h100": ("NVIDIA H100 80GB HBM3", "h100-sxm", "h100-sxm5", "h100-80gb"),
    "h100-pcie": ("NVIDIA H100 PCIe",),
    "h200": ("NVIDIA H200", "h200-sxm", "h200-141gb"),
}

# Names that fit several cards: better to ask than to plan for the wrong memory size.
_AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "a100": ("a100-40gb", "a100-80gb", "a100-80gb-pcie"),
    "a100pcie": ("a100-40gb", "a100-80gb-pcie"),
    "v100": ("v100-16gb", "v100-32gb"),
    "rtx6000": ("rtxa6000", "rtx6000ada"),
}

_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "quadro")


def _normalize(name: str) -> str:
    """``"NVIDIA GeForce RTX-3090"`` -> ``"rtx3090"``: lower case, letters and digits, no brand."""
    text = re.sub(r"[^a-z0-9]", "", name.lower())
    stripped = True
    while stripped:
        stripped = False
        for word in _VENDOR_WORDS:
            if text.startswith(word) and len(text) > len(word):
                text, stripped = text[len(word) :], True
    return text


def _build_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for key, device in DEVICES.items():
        for spelling in (key, device.name, *_ALIASES.get(key, ())):
            norm = _normalize(spelling)
            if index.setdefault(norm, key) != key:
                raise AssertionError(f"{spelling!r} names both {index[norm]!r} and {key!r}")
    for norm in _AMBIGUOUS:
        if norm in index:
            raise AssertionError(f"{norm!r} is both ambiguous and an alias of {index[norm]!r}")
    return index


_INDEX = _build_index()


def known_devices() -> list[str]:
    """Every catalog key, sorted: what ``get_device`` accepts besides the aliases."""
    return sorted(DEVICES)


def get_device(name: str) -> Device:
    """The catalog entry for a card name, ignoring case, spaces, dashes, underscores and brand words.

    Accepts keys (``"rtx3090"``), short forms (``"3090"``, ``"RTX 3090"``) and the names torch
    reports (``"NVIDIA A100-SXM4-80GB"``). Raises DeviceError for a name that fits several cards
    (``"a100"``) or none.
    """
    norm = _normalize(str(name))
    if norm in _INDEX:
        return DEVICES[_INDEX[norm]]
    if norm in _AMBIGUOUS:
        choices = ", ".join(_AMBIGUOUS[norm])
        raise DeviceError(
            f"GPU {name!r} fits more than one card: {choices}. Name one of them, "
            "or give --capacity SIZE (e.g. 48GiB) for another card."
        )
    close = difflib.get_close_matches(norm, list(_INDEX), n=3, cutoff=0.75)
    hint = list(dict.fromkeys(_INDEX[c] for c in close))  # closest first, each card once
    did_you_mean = f" Did you mean {' or '.join(hint)}?" if hint else ""
    raise DeviceError(
        f"unknown GPU {name!r}.{did_you_mean} Known: {', '.join(known_devices())}; "
        "or give --capacity SIZE (e.g. 48GiB) for any other card."
    )
