"""What the linter reports: a finding at a place (with its repair, where one is mechanical), a
file it could not read, and a rule's card."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmedic.lint.context import ModuleContext


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the text from (``line``, ``col``) up to (``end_line``, ``end_col``) with ``text``.

    Lines and columns are 1-based and count characters, as :class:`Violation`'s do; an insertion
    has its end equal to its start. The end is exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str

    def to_dict(self) -> dict:
        return {
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "text": self.text,
        }


@dataclass(frozen=True)
class Fix:
    """A finding's mechanical repair: what it does, in one line, and the edits that do it."""

    description: str
    edits: tuple[Edit, ...]

    def to_dict(self) -> dict:
        return {"description": self.description, "edits": [edit.to_dict() for edit in self.edits]}


@dataclass(frozen=True, order=True)
class Violation:
    """One finding. ``line`` and ``col`` are 1-based, as editors and other linters print them.

    ``fix`` is its repair and ``unfixable`` why there is none; both are filled only when the
    caller asked for fixes (``lint_paths(..., with_fixes=True)``)."""

    path: str
    line: int
    col: int
    code: str
    message: str
    fix: Fix | None = field(default=None, compare=False)
    unfixable: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        found = {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "message": self.message,
        }
        if self.fix is not None:
            found["fix"] = self.fix.to_dict()
        elif self.unfixable is not None:
            found["fix"] = None
            found["unfixable"] = self.unfixable
        return found

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
#: A rule's fixer gets a node its check reported and returns the repair, or a sentence saying
#: why this finding cannot be repaired mechanically (the data flow is not provable, ...).
Fixer = Callable[["ModuleContext", ast.AST], "Fix | str"]


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
    fixer: Fixer | None = None
    #: For a rule without a fixer: why its repair is not mechanical (said for each finding).
    not_fixable: str = ""

    @property
    def automatic_fix(self) -> str:
        """One sentence for the card: whether ``--fix`` repairs this rule's findings, or why not."""
        if self.fixer is not None:
            return "Yes, where the repair is mechanical: `trainmedic lint --fix` (`--diff` shows it first)."
        return f"No: {self.not_fixable or 'this rule has no automatic fix'}."

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
                "Automatic fix",
                _indent(self.automatic_fix),
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
