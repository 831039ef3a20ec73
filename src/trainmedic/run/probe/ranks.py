"""Which torchrun rank this process is, and the per-rank parts one merged report is made from.

Every rank of a ``torchrun`` job runs ``trainmedic run`` on its own and writes a part: a stub when
it starts (its host and pid) and its whole report when it ends. Files, not a collective: a rank
that died, or one that is stuck, must not keep the others' reports from being merged. The parts
folder is ``$TRAINMEDIC_RANKS_DIR`` (``trainmedic run --nproc`` sets it), else one per torchrun
job in the temp folder (keyed by torchrun's run id and its agent process, the parent of every
rank on a node) — on several nodes, point the variable at a folder they share. Parts of another
run id in the folder are never read.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainmedic._os import HOST, pid_alive, read_json, write_text_atomically

FORMAT = "trainmedic.rank/1"
PARTS_ENV = "TRAINMEDIC_RANKS_DIR"
RUNNING = "running"
DONE = "done"


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    world_size: int
    host: str
    pid: int
    #: torchrun's run id: names the parts folder shared by the job's ranks.
    run_id: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankIdentity | None:
        """The identity torchrun gave this process, or None outside a multi-process job.

        One process alone is a rank only when ``trainmedic run --nproc 1`` asked for the merged
        report (it sets the parts folder)."""
        env = os.environ if env is None else env
        try:
            rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        except (KeyError, ValueError):
            return None
        if world < 1 or not 0 <= rank < world or (world == 1 and PARTS_ENV not in env):
            return None
        local = env.get("LOCAL_RANK", "")
        run_id = (
            env.get("TORCHELASTIC_RUN_ID")
            or f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
        )
        restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
        if restart not in ("", "0"):  # torchrun --max-restarts: each attempt its own report
            run_id = f"{run_id}-restart{restart}"
        return cls(rank, int(local) if local.isdigit() else rank, world, HOST, os.getpid(), run_id)


def parts_dir(identity: RankIdentity, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    given = env.get(PARTS_ENV)
    name = f"trainmedic-ranks-{_safe(identity.run_id)}-{os.getppid()}"
    folder = Path(given) if given else Path(tempfile.gettempdir()) / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def part_path(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank:05d}.json"


def write_part(
    folder: Path, identity: RankIdentity, state: str, payload: dict[str, Any] | None = None
) -> Path:
    """Write this rank's part atomically: readers see the old part or the new one, never half."""
    body = {"format": FORMAT, "state": state, "identity": asdict(identity), **(payload or {})}
    return write_text_atomically(part_path(folder, identity.rank), json.dumps(body, allow_nan=False) + "\n")


def read_parts(folder: Path, world_size: int, run_id: str | None = None) -> dict[int, dict[str, Any]]:
    """The readable parts of ranks 0..world_size-1 of run ``run_id`` (others are left out)."""
    parts = {}
    for rank in range(world_size):
        part = read_json(part_path(folder, rank))
        if part is None or part.get("format") != FORMAT:
            continue
        if run_id is not None and part.get("identity", {}).get("run_id") != run_id:
            continue  # left by an earlier job in a reused folder
        parts[rank] = part
    return parts


def wait_for_parts(
    folder: Path,
    world_size: int,
    timeout_s: float,
    *,
    run_id: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> dict[int, dict[str, Any]]:
    """Read every rank's part once each is final, its writer is gone, or ``timeout_s`` passed.

    A rank still ``running`` whose process is gone from this host will never finish its part;
    the merge names it as dead. Ranks on other hosts are waited for until the timeout."""
    deadline = clock() + timeout_s
    while True:
        parts = read_parts(folder, world_size, run_id)
        if all(_settled(parts.get(rank)) for rank in range(world_size)) or clock() >= deadline:
            return parts
        pause(0.05)


def _settled(part: dict[str, Any] | None) -> bool:
    if part is None:
        return False
    if part.get("state") == DONE:
        return True
    who = part.get("identity", {})
    return who.get("host") == HOST and isinstance(who.get("pid"), int) and not pid_alive(who["pid"])


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80] or "job"
