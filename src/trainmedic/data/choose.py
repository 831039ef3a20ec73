"""Which tier serves a source: the rule of thumb, with the numbers behind the choice.

The rule of thumb is "if the dataset is under 50 % of available RAM, cache it", and a table
goes to VRAM when the card has room beside the model. Auto follows both, fastest first:

1. ``vram`` when the device is CUDA and the data fits the free VRAM minus the headroom the model
   needs (``vram_headroom``: bytes, a fraction of the card, or a ``trainmedic.plan`` Plan of the
   training step, whose reserved bytes are the headroom; by default half the card);
2. ``ram`` when it fits half of the available RAM (the other half is the process's and the
   page cache's) — or ``ram_budget`` when given;
3. ``disk`` when the decoded cache fits the free space of ``cache_dir``;
4. ``stream`` otherwise (sources that can be read at any row only).

The available RAM respects a cgroup memory limit (containers, SLURM), which ``psutil`` alone does
not see.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.errors import TierError
from trainmedic.units import format_bytes

TIERS = ("vram", "ram", "disk", "stream")


@dataclass(frozen=True)
class Resources:
    """Memory the tiers could use, in bytes; None where there is no such memory (no CUDA)."""

    ram_available: int
    vram_free: int | None = None
    vram_total: int | None = None
    disk_free: int | None = None
    cache_root: str = ""


@dataclass
class Decision:
    tier: str
    lines: list[str] = field(default_factory=list)


def measure_resources(device: Any, cache_root: Path) -> Resources:
    import psutil

    ram = min(psutil.virtual_memory().available, cgroup_headroom())
    vram_free = vram_total = None
    if device.type == "cuda":
        import torch

        vram_free, vram_total = torch.cuda.mem_get_info(device)
    disk_free = None
    probe = Path(cache_root)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        disk_free = shutil.disk_usage(probe).free
    except OSError:
        pass
    return Resources(int(ram), vram_free, vram_total, disk_free, str(cache_root))


def choose_tier(
    requested: str,
    nbytes: int,
    *,
    cuda: bool,
    random_access: bool,
    resources: Resources,
    vram_headroom: Any = 0.5,
    ram_budget: int | None = None,
    local_ranks: int = 1,
) -> Decision:
    """Pick the tier for ``nbytes`` of decoded samples, or check a forced one; explain both.

    ``local_ranks`` processes on this node each hold their own RAM tier: they share the half."""
    if requested not in ("auto",) + TIERS:
        raise TierError(
            f"tier={requested!r} is not a tier; expected one of 'auto', {', '.join(repr(t) for t in TIERS)}."
        )
    r = resources
    ram_limit = ram_budget if ram_budget is not None else r.ram_available // 2 // max(local_ranks, 1)
    ram_note = (
        "ram_budget"
        if ram_budget is not None
        else "half of the available RAM"
        + (f" shared by {local_ranks} ranks on this node" if local_ranks > 1 else "")
    )
    lines = [f"RAM: {format_bytes(r.ram_available)} available; {ram_note}: {format_bytes(ram_limit)}"]
    vram_limit = None
    if cuda and r.vram_free is not None and r.vram_total is not None:
        planned = getattr(vram_headroom, "reserved_bytes", None)
        if planned is not None:
            # A trainmedic.plan Plan: the training step's own reserve, measured before any GPU
            # was touched (the CUDA context is already out of the free memory).
            headroom, source = (
                int(planned),
                f"the planned training step (trainmedic plan, batch {vram_headroom.batch_size})",
            )
        else:
            headroom = (
                int(vram_headroom * r.vram_total) if isinstance(vram_headroom, float) else int(vram_headroom)
            )
            source = "the model (vram_headroom)"
        vram_limit = max(0, r.vram_free - headroom)
        lines.append(
            f"VRAM: {format_bytes(r.vram_free)} free of {format_bytes(r.vram_total)}; "
            f"minus {format_bytes(headroom)} headroom for {source}: {format_bytes(vram_limit)}"
        )
    else:
        lines.append("VRAM: none (device is not CUDA)")
    if r.disk_free is not None:
        lines.append(f"disk: {format_bytes(r.disk_free)} free under {r.cache_root}")

    fits = {
        "vram": vram_limit is not None and nbytes <= vram_limit,
        "ram": nbytes <= ram_limit,
        "disk": r.disk_free is not None and nbytes <= r.disk_free * 0.9,
        "stream": random_access,
    }
    auto = next((t for t in TIERS if fits[t]), None)
    if requested == "auto":
        if auto is None:
            raise TierError(
                f"the data needs {format_bytes(nbytes)} decoded, which fits neither RAM ({format_bytes(ram_limit)}) "
                f"nor the disk cache ({format_bytes(r.disk_free or 0)} free under {r.cache_root}), and it cannot be "
                f"streamed (it is read front to back). Pass cache_dir= a folder with more space."
            )
        lines.append(
            f"rule: vram if it fits the VRAM budget, else ram if it fits {ram_note}, else disk if the cache fits, "
            f"else stream → {auto}"
        )
        return Decision(auto, lines)

    problem = _forced_problem(requested, nbytes, cuda, random_access, r, vram_limit, ram_budget)
    if problem:
        would = f"tier={auto!r} would fit" if auto else "no tier fits"
        raise TierError(f"tier={requested!r} does not fit: {problem}; {would} (or use tier='auto').")
    lines.append(f"tier={requested!r} was asked for (auto would pick {auto!r})")
    return Decision(requested, lines)


def _forced_problem(
    tier: str,
    nbytes: int,
    cuda: bool,
    random_access: bool,
    r: Resources,
    vram_limit: int | None,
    ram_budget: int | None,
) -> str:
    need = format_bytes(nbytes)
    if tier == "vram":
        if not cuda:
            return "the device is not CUDA, so there is no VRAM to hold the data; pass device='cuda'"
        if r.vram_free is not None and nbytes > r.vram_free:
            return f"the data needs {need} and the GPU has {format_bytes(r.vram_free)} free"
    if tier == "ram":
        limit = ram_budget if ram_budget is not None else r.ram_available
        if nbytes > limit:
            return f"the data needs {need} and {format_bytes(limit)} of RAM is available"
    if tier == "disk" and r.disk_free is not None and nbytes > r.disk_free:
        return f"the cache needs {need} and {r.cache_root} has {format_bytes(r.disk_free)} free"
    if tier == "stream" and not random_access:
        return "this source is read front to back (a query or a Dataset), so it cannot be streamed by row"
    return ""


def cgroup_headroom() -> int:
    """Bytes the cgroup (v2 or v1) still allows this process; effectively unlimited without one."""
    unlimited = 1 << 62
    for limit_path, usage_path in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit_text = Path(limit_path).read_text().strip()
            if limit_text == "max":
                return unlimited
            return max(0, int(limit_text) - int(Path(usage_path).read_text().strip()))
        except (OSError, ValueError):
            continue
    return unlimited
