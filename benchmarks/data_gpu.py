"""``trainmedic.data`` on a CUDA device: vram vs ram tier step rates, and host-to-device bandwidth.

Needs a CUDA build of torch and a visible GPU; without them it says why and exits 2, writing
nothing. Same conventions as ``data_tiers.py`` (whose harness it reuses): every comparison runs
its arms in one process, interleaved rounds with the order rotated, medians with min..max, the
verdict from the median of per-round paired ratios. Every block ends with
``torch.cuda.synchronize()`` inside the timing, so asynchronous work is counted where it ran.

``step``  a small training step (MLP 64-512-512-10, Adam, cross-entropy, batch 256) fed by
          ``data.load(..., device="cuda")`` with ``tier="vram"`` vs ``tier="ram"`` (pinned
          buffers, non_blocking copies on a side stream): steps/s. Expected: vram >= ram.
          Context: ``DataLoader(TensorDataset, pin_memory=True)`` + ``.to(device, non_blocking=True)``.
``h2d``   achieved host-to-device bandwidth of the ram tier (iterating a loader of 16 KiB rows,
          4 MiB a batch, nothing else on the GPU) vs a bare pinned ``.to(device,
          non_blocking=True)`` of the same bytes, and vs pageable ``.to(device)`` copies; the
          host-side gather into pinned memory alone is shown as context (the loader cannot
          beat the slower of gather and link). Proposed threshold: >= 70 % of the bare pinned copy.

The result records torch.cuda.get_device_name, the driver, and the PCIe link generation and
width (current and max) from NVML (pynvml / nvidia-ml-py) or nvidia-smi when available.

    python benchmarks/data_gpu.py                 # ~2 min; writes results/data_gpu-<device>-<date>.json
    python benchmarks/data_gpu.py --quick         # smoke check, writes nothing unless --out
    python benchmarks/data_gpu.py --cpu --quick   # check the harness on a machine without CUDA; writes nothing
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _env

BATCH = 256


def no_cuda_reason() -> str | None:
    """Why this benchmark cannot run here, or None when a CUDA device is usable."""
    try:
        import torch
    except ImportError:
        return "torch is not installed in this environment"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None); install a CUDA build"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device "
            f"(torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    return None


def pcie_link(index: int) -> dict[str, Any]:
    """PCIe generation and width, current and max, from NVML, else nvidia-smi; {} when neither answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            info = {
                "source": "nvml",
                "gen_current": pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
                "gen_max": pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
                "width_current": pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
                "width_max": pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
            }
            try:
                info["gen_device_max"] = pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)
            except Exception:  # noqa: BLE001, S110 - older drivers
                pass
            return info
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001, S110 - NVML is optional; fall back to nvidia-smi
        pass
    try:
        fields = "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
        line = (
            subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
            .stdout.strip()
            .splitlines()[0]
        )
        values = [v.strip() for v in line.split(",")]
        return {
            "source": "nvidia-smi",
            **dict(zip(("gen_current", "gen_max", "width_current", "width_max"), values)),
        }
    except Exception:  # noqa: BLE001 - no NVML, no nvidia-smi
        return {}


class Dev:
    """The device and its helpers; ``--cpu`` swaps in no-op stand-ins to check the harness itself."""

    def __init__(self, cpu: bool) -> None:
        import torch

        self.cpu = cpu
        self.device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
        self.vram = "ram" if cpu else "vram"  # no VRAM on the CPU: the harness check serves ram twice
        self.synchronize = (lambda: None) if cpu else torch.cuda.synchronize

    def pin(self, tensor: Any) -> Any:
        return tensor if self.cpu else tensor.pin_memory()


