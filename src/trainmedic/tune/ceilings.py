"""The device's roofs — peak FLOP/s per precision and memory bandwidth — and a step's place under them.

A known GPU's roofs are its datasheet numbers (``trainmedic.devices``). A CPU has no datasheet
a program can look up, and its real roofs depend on the SIMD units, the thread count and the
memory channels; so they are measured, the way ``tune`` measures everything else: a square
matmul per precision (compute) and one large ``copy_`` (bandwidth). A GPU the catalog does not
know is measured the same way on the GPU. Measuring takes one to two seconds, so the result is
cached as JSON per machine, keyed by what changes the numbers (CPU or GPU model, thread count,
torch version).

``roofline()`` puts one configuration's counted FLOPs and bytes per step (``counting.py``) and
its measured step time against those roofs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from trainmedic._os import write_text_atomically
from trainmedic.roofline.model import Ceilings
from trainmedic.roofline.place import catalog_ceilings
from trainmedic.run.probe.device import cpu_name
from trainmedic.tune.grid import resolve_device

CACHE_FORMAT = "trainmedic.ceilings/1"
CACHE_FILE = "ceilings.json"

# Sizes chosen so that the whole measurement stays near a second on a 2-core machine: a
# 1024 x 1024 fp32 matmul is compute-bound on CPUs (its operands fit no cache level, its
# reuse is ~170 FLOP/byte); 256 MiB is far beyond any CPU's last-level cache.
CPU_MATMUL_N = 1024
GPU_MATMUL_N = 4096
COPY_BYTES = 256 * 2**20
#: Shortest timed stretch: long enough that timer resolution and one-off stalls don't matter.
MIN_TIMED_S = 0.05
REPEATS = 5
# A precision without a fast path (fp16 on many CPUs runs far below fp32) is measured on a
# matrix small enough to stay within this time per call; a slow path is compute-bound anyway.
SLOW_CALL_S = 0.4


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainmedic"


def device_ceilings(
    device: str = "cpu", *, cache_dir: str | Path | None = None, refresh: bool = False
) -> Ceilings:
    """The roofs of ``device`` ("cpu", "cuda", "cuda:N").

    A CUDA card the catalog knows gets its datasheet numbers (source "catalog"); any other
    card, and the CPU, are measured once (source "measured") and cached in
    ``cache_dir/ceilings.json`` (default ``$XDG_CACHE_HOME/trainmedic`` or ``~/.cache/trainmedic``).
    ``refresh`` measures again even when the cache holds an entry. A corrupt cache file is
    ignored and rewritten. Raises TuneError for a device string that is not a CPU or CUDA
    device, or a CUDA device this torch cannot see.
    """
    target = resolve_device(device)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if target.type == "cpu":
        key = cpu_cache_key()
        description = f"cpu ({cpu_name()}, {torch.get_num_threads()} threads)"
        return _cached(folder / CACHE_FILE, key, refresh, lambda: _measure(description, None))
    index = target.index if target.index is not None else torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    known = catalog_ceilings(name)
    if known is not None:
        return known
    key = f"cuda|{name}|torch={torch.__version__}"
    return _cached(folder / CACHE_FILE, key, refresh, lambda: _measure(name, torch.device("cuda", index)))


def cpu_cache_key() -> str:
    """What the CPU's measured roofs depend on: the chip, the threads torch runs on, torch's kernels."""
    return f"cpu|{cpu_name()}|threads={torch.get_num_threads()}|torch={torch.__version__}"


# --- cache -------------------------------------------------------------------------------------


def _cached(path: Path, key: str, refresh: bool, measure: Callable[[], Ceilings]) -> Ceilings:
    entries = _read_entries(path)
    if not refresh and key in entries:
        found = _ceilings_from(entries[key])
        if found is not None:
            return found
    ceilings = measure()
    entries[key] = {**ceilings.to_dict(), "measured_at": time.time()}
    entries[key].pop("ridge", None)  # derived: recomputed on load
    try:
        write_text_atomically(path, json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=2) + "\n")
    except OSError:
        pass  # an unwritable cache costs a re-measurement next time, not this run
    return ceilings


def _read_entries(path: Path) -> dict[str, dict]:
    """The cache's entries; {} for a missing, unreadable or foreign file (it is then rewritten)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("format") != CACHE_FORMAT
        or not isinstance(data.get("entries"), dict)
    ):
        return {}
    return {k: v for k, v in data["entries"].items() if isinstance(v, dict)}


