"""The Report: what ``trainmedic run`` and ``trainmedic.watch()`` conclude about a training job.

The JSON form (schema ``trainmedic.report/1``) is a contract other tools read: the keys named in
the schema never change meaning. Keys may be added (``timeline``, ``lines``, ``notes``, a
finding's ``suggestion`` ...); a change to an existing key bumps the schema version.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from trainmedic._document import JsonDocument
from trainmedic.categories import CATEGORIES

SCHEMA = "trainmedic.report/1"

#: How a run ended; the CLI's exit code follows the script's own.
#: ``trainmedic attach``: ``attached`` (the job ran on after the window), ``ended`` (it ended during it).
OUTCOMES = ("completed", "exit", "exception", "interrupted", "step_limit", "attached", "ended")
#: What a report's verdict rests on: the steps the run marked itself (optimizer, loader, Keras,
#: ``trainmedic.step()``), the iterations of the loop it repeats when it marked none, the whole
#: run when no loop could be found either (no bottleneck is named), or nothing at all: the script
#: failed or was stopped before its first step (no bottleneck, no findings).
#: ``sampled``: stacks read from outside a running process (``trainmedic attach``): steps found in
#: the order of the samples, no hooks, no op census.
EVIDENCE = ("steps", "loop", "sampled", "whole run", "none")


@dataclass(frozen=True, kw_only=True)
class MeasuredGain:
    """What a finding's fix bought when the run tried it: a few more steps with the fix on and
    off, alternated (the confirmation, probe/confirm.py). ``gain`` is the as-is median step over
    the fixed one; ``low``/``high`` the range of the gains of its block pairs."""

    gain: float
    low: float
    high: float
    #: What the fixed arm changed, in words: "batches replayed from memory".
    change: str
    as_is_steps: int
    fixed_steps: int
    as_is_median_s: float
    fixed_median_s: float
    #: The estimate from the sampled share, which ``expected_speedup`` held before.
    estimated: float


@dataclass(frozen=True)
class Finding:
    """One reason the job is slower than it could be, with the fix and what it buys."""

    category: str
    share: float
    title: str
    evidence: str
    where: str | None
    fix: str
    expected_speedup: float
    #: Amdahl's limit ``1 / (1 - share)``: the speedup if this cost went to zero; ``None`` in
    #: JSON when unbounded (a share of 1).
    ceiling: float | None
    #: The finer kind of cost inside the category, e.g. ``hdf5`` or ``database`` for ``data``.
    kind: str = ""
    #: Code that applies the fix, ready to paste: for data-bound findings, the exact
    #: ``data.load(...)`` call for the script's own source. ``None`` when there is none.
    suggestion: str | None = None
    #: The fix tried in the run and timed (JSON ``measured``); ``None``: ``expected_speedup`` is
    #: an estimate from the sampled share, and the report says so.
    measured: MeasuredGain | None = None

    @property
    def gain(self) -> float:
        """What the fix buys: measured where the run tried it, else the estimate."""
        return self.measured.gain if self.measured is not None else self.expected_speedup


@dataclass(frozen=True)
class StepStats:
    """Steady-state step times (warm-up steps excluded)."""

    count: int
    median_s: float
    p90_s: float
    #: Median of the last quarter of steady-state steps over the median of the first quarter.
    growth: float
    warmup: int = 0
    #: What marked step boundaries: ``optimizer``, ``loader``, ``marker`` or ``None``.
    source: str | None = None
    #: The same ratio for the process's CPU time per step: the work a step does, which a busy
    #: neighbour does not stretch. ``None`` on CUDA, where the host mostly waits on the device.
    cpu_growth: float | None = None
    #: With ``source`` "loop": the loop whose iterations were counted as the steps (``gen.py:20``).
    loop: str | None = None


@dataclass(frozen=True)
class DeviceInfo:
    kind: str
    name: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TimelinePoint:
    """One (possibly decimated) steady-state step: its duration and category seconds."""

    step: int
    seconds: float
    categories: dict[str, float]


@dataclass(frozen=True)
class LineCost:
    """Time spent at one user source line, per steady-state step."""

    where: str
    category: str
    kind: str
    seconds_per_step: float
    share: float


@dataclass(frozen=True)
class RankSummary:
    """One torchrun rank of a multi-process job: its steps and where its step time went."""

    rank: int
    host: str
    pid: int
    #: An OUTCOMES value; ``died`` when the rank ended without writing its report, ``running``
    #: when it still ran as the reports were merged (blocked for a rank that failed).
    outcome: str
    exit_code: int | None
    message: str | None
    steps: int
    median_s: float
    p90_s: float
    #: Per steady-state step, in seconds: obtaining the batch, waiting in collectives for the
    #: other ranks (DDP all-reduce, dist.* calls), the rest of the model's work, everything else.
    data_s: float
    wait_s: float
    compute_s: float
    other_s: float
    bottleneck: str | None


@dataclass(frozen=True)
class Straggler:
    """The rank the others wait for, and what makes it slower."""

    rank: int
    #: The category whose time the straggler exceeds the other ranks in: ``data``, ``compute``, ...
    cause: str
    #: Seconds per step the straggler spends more on ``cause`` than the median other rank.
    excess_s: float
    #: Seconds per step the other ranks wait in collectives (their median).
    others_wait_s: float
    #: The straggler's own line that costs it the most time in ``cause``, if one of the user's.
    where: str | None
    text: str


@dataclass
class Report(JsonDocument):
    ALLOW_NAN = False  # the schema promises finite numbers (to_dict writes an unbounded ceiling as null)
    command: list[str]
    exit_code: int
    outcome: str
    device: DeviceInfo
    steps: StepStats
    breakdown: dict[str, float]
    #: None when the evidence cannot carry a verdict (see ``EVIDENCE``).
    bottleneck: str | None
    findings: list[Finding]
    wall_s: float = 0.0
    setup_s: float = 0.0
    message: str | None = None
    timeline: list[TimelinePoint] = field(default_factory=list)
    lines: list[LineCost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    version: str = ""
    #: torchrun jobs: one row per rank, and the straggler when one rank holds the others back.
    ranks: list[RankSummary] = field(default_factory=list)
    straggler: Straggler | None = None
    evidence: str = "steps"
    #: The first two findings' categories when noise could swap them (diagnose/margin.py): the
    #: report calls the lead too close to call, and ``bottleneck`` is only the first of the two.
    close_call: list[str] = field(default_factory=list)

    @property
    def per_step(self) -> bool:
        """True when times are per step (or loop iteration); else they are whole-run seconds."""
        return self.evidence in ("steps", "loop", "sampled")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": self.version,
            "command": list(self.command),
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "message": self.message,
            "device": {**self.device.details, "kind": self.device.kind, "name": self.device.name},
            "steps": _finite(asdict(self.steps)),
            "breakdown": {c: round(_finite_float(self.breakdown.get(c, 0.0)), 6) for c in CATEGORIES},
            "bottleneck": self.bottleneck,
            "close_call": list(self.close_call),
            "evidence": self.evidence,
            "findings": [_finite(asdict(f)) for f in self.findings],
            "wall_s": _finite_float(self.wall_s),
            "setup_s": _finite_float(self.setup_s),
            "timeline": [asdict(p) for p in self.timeline],
            "lines": [asdict(line) for line in self.lines],
            "notes": list(self.notes),
            "ranks": [_finite(asdict(r)) for r in self.ranks],
            "straggler": _finite(asdict(self.straggler)) if self.straggler is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}; expected {SCHEMA!r}")
        device = dict(data["device"])
        return cls(
            command=list(data["command"]),
            exit_code=int(data["exit_code"]),
            outcome=data.get("outcome", "completed"),
            message=data.get("message"),
            device=DeviceInfo(device.pop("kind"), device.pop("name"), device),
            steps=_known(StepStats, data["steps"]),
            breakdown=dict(data["breakdown"]),
            bottleneck=data["bottleneck"],
            findings=[_finding(f) for f in data["findings"]],
            wall_s=data.get("wall_s", 0.0),
            setup_s=data.get("setup_s", 0.0),
            timeline=[_known(TimelinePoint, p) for p in data.get("timeline", [])],
            lines=[_known(LineCost, line) for line in data.get("lines", [])],
            notes=list(data.get("notes", [])),
            version=data.get("version", ""),
            ranks=[_known(RankSummary, r) for r in data.get("ranks", [])],
            straggler=_known(Straggler, data["straggler"]) if data.get("straggler") else None,
            evidence=data.get("evidence", "steps"),
            close_call=list(data.get("close_call") or []),
        )


def _finding(row: dict[str, Any]) -> Finding:
    measured = row.get("measured")
    return _known(Finding, {**row, "measured": _known(MeasuredGain, measured) if measured else None})


def _known(cls: type, row: dict[str, Any]) -> Any:
    # Readers of /1 ignore keys added later, as the schema promises.
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in row.items() if k in names})


def _finite_float(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    # JSON has no infinity; an unbounded ceiling (share of 1.0) is written as null.
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