def section_step(dev: Dev, size: dict[str, int], rounds: int, block_s: float) -> dict[str, Any]:
    import numpy as np
    import torch
    from data_tiers import Arm, compare, interleave
    from torch.utils.data import DataLoader, TensorDataset

    from trainmedic import data

    device = dev.device
    n = size["step_rows"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 64), dtype=np.float32)
    y = rng.integers(0, 10, n)
    sample_bytes = 64 * 4 + 8

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb: Any, yb: Any) -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xb), yb).backward()
        opt.step()

    def stepper(stream: Any) -> Callable[[int], tuple[int, int]]:
        def run(k: int) -> tuple[int, int]:
            samples = 0
            for _ in range(k):
                xb, yb = next(stream)
                step(xb, yb)
                samples += len(xb)
            dev.synchronize()
            return samples, samples * sample_bytes

        return run

    def endless(make: Callable[[], Any]) -> Any:
        while True:
            yield from make()

    vram = data.load({"x": x, "y": y}, batch_size=BATCH, tier=dev.vram, device=device, progress=False)
    ram = data.load({"x": x, "y": y}, batch_size=BATCH, tier="ram", device=device, progress=False)
    baseline = DataLoader(
        TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
        batch_size=BATCH,
        shuffle=True,
        pin_memory=not dev.cpu,
        generator=torch.Generator().manual_seed(0),
    )

    def to_device(make: Callable[[], Any]) -> Any:
        for xb, yb in endless(make):
            yield xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)

    a_vram = Arm(
        "vram tier", stepper(endless(lambda: vram)), describe="data.load(dict, tier='vram', device='cuda')"
    )
    a_ram = Arm(
        "ram tier",
        stepper(endless(lambda: ram)),
        describe="data.load(dict, tier='ram', device='cuda'): pinned, non_blocking",
    )
    a_dl = Arm(
        "DataLoader(TensorDataset, pin_memory)",
        stepper(to_device(lambda: baseline)),
        describe="DataLoader(TensorDataset, batch_size=256, shuffle=True, pin_memory=True) + .to(non_blocking=True)",
    )
    # Model-only step on a resident batch: the ceiling any loader can reach.
    xb0, yb0 = torch.from_numpy(x[:BATCH]).to(device), torch.from_numpy(y[:BATCH]).to(device)

    def model_only(k: int) -> tuple[int, int]:
        for _ in range(k):
            step(xb0, yb0)
        dev.synchronize()
        return k * BATCH, k * BATCH * sample_bytes

    a_model = Arm(
        "model step only (resident batch)", model_only, describe="the same step on one resident batch"
    )
    arms = [a_vram, a_ram, a_dl, a_model]
    interleave(arms, rounds, block_s)
    comparisons = [
        compare(
            "step: vram tier vs ram tier",
            a_vram,
            a_ram,
            what="samples",
            threshold=1.0,
            source="expectation",
            goal="vram >= ram steps/s",
        )
    ]
    context = [
        compare(
            "context: ram tier vs DataLoader(pin_memory)",
            a_ram,
            a_dl,
            what="samples",
            threshold=0.0,
            source="context",
            goal="-",
        ),
        compare(
            "context: vram tier vs model step only",
            a_vram,
            a_model,
            what="samples",
            threshold=0.0,
            source="context",
            goal="-",
            percent=True,
        ),
        compare(
            "context: ram tier vs model step only",
            a_ram,
            a_model,
            what="samples",
            threshold=0.0,
            source="context",
            goal="-",
            percent=True,
        ),
    ]
    for c in context:
        c["pass"] = None
    return {
        "rows": n,
        "sample_bytes": sample_bytes,
        "arms": arms,
        "comparisons": comparisons,
        "context": context,
        "model": "MLP 64-512-512-10, Adam, cross-entropy, batch 256",
    }


