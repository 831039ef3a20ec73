"""What the job runs on, and GPU readings when there is a GPU.

Nothing here is required: without CUDA or NVML the report says why the GPU side is missing
and the CPU analysis stands on its own. NVML (``pip install trainmedic[gpu]``) is imported
lazily; a field a driver cannot answer is left out rather than failing the run.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
from typing import Any

import psutil

from trainmedic.run.report.model import DeviceInfo


def cuda_in_use() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a broken CUDA install must not break the report
        return False


def describe(nvml: NvmlSampler | None = None) -> DeviceInfo:
    torch = sys.modules.get("torch")
    details: dict[str, Any] = {
        "cpu": cpu_name(),
        "cpu_cores": psutil.cpu_count(logical=True),
        "ram_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
    }
    if torch is not None:
        details["torch"] = torch.__version__
    if torch is not None and cuda_in_use():
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        details.update(
            cuda=torch.version.cuda,
            gpu_memory_bytes=props.total_memory,
            max_memory_allocated_bytes=torch.cuda.max_memory_allocated(index),
        )
        details["nvml"] = (
            nvml.summary() if nvml is not None else {"available": False, "reason": "not started"}
        )
        return DeviceInfo("cuda", props.name, details)
    details["cuda"] = _why_no_cuda(torch)
    return DeviceInfo("cpu", details["cpu"], details)


def _why_no_cuda(torch: Any) -> str:
    if torch is None:
        return "not used: the script did not import torch"
    if not torch.cuda.is_available():
        build = (
            "a CPU-only build"
            if torch.version.cuda is None
            else f"CUDA {torch.version.cuda} build, no device visible"
        )
        return f"not available: torch {torch.__version__} is {build}; GPU categories (transfer, sync, memory_bandwidth) were not measured"
    return "available but not used by the script"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class NvmlSampler:
    """Samples NVML every ``interval`` s: utilisation, memory, power vs limit, P-state, SM clock, PCIe.

    Keeps running sums and extremes only, so memory does not grow with the run.
    """

    FIELDS = (
        "util_gpu_pct",
        "util_mem_pct",
        "memory_used_bytes",
        "power_w",
        "sm_clock_mhz",
        "pcie_tx_kbps",
        "pcie_rx_kbps",
        "pstate",
    )

    def __init__(self, index: int = 0, interval: float = 0.5) -> None:
        self.index = index
        self.interval = interval
        self.error: str | None = None
        self._sums: dict[str, float] = {}
        self._max: dict[str, float] = {}
        self._count = 0
        self._static: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None

    def start(self) -> bool:
        try:
            import pynvml  # from nvidia-ml-py
        except ImportError:
            self.error = "nvidia-ml-py is not installed: pip install 'trainmedic[gpu]'"
            return False
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._static["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000
            self._static["pcie_gen"] = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(self._handle)
            self._static["pcie_width"] = pynvml.nvmlDeviceGetCurrPcieLinkWidth(self._handle)
        except Exception as exc:  # noqa: BLE001 - NVMLError subclasses vary by driver
            self.error = f"NVML unavailable: {exc}"
            return False
        self._nvml = pynvml
        self._thread = threading.Thread(target=self._run, name="trainmedic-nvml", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _read(self) -> dict[str, float]:
        n, h = self._nvml, self._handle
        reading: dict[str, float] = {}
        probes = {
            "util_gpu_pct": lambda: n.nvmlDeviceGetUtilizationRates(h).gpu,
            "util_mem_pct": lambda: n.nvmlDeviceGetUtilizationRates(h).memory,
            "memory_used_bytes": lambda: n.nvmlDeviceGetMemoryInfo(h).used,
            "power_w": lambda: n.nvmlDeviceGetPowerUsage(h) / 1000,
            "sm_clock_mhz": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "pcie_tx_kbps": lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES),
            "pcie_rx_kbps": lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES),
            "pstate": lambda: n.nvmlDeviceGetPerformanceState(h),
        }
        for name, probe in probes.items():
            try:
                reading[name] = float(probe())
            except Exception:  # noqa: BLE001 - a field this driver cannot answer is left out
                continue
        return reading

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for name, value in self._read().items():
                self._sums[name] = self._sums.get(name, 0.0) + value
                self._max[name] = max(self._max.get(name, value), value)
            self._count += 1

    def summary(self) -> dict[str, Any]:
        if self.error is not None:
            return {"available": False, "reason": self.error}
        out: dict[str, Any] = {"available": True, "samples": self._count, **self._static}
        for name, total in self._sums.items():
            out[f"{name}_mean"] = round(total / max(self._count, 1), 2)
            out[f"{name}_max"] = self._max[name]
        return out


def nvml_wanted() -> bool:
    return os.environ.get("TRAINMEDIC_NVML", "1") != "0"
