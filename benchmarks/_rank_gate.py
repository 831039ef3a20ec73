"""Start N real rank processes of one benchmark arm and release them at the same instant.

The parent starts every rank (RANK/WORLD_SIZE set as torchrun sets them, one thread each), waits
until each has imported what it needs and written ``ready-<rank>``, then writes the ``go`` file
(renamed into place) with the wall time; each rank times from there and leaves its result as
``result-<rank>.json`` in the gate folder.

    ranks = run_ranks(lambda rank: [sys.executable, script, "--worker", ...], gate, world=2, label=arm)
    go = wait_for_go(gate, rank)            # in the rank: after its imports
    write_rank_result(gate, rank, {...})
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_ranks(argv: Callable[[int], list[str]], gate: Path, world: int, label: str) -> list[dict[str, Any]]:
    """Run ``world`` ranks released together; their results in rank order (SystemExit if one fails)."""
    gate.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(argv(rank), env=env))
    while not all((gate / f"ready-{r}").exists() for r in range(world)):
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a rank exited before it was ready ({label})")
        time.sleep(0.005)  # polling interval of the start gate
    (gate / "go.tmp").write_text(repr(time.time()))
    os.rename(gate / "go.tmp", gate / "go")
    codes = [p.wait(timeout=3600) for p in procs]
    if any(codes):
        raise SystemExit(f"{label}: ranks exited with {codes}")
    return [json.loads((gate / f"result-{r}.json").read_text()) for r in range(world)]


def wait_for_go(gate: Path, rank: int) -> float:
    """In a rank: say it is ready, wait for the go, return the wall time the go was given."""
    (gate / f"ready-{rank}").write_text("")
    while not (gate / "go").exists():
        time.sleep(0.001)  # polling interval of the start gate
    return float((gate / "go").read_text())


def write_rank_result(gate: Path, rank: int, result: dict[str, Any]) -> None:
    (gate / f"result-{rank}.json").write_text(json.dumps(result))