def section_h2d(dev: Dev, size: dict[str, int], rounds: int, block_s: float) -> dict[str, Any]:
    import numpy as np
    import torch
    from data_tiers import Arm, compare, interleave

    from trainmedic import data

    device = dev.device
    n, width = size["h2d_rows"], 4096
    x = np.random.default_rng(1).standard_normal((n, width), dtype=np.float32)
    row_bytes = width * 4
    batch_bytes = BATCH * row_bytes

    ram = data.load({"x": x}, batch_size=BATCH, tier="ram", device=device, progress=False)

    def endless(make: Callable[[], Any]) -> Any:
        while True:
            yield from make()

    stream = endless(lambda: ram)

    def loader_run(k: int) -> tuple[int, int]:
        samples = 0
        for _ in range(k):
            samples += len(next(stream)[0])
        dev.synchronize()
        return samples, samples * row_bytes

    pinned = dev.pin(torch.from_numpy(x[:BATCH].copy()))
    pageable = torch.from_numpy(x[:BATCH].copy())
    dest = torch.empty((BATCH, width), device=device)
    host_x = torch.from_numpy(x)
    order = torch.randperm(n)
    staging = dev.pin(torch.empty((BATCH, width)))

    def copies(src: Any, non_blocking: bool) -> Callable[[int], tuple[int, int]]:
        def run(k: int) -> tuple[int, int]:
            for _ in range(k):
                src.to(device, non_blocking=non_blocking)
            dev.synchronize()
            return k * BATCH, k * batch_bytes

        return run

    def copies_into(src: Any) -> Callable[[int], tuple[int, int]]:
        def run(k: int) -> tuple[int, int]:
            for _ in range(k):
                dest.copy_(src, non_blocking=True)
            dev.synchronize()
            return k * BATCH, k * batch_bytes

        return run

    position = [0]

    def host_gather(k: int) -> tuple[int, int]:
        for _ in range(k):
            start = position[0] % (n - BATCH)
            torch.index_select(host_x, 0, order[start : start + BATCH], out=staging)
            position[0] += BATCH
        return k * BATCH, k * batch_bytes

    a_loader = Arm(
        "ram tier (gather + pinned copy)",
        loader_run,
        describe="for (x,) in data.load(dict, tier='ram', device='cuda')",
    )
    a_pinned = Arm(
        "bare pinned .to(non_blocking)",
        copies(pinned, True),
        describe="pinned[256, 4096].to(device, non_blocking=True)",
    )
    a_pinned_into = Arm(
        "bare pinned copy_ into one buffer",
        copies_into(pinned),
        describe="dest.copy_(pinned, non_blocking=True)",
    )
    a_pageable = Arm(
        "bare pageable .to()", copies(pageable, False), describe="pageable[256, 4096].to(device)"
    )
    a_gather = Arm(
        "host gather into pinned (no copy)", host_gather, describe="torch.index_select(x, 0, idx, out=pinned)"
    )
    arms = [a_loader, a_pinned, a_pinned_into, a_pageable, a_gather]
    interleave(arms, rounds, block_s)
    comparisons = [
        compare(
            "h2d: ram tier vs bare pinned copy",
            a_loader,
            a_pinned,
            what="bytes",
            threshold=0.70,
            source="proposed",
            goal=">= 70 % of the bare pinned copy's GB/s",
            percent=True,
        )
    ]
    context = [
        compare(
            "context: bare pinned vs pageable",
            a_pinned,
            a_pageable,
            what="bytes",
            threshold=0.0,
            source="context",
            goal="-",
        ),
        compare(
            "context: ram tier vs host gather alone",
            a_loader,
            a_gather,
            what="bytes",
            threshold=0.0,
            source="context",
            goal="-",
            percent=True,
        ),
        compare(
            "context: ram tier vs bare pageable",
            a_loader,
            a_pageable,
            what="bytes",
            threshold=0.0,
            source="context",
            goal="-",
        ),
    ]
    for c in context:
        c["pass"] = None
    copied = ram._tier.mover.copied_bytes
    return {
        "rows": n,
        "sample_bytes": row_bytes,
        "batch_bytes": batch_bytes,
        "what": "bytes",
        "arms": arms,
        "comparisons": comparisons,
        "context": context,
        "loader_copied_bytes": copied,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=("step", "h2d"), help="run only these sections")
    parser.add_argument(
        "--quick", action="store_true", help="small data, 3 short rounds; writes nothing unless --out"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 9; --quick 3)")
    parser.add_argument(
        "--block-seconds", type=float, help="seconds per arm per round (default 0.4; --quick 0.12)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no result file")
    parser.add_argument(
        "--out", type=Path, help="result file (default benchmarks/results/data_gpu-<device>-<date>.json)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="check the harness itself on the CPU (ram tier twice, no pinning, no synchronize); numbers mean nothing, writes nothing",
    )
    args = parser.parse_args()

    reason = None if args.cpu else no_cuda_reason()
    if reason:
        print(f"data_gpu: needs a CUDA device: {reason}. Nothing was run or written.", file=sys.stderr)
        return 2

    import torch
    from data_tiers import arm_summary, print_profile, print_section, print_summary, profile  # noqa: F401

    rounds = args.rounds or (3 if args.quick else 9)
    block_s = args.block_seconds or (0.12 if args.quick else 0.4)
    size = {"step_rows": 200_000 if args.quick else 1_000_000, "h2d_rows": 8_192 if args.quick else 65_536}
    dev = Dev(args.cpu)
    index = None if args.cpu else torch.cuda.current_device()
    started = time.perf_counter()
    env = _env.environment()
    env["versions"].update({d: _env.version(d) for d in ("h5py", "sqlalchemy", "nvidia-ml-py", "pynvml")})
    result: dict[str, Any] = {
        "benchmark": "data_gpu",
        **env,
        "device": "cpu (--cpu harness check)" if args.cpu else torch.cuda.get_device_name(index),
        "gpu": None if args.cpu else _env.gpu(),
        "pcie": {} if args.cpu else pcie_link(index),
        "settings": {
            "quick": args.quick,
            "rounds": rounds,
            "block_seconds": block_s,
            "batch_size": BATCH,
            **size,
        },
        "sections": {},
    }
    everything: list[dict[str, Any]] = []
    for name, runner in (("step", section_step), ("h2d", section_h2d)):
        if args.only and name not in args.only:
            continue
        print(f"[data_gpu] section {name} ...", file=sys.stderr, flush=True)
        raw = runner(dev, size, rounds, block_s)
        arms = raw.pop("arms")
        what = raw.get("what", "samples")
        section = {**raw, "arms": [{"name": a.name, **arm_summary(a, what)} for a in arms]}
        result["sections"][name] = section
        print_section(name, section)
        everything += raw["comparisons"] + raw.get("context", [])
        del arms, raw
        gc.collect()
        if not args.cpu:
            torch.cuda.empty_cache()
    verdicts = [c["pass"] for c in everything if c["pass"] is not None]
    result["summary"] = [
        {k: c[k] for k in ("name", "measure", "ratio", "threshold", "threshold_source", "goal", "pass")}
        for c in everything
    ]
    result["pass"] = all(verdicts)
    result["benchmark_seconds"] = time.perf_counter() - started
    pcie = result["pcie"]
    link = (
        f"PCIe gen {pcie.get('gen_current')} x{pcie.get('width_current')} (max gen {pcie.get('gen_max')} x{pcie.get('width_max')})"
        if pcie
        else "PCIe link unknown (no NVML)"
    )
    print(f"\ndevice: {result['device']}; {link}")
    print_summary(everything)
    if not args.cpu and (args.out or not (args.no_write or args.quick)):
        path = args.out or _env.results_path("data_gpu", result["device"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"written: {os.path.relpath(path, _env.REPO)}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