def _ceilings_from(entry: dict) -> Ceilings | None:
    try:
        peaks = {str(p): float(f) for p, f in entry["peak_flops"].items()}
        bandwidth = float(entry["bandwidth_bytes_per_s"])
        ceilings = Ceilings(str(entry["device"]), peaks, bandwidth, str(entry["source"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if bandwidth <= 0 or not peaks or any(not f > 0 for f in peaks.values()):
        return None
    return ceilings


# --- measuring ---------------------------------------------------------------------------------


def _measure(description: str, gpu: torch.device | None) -> Ceilings:
    """Peak matmul FLOP/s per precision and copy bandwidth, measured on the CPU or on ``gpu``."""
    peaks: dict[str, float] = {}
    if gpu is None:
        for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
            rate = _matmul_rate(dtype, None, CPU_MATMUL_N)
            if rate:
                peaks[precision] = rate
    else:
        with torch.cuda.device(gpu):
            peaks.update(_gpu_peaks(gpu))
    bandwidth = _copy_rate(gpu)
    return Ceilings(description, peaks, bandwidth, "measured")


def _gpu_peaks(gpu: torch.device) -> dict[str, float]:
    peaks: dict[str, float | None] = {}  # None: not measurable (dropped below)
    ampere_or_later = torch.cuda.get_device_capability(gpu) >= (8, 0)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        peaks["fp32"] = _matmul_rate(torch.float32, gpu, GPU_MATMUL_N)
        if ampere_or_later:  # TF32 tensor cores exist from Ampere on; earlier cards have no tf32 roof
            torch.set_float32_matmul_precision("high")
            peaks["tf32"] = _matmul_rate(torch.float32, gpu, GPU_MATMUL_N)
    finally:
        torch.set_float32_matmul_precision(before)
    peaks["fp16"] = _matmul_rate(torch.float16, gpu, GPU_MATMUL_N)
    if torch.cuda.is_bf16_supported():
        peaks["bf16"] = _matmul_rate(torch.bfloat16, gpu, GPU_MATMUL_N)
    return {p: f for p, f in peaks.items() if f}


def _matmul_rate(dtype: torch.dtype, gpu: torch.device | None, n: int) -> float | None:
    """Best FLOP/s of an n x n matmul in ``dtype``, n shrunk for a slow path; None if unsupported."""
    sync = _sync(gpu)
    try:
        warm = torch.randn(128, 128, device=gpu).to(dtype)
        torch.mm(warm, warm)  # first call: kernel selection, thread pool start-up
        # The probe is 512, not smaller: on a busy 2-core machine a 256 matmul measured 1.4
        # GFLOP/s with 2 threads (each call waits for the descheduled thread), 1024 measured 44.
        probe = min(n, 512)
        a, b = (torch.randn(probe, probe, device=gpu).to(dtype) for _ in range(2))
        sync()
        started = time.perf_counter()
        torch.mm(a, b)
        sync()
        rate = 2 * probe**3 / max(time.perf_counter() - started, 1e-9)
        while n > probe and 2 * n**3 / rate > SLOW_CALL_S:
            n //= 2
        rates = [
            _best_rate(lambda: torch.mm(a, b), 2 * probe**3, sync)
        ]  # small ones can be the fastest on a CPU
        a, b = (torch.randn(n, n, device=gpu).to(dtype) for _ in range(2))
        rates.append(_best_rate(lambda: torch.mm(a, b), 2 * n**3, sync))
        return max(rates)
    except RuntimeError:  # no kernel for this dtype on this device
        return None


def _copy_rate(gpu: torch.device | None) -> float:
    """Best bytes/s of ``dst.copy_(src)`` over COPY_BYTES: read + write, STREAM's convention."""
    sync = _sync(gpu)
    src = torch.ones(
        COPY_BYTES // 4, dtype=torch.float32, device=gpu
    )  # ones/zeros: pages touched before timing
    dst = torch.zeros_like(src)
    dst.copy_(src)
    return _best_rate(lambda: dst.copy_(src), 2 * COPY_BYTES, sync)


def _best_rate(run: Callable[[], object], work: float, sync: Callable[[], None]) -> float:
    """``work`` per call over the fastest of REPEATS timed stretches of at least MIN_TIMED_S.

    The best, not the median: a roof is what the device can do, and every disturbance (another
    process, a frequency dip) only makes a stretch slower.
    """
    calls = 1
    sync()
    while True:  # find how many calls fill MIN_TIMED_S
        started = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        elapsed = time.perf_counter() - started
        if elapsed >= MIN_TIMED_S:
            break
        calls = max(calls * 2, int(calls * MIN_TIMED_S / max(elapsed, 1e-9)) + 1)
    best = elapsed / calls
    for _ in range(REPEATS - 1):
        started = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        best = min(best, (time.perf_counter() - started) / calls)
    return work / best


def _sync(gpu: torch.device | None) -> Callable[[], None]:
    if gpu is None:
        return lambda: None
    return lambda: torch.cuda.synchronize(gpu)
