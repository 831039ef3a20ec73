"""What a tuning run says: each configuration measured (or why not), its roofline, and the winner.

``TuneResult.to_dict()`` is the ``trainmedic.tune/1`` contract that ``trainmedic tune --json``
writes. Speeds are samples per second (a step of batch 4 does twice the work of a step of
batch 2, so step times alone would mislead); every median comes with its trials' spread.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from trainmedic._document import JsonDocument
from trainmedic.roofline.model import Ceilings, Roofline

SCHEMA = "trainmedic.tune/1"

#: Precisions a configuration may name: bf16 and fp16 mean autocast (fp16 with a GradScaler);
#: tf32 is fp32 storage with TF32 tensor-core matmuls (Ampere and later).
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: Memory formats: channels_last for 4-D (2-D conv) inputs, channels_last_3d for 5-D.
MEMORY_FORMATS = ("contiguous", "channels_last", "channels_last_3d")
#: What a configuration's row says happened to it.
STATUSES = ("measured", "skipped", "failed", "not_run")


@dataclass(frozen=True)
class Config:
    """One point of the grid: how a training step is run.

    A build target is tuned over the first four fields. A script (``--script``) is tuned over
    ``overrides``, its own options as ``(name, value)`` pairs; its ``batch_size`` is the batch its
    run really trained on (the model's input, as trainmedic saw it), None before the run or when
    it was not seen (speeds are then steps/s), never the value of an option.
    """

    batch_size: int | None
    precision: str = "fp32"
    compile: bool = False
    memory_format: str = "contiguous"
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if self.overrides:
            return " ".join(f"{name}={value}" for name, value in self.overrides)
        parts = [f"batch {self.batch_size}", self.precision]
        if self.compile:
            parts.append("compile")
        if self.memory_format != "contiguous":
            parts.append(self.memory_format)
        return " · ".join(parts)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        if self.overrides:  # a script's run: its own options are all there is to say
            return {"batch_size": self.batch_size, "overrides": dict(self.overrides)}
        return {
            "batch_size": self.batch_size,
            "precision": self.precision,
            "compile": self.compile,
            "memory_format": self.memory_format,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        batch = data.get("batch_size")
        return cls(
            None if batch is None else int(batch),
            str(data.get("precision", "fp32")),
            bool(data.get("compile", False)),
            str(data.get("memory_format", "contiguous")),
            tuple((str(k), str(v)) for k, v in (data.get("overrides") or {}).items()),
        )


@dataclass(frozen=True)
class Measurement:
    """Repeated timed trials of one configuration after its warm-up."""

    #: samples/s of each trial (steps/s for a script whose batch size is unknown) (each trial is ``steps_per_trial`` steps between device syncs).
    trials: tuple[float, ...]
    steps_per_trial: int
    #: The first step alone: torch.compile's compile time, cuDNN autotuning, lazy init.
    first_step_s: float
    #: Further untimed steps after the first, until the step time settled.
    warmup_steps: int = 0

    @property
    def samples_per_s(self) -> float:
        return statistics.median(self.trials)

    @property
    def low(self) -> float:
        return min(self.trials)

    @property
    def high(self) -> float:
        return max(self.trials)

    @property
    def spread(self) -> float:
        """Half the trials' range over the median: the noise this measurement carries.

        From five trials on, the fastest and the slowest are left out: one trial that a
        neighbour's burst of work slowed down says little about this configuration.
        """
        median = self.samples_per_s
        ordered = sorted(self.trials)
        if len(ordered) >= 5:
            ordered = ordered[1:-1]
        return (ordered[-1] - ordered[0]) / (2 * median) if median > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_per_s": self.samples_per_s,
            "low": self.low,
            "high": self.high,
            "spread": self.spread,
            "trials": list(self.trials),
            "steps_per_trial": self.steps_per_trial,
            "first_step_s": self.first_step_s,
            "warmup_steps": self.warmup_steps,
        }


@dataclass
class Row:
    """One configuration and what became of it."""

    config: Config
    status: str  # one of STATUSES
    measurement: Measurement | None = None
    roofline: Roofline | None = None
    #: Why it was skipped or failed: "the plan needs 9.1 GiB of 8 GiB usable", the error line.
    reason: str | None = None

    @property
    def samples_per_s(self) -> float | None:
        return self.measurement.samples_per_s if self.measurement else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "label": self.config.label,
            "status": self.status,
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "roofline": self.roofline.to_dict() if self.roofline else None,
            "reason": self.reason,
        }


@dataclass
class TuneResult(JsonDocument):
    """A tuning run: every row, the winner, the ties, the baseline and the why."""

    target: str
    device: str  # "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)"
    ceilings: Ceilings | None
    rows: list[Row] = field(default_factory=list)
    best: Config | None = None
    #: Configurations within the noise of ``best``: reported as a tie, not beaten.
    ties: list[Config] = field(default_factory=list)
    #: The configuration the gain is measured against (the user's, or fp32 eager at the largest
    #: batch that fits) and how it was chosen.
    baseline: Config | None = None
    baseline_source: str = ""
    #: One-line verdict plus the roofline reasoning, in order, as the console prints them.
    verdict: str = ""
    why: list[str] = field(default_factory=list)
    #: The exact change to make: code for a build target, flags for a script.
    change: str = ""
    budget_s: float | None = None
    elapsed_s: float = 0.0
    #: Why the search ended before the grid was done (Ctrl+C, the budget), as a sentence; None if it did not.
    stopped_early: str | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def row(self, config: Config | None) -> Row | None:
        return next((r for r in self.rows if r.config == config), None) if config is not None else None

    @property
    def measured(self) -> list[Row]:
        return [r for r in self.rows if r.status == "measured"]

    @property
    def unit(self) -> str:
        """What the speeds count: samples/s, or steps/s for a script whose runs did not show their batch
        (rows never measured have none to show and do not count)."""
        return "steps/s" if any(r.config.batch_size is None for r in self.measured) else "samples/s"

    @property
    def gain(self) -> float | None:
        """Best samples/s over the baseline's, when both were measured."""
        best, base = self.row(self.best), self.row(self.baseline)
        if best is None or base is None or not best.samples_per_s or not base.samples_per_s:
            return None
        return best.samples_per_s / base.samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "target": self.target,
            "device": self.device,
            "unit": self.unit,
            "ceilings": self.ceilings.to_dict() if self.ceilings else None,
            "rows": [r.to_dict() for r in self.rows],
            "best": self.best.to_dict() if self.best else None,
            "ties": [c.to_dict() for c in self.ties],
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "baseline_source": self.baseline_source,
            "gain": self.gain,
            "verdict": self.verdict,
            "why": list(self.why),
            "change": self.change,
            "budget_s": self.budget_s,
            "elapsed_s": self.elapsed_s,
            "stopped_early": self.stopped_early,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }
