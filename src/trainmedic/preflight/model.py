"""The preflight report: one result per experiment, and its JSON form (``trainmedic.preflight/1``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic._document import JsonDocument
from trainmedic.preflight.frames import Where

SCHEMA = "trainmedic.preflight/1"

#: Resume-check states that are a finding (exit code 1), and the verdict each gives; the other
#: states explain why the resume could not be judged.
RESUME_VERDICTS = {
    "not_restored": "resume_failed",
    "resume_failed": "resume_failed",
    "diverged": "resume_diverged",
}


@dataclass(frozen=True)
class ConfigIssue:
    """A config finding of config_analysis.analyse, as the report keeps it."""

    kind: str  # "missed_override" | "never_read"
    file: str
    key: str
    line: int | None
    message: str
    related: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": self.file,
            "key": self.key,
            "line": self.line,
            "message": self.message,
            "related": list(self.related),
        }


@dataclass
class ResumeCheck:
    """save -> SIGKILL -> resume, compared with the uninterrupted run save by save."""

    status: str  # identical | diverged | not_restored | resume_failed | nondeterministic | inconclusive
    message: str
    killed_after_step: int | None = None
    restored_step: int | None = None
    compared_steps: list[int] = field(default_factory=list)
    diverged_step: int | None = None
    objects: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    where: Where | None = None  # the user's line when the resumed run failed

    @property
    def failed(self) -> bool:
        return self.status in RESUME_VERDICTS

    def to_dict(self, root: Path) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "killed_after_step": self.killed_after_step,
            "restored_step": self.restored_step,
            "compared_steps": self.compared_steps,
            "diverged_step": self.diverged_step,
            "objects": self.objects,
            "skipped": [list(s) for s in self.skipped],
            "where": self.where.to_dict(root) if self.where else None,
        }


@dataclass
class PlanCheck:
    """``trainmedic plan`` of the experiment's build function on the target GPU."""

    spec: str
    device: str
    batch: int | None
    precision: str
    fits: bool | None = None
    peak_bytes: int | None = None
    needed_bytes: int | None = None
    capacity_bytes: int | None = None
    exact: bool = True
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SessionEstimate:
    """Full-run time from steps x step time, against the platform's session limit."""

    steps: int
    step_time: float | None
    #: "target": step_time measured on the GPU and declared; "cpu": the tiny run's own speed.
    speed_source: str | None
    total_seconds: float | None
    session_limit: float | None
    fits: bool | None = None
    sessions: int | None = None
    deadline: float | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ExperimentResult:
    name: str
    command: str
    budget: float
    status: str  # passed | failed | stuck
    seconds: float
    exit_code: int | None = None
    error: str | None = None
    where: Where | None = None
    stdout: str = ""
    stderr: str = ""
    configs: list[ConfigIssue] = field(default_factory=list)
    config_note: str | None = None
    uses_checkpointer: bool = False
    resume: ResumeCheck | None = None
    resume_note: str | None = None
    cpu_step_time: float | None = None
    #: optimizer.step() calls of the run (torch only): how far a stuck run got when its loop
    #: has no counter to read.
    optimizer_steps: int | None = None
    plan: PlanCheck | None = None
    session: SessionEstimate | None = None
    notes: list[str] = field(default_factory=list)
    #: Given with --command, not declared in pyproject.toml (Experiment.from_command_line).
    from_command_line: bool = False

    @property
    def verdict(self) -> str:
        if self.status != "passed":
            return self.status
        if self.resume is not None and self.resume.failed:
            return RESUME_VERDICTS[self.resume.status]
        if self.plan is not None and self.plan.fits is False:
            return "does_not_fit"
        return "passed"

    def to_dict(self, root: Path) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": self.command,
            "from_command_line": self.from_command_line,
            "verdict": self.verdict,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "budget_seconds": self.budget,
            "exit_code": self.exit_code,
            "error": self.error,
            "where": self.where.to_dict(root) if self.where else None,
            "configs": [c.to_dict() for c in self.configs],
            "config_note": self.config_note,
            "uses_checkpointer": self.uses_checkpointer,
            "resume": self.resume.to_dict(root) if self.resume else None,
            "resume_note": self.resume_note,
            "cpu_step_seconds": self.cpu_step_time,
            "optimizer_steps": self.optimizer_steps,
            "plan": self.plan.to_dict() if self.plan else None,
            "session": self.session.to_dict() if self.session else None,
            "notes": list(self.notes),
            "stdout_tail": _last_lines(self.stdout),
            "stderr_tail": _last_lines(self.stderr),
        }


@dataclass
class PreflightReport(JsonDocument):
    root: Path
    #: Where the declared experiments of this run came from; None when all were given with --command.
    pyproject: Path | None
    device: str | None
    session_limit: float | None
    resume_check: bool
    experiments: list[ExperimentResult]
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(e.verdict == "passed" for e in self.experiments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "project": str(self.root),
            "pyproject": str(self.pyproject) if self.pyproject else None,
            "device": self.device,
            "session_limit_seconds": self.session_limit,
            "resume_check": self.resume_check,
            "passed": self.passed,
            "experiments": [e.to_dict(self.root) for e in self.experiments],
            "notes": list(self.notes),
        }


def _last_lines(text: str, count: int = 40) -> str:
    return "\n".join(text.splitlines()[-count:])
