"""A training step as CUDA's caching allocator recorded it: the ground truth a plan is held to.

``torch.cuda.memory._record_memory_history`` logs every block the allocator hands out and takes
back, with the Python stack that asked. ``gpu-alloc-trace/1`` keeps that compactly, one event a
row ``[action, size, block, frame]`` (``a`` alloc, ``f`` free, ``S``/``s`` segment alloc/free,
``O`` out of memory) with the stacks interned in ``frames`` and the run's measured peaks in
``result``. Recording starts after the build: ``result["before_step_bytes"]`` is what the
parameters and inputs already held.

Each alloc and free is given the step and the phase it ran in (forward, backward, optimizer),
read off its stack: the optimizer's own files, autograd's engine (whose thread has no Python
stack at all) or ``Tensor.backward``, else the forward. Phases only move forward within a step;
a new step starts at the first allocation the forward makes after a backward.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.errors import PlanError

SCHEMA = "gpu-alloc-trace/1"
PHASES = ("forward", "backward", "optimizer")
_ACTIONS = {"a": "alloc", "f": "free", "S": "segment_alloc", "s": "segment_free", "O": "oom"}
#: The allocator snapshot's names for the actions kept, as ``_record_memory_history`` writes them.
_SNAPSHOT_ACTIONS = {
    "alloc": "a",
    "free_requested": "f",
    "segment_alloc": "S",
    "segment_free": "s",
    "oom": "O",
}


@dataclass(frozen=True)
class Event:
    """One allocation or free of a step: the bytes asked for, and when and by whom."""

    kind: str  # "alloc" or "free"
    nbytes: int  # what the tensor asked for; the allocator's block is this rounded up
    block: int  # pairs a free with its alloc
    step: int  # 1, 2, ...
    phase: str  # one of PHASES
    where: str = ""  # the innermost frames, "file:line:function < ..."


@dataclass
class RecordedStep:
    """The allocations of a recorded run of training steps, with its measured peaks."""

    events: list[Event]
    result: dict[str, Any]
    #: Bytes of new segments (cudaMalloc) the steps asked for, in order.
    segments: list[int] = field(default_factory=list)
    out_of_memory: bool = False

    @property
    def before_step_bytes(self) -> int:
        return int(self.result.get("before_step_bytes", 0))

    @property
    def peak_bytes(self) -> int:
        """``torch.cuda.max_memory_allocated`` over the recorded steps."""
        return int(self.result["peak_bytes"])

    @property
    def reserved_bytes(self) -> int:
        """``torch.cuda.max_memory_reserved`` over the recorded steps."""
        return int(self.result["reserved_bytes"])

    @property
    def batch_size(self) -> int | None:
        return self.result.get("batch")

    @property
    def precision(self) -> str:
        return str(self.result.get("precision", "fp32"))

    def to_dict(self) -> dict[str, Any]:
        """The compact ``gpu-alloc-trace/1`` document (frames re-interned)."""
        frames: dict[str, int] = {}
        rows = []
        for event in self.events:
            rows.append(
                [
                    "a" if event.kind == "alloc" else "f",
                    event.nbytes,
                    event.block,
                    frames.setdefault(event.where, len(frames)),
                ]
            )
        return {
            "schema": SCHEMA,
            "result": dict(self.result),
            "frames": list(frames),
            "events": rows,
            "segments": list(self.segments),
        }


def load_recorded(path: str | Path) -> RecordedStep:
    """Read a ``gpu-alloc-trace/1`` file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise PlanError(
            f"recorded trace {path} does not exist; expected a gpu-alloc-trace/1 file written by `trainmedic plan --verify`."
        ) from None
    except (OSError, ValueError, EOFError) as exc:
        raise PlanError(
            f"recorded trace {path} cannot be read as JSON ({exc}); expected a gpu-alloc-trace/1 file."
        ) from exc
    return parse_recorded(document, str(path))


def parse_recorded(document: Any, source: str = "the trace") -> RecordedStep:
    """A ``RecordedStep`` from a ``gpu-alloc-trace/1`` document."""
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise PlanError(
            f"{source} is not a {SCHEMA} document (schema {found!r}); record one with `trainmedic plan --verify`."
        )
    try:
        frames = [str(f) for f in document["frames"]]
        rows = [(str(a), int(size), int(block), int(frame)) for a, size, block, frame in document["events"]]
        result = dict(document["result"])
        peaks = int(result["peak_bytes"]), int(result["reserved_bytes"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise PlanError(
            f"{source} has a malformed {SCHEMA} body ({type(exc).__name__}: {exc}); expected events, frames and result."
        ) from exc
    if min(peaks) <= 0:
        raise PlanError(
            f"{source} records no allocation (peak {peaks[0]} B, reserved {peaks[1]} B); record a training step."
        )
    events, segments, oom = [], [], False
    phases = _PhaseReader()
    for action, size, block, frame in rows:
        where = frames[frame] if 0 <= frame < len(frames) else ""
        if action == "S":
            segments.append(size)
        elif action == "O":
            oom = True
        elif action in ("a", "f"):
            kind = "alloc" if action == "a" else "free"
            step, phase = phases.read(kind, where)
            events.append(Event(kind, size, block, step, phase, where))
    return RecordedStep(events, result, segments, oom or bool(result.get("oom")))


def write_recorded(recorded: RecordedStep, path: str | Path) -> Path:
    """Write a recording as ``gpu-alloc-trace/1``, gzip'd when the name ends in ``.gz``."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        json.dump(recorded.to_dict(), handle)
    return path


def from_snapshot(snapshot: dict[str, Any], result: dict[str, Any], device_index: int = 0) -> RecordedStep:
    """A ``RecordedStep`` from ``torch.cuda.memory._snapshot()`` taken after the recorded steps."""
    frames: dict[str, int] = {}
    rows = []
    blocks: dict[int, int] = {}
    for entry in snapshot["device_traces"][device_index]:
        action = _SNAPSHOT_ACTIONS.get(entry["action"])
        if action is None:
            continue
        block = blocks.setdefault(entry["addr"], len(blocks)) if action in "af" else int(entry["addr"])
        key = " < ".join(
            f"{f['filename'].split('site-packages/')[-1]}:{f['line']}:{f['name']}"
            for f in entry.get("frames", [])[:6]
        )
        rows.append([action, int(entry["size"]), block, frames.setdefault(key, len(frames))])
    return parse_recorded(
        {"schema": SCHEMA, "result": result, "frames": list(frames), "events": rows}, "the recorded steps"
    )


class _PhaseReader:
    """Steps and phases from the stacks, in order: phases only move forward within a step."""

    def __init__(self) -> None:
        self.step = 0
        self.rank = -1

    def read(self, kind: str, where: str) -> tuple[int, str]:
        rank = PHASES.index(phase_of_frames(where))
        if self.step == 0 or (kind == "alloc" and rank == 0 and self.rank > 0):
            self.step, self.rank = self.step + 1, 0
        # A free the forward's code makes after backward (``del out, loss``) belongs to the backward.
        self.rank = max(self.rank, rank)
        return self.step, PHASES[self.rank]


def phase_of_frames(where: str) -> str:
    """The phase a stack shows: the optimizer's files, autograd's engine, else the forward."""
    if "torch/optim/" in where:
        return "optimizer"
    if not where or "torch/autograd/" in where or ":backward" in where:
        return "backward"
    return "forward"
