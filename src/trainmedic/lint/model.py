"""What the linter reports: a finding at a place, a file it could not read, and a rule's card."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmedic.lint.context import ModuleContext


@dataclass(frozen=True, order=True)
class Violation:
    """One finding. ``line`` and ``col`` are 1-based, as editors and other linters print them."""

    path: str
    line: int
    col: int
    code: str
    message: str

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "message": self.message,
        }

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"


@dataclass(frozen=True, order=True)
class FileProblem:
    """A file that could not be linted (syntax error, not Python, unreadable); the others still are."""

    path: str
    message: str
    #: True when the file was skipped on purpose (not Python): it does not make the run fail.
    skipped: bool = False
    #: True when the file was still checked, by all rules but one that failed on it.
    checked: bool = False

    def __str__(self) -> str:
        # "path:1:7: syntax error..." when the message starts with a place, so editors can jump.
        return f"{self.path}:{self.message}" if self.message[:1].isdigit() else f"{self.path}: {self.message}"


@dataclass
class LintResult:
    violations: list[Violation] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)
    files_checked: int = 0

    @property
    def failed(self) -> bool:
        """Findings, or a file that should have been checked and could not be."""
        return bool(self.violations) or any(not p.skipped for p in self.problems)


#: A rule's check yields (node, message): the node gives the line and column.
Check = Callable[["ModuleContext"], Iterable[tuple[ast.AST, str]]]


@dataclass(frozen=True)
class Rule:
    """A rule and its ``--explain`` card: what it finds, why it matters (with the measured cost
    where a seed measured one), the fix, and a before/after example."""

    code: str
    name: str
    summary: str
    why: str
    fix: str
    before: str
    after: str
    check: Check

    def explain(self) -> str:
        return "\n".join(
            [
                f"{self.code} {self.name}: {self.summary}",
                "",
                "Why it matters",
                _indent(self.why),
                "",
                "Fix",
                _indent(self.fix),
                "",
                "Before",
                _indent(self.before.strip("\n")),
                "",
                "After",
                _indent(self.after.strip("\n")),
            ]
        )


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line.strip() else "" for line in text.strip("\n").splitlines())
