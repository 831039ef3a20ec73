"""Environment facts every benchmark result carries: when, on what machine, with which versions.

    from _env import environment, results_path
    env = environment()                       # a JSON-ready dict
    path = results_path("overhead")           # benchmarks/results/overhead-YYYY-MM-DD.json

Nothing here imports torch: versions are read from the installed distributions, so a benchmark
that measures start-up or memory is not disturbed by collecting them. ``gpu()`` is separate and
does import torch, for the benchmarks that need a GPU anyway.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
RESULTS = BENCHMARKS / "results"


def today() -> str:
    return _dt.date.today().isoformat()


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def results_path(name: str, *parts: str, date: str | None = None) -> Path:
    """``benchmarks/results/<name>[-<part>...]-<date>.json``; parts are made file-name safe."""
    stem = "-".join([name, *(slug(p) for p in parts if p), date or today()])
    return RESULTS / f"{stem}.json"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-").lower() or "unknown"


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu() -> dict[str, Any]:
    model = None
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    info: dict[str, Any] = {
        "model": model or platform.processor() or platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "hypervisor": "hypervisor" in flags,
    }
    try:
        import psutil

        info["physical_cores"] = psutil.cpu_count(logical=False)
        info["ram_bytes"] = psutil.virtual_memory().total
    except Exception:  # noqa: BLE001, S110 - psutil is a nicety here
        pass
    return info


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def git() -> dict[str, Any]:
    def out(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except Exception:  # noqa: BLE001 - not a checkout, or no git
            return None

    status = out("status", "--porcelain", "--untracked-files=no")
    return {"commit": out("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def environment() -> dict[str, Any]:
    """Date, machine and versions, as recorded in every result file."""
    return {
        "date": today(),
        "timestamp": now(),
        "host": {
            "cpu": cpu(),
            "os": f"{platform.system()} {platform.release()}",
            "load_average_1_5_15": load_average(),
        },
        "versions": {
            "python": platform.python_version(),
            "python_implementation": platform.python_implementation(),
            "torch": version("torch"),
            "numpy": version("numpy"),
            "trainmedic": version("trainmedic"),
        },
        "git": git(),
        "executable": sys.executable,
    }


def gpu() -> dict[str, Any] | None:
    """The CUDA device torch sees (imports torch), or None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    info: dict[str, Any] = {
        "name": props.name,
        "count": torch.cuda.device_count(),
        "memory_bytes": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda,
    }
    try:
        info["driver"] = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
            .stdout.splitlines()[0]
            .strip()
        )
    except Exception:  # noqa: BLE001, S110 - nvidia-smi is optional
        pass
    return info


def system_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot, from /proc/stat (other load on a shared box)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def evict_pages(path: Path) -> None:
    """Drop ``path``'s pages (a file, or every file under a folder) from the page cache, so the
    next read comes from the disk; written pages are synced first (only clean pages can go)."""
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def write_result(result: dict[str, Any], path: Path, say: bool = True) -> None:
    """Write a benchmark's result JSON to ``path`` whole (a harness killed mid-write keeps the
    previous file) and, with ``say``, say where."""
    import json

    from trainmedic._os import write_text_atomically

    write_text_atomically(path, json.dumps(result, indent=2) + "\n")
    if say:
        print(f"written: {os.path.relpath(path, REPO)}")
