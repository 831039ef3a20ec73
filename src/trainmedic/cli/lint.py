"""``trainmedic lint``: render a LintResult as ``path:line:col: CODE message`` lines or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable

from rich.console import Console

from trainmedic.errors import LintError
from trainmedic.lint import LintResult, all_rules, get_rule, lint_paths

#: Exit codes, as flake8 and ruff use them: findings are 1, a usage error is 2.
CLEAN, FINDINGS, USAGE = 0, 1, 2


def run_lint(
    paths: list[str],
    *,
    as_json: bool,
    select: str | None,
    ignore: str | None,
    out: Callable[[str], None],
    err: Console,
) -> int:
    try:
        result = lint_paths(paths or ["."], _codes(select), _codes(ignore) or None)
    except LintError as exc:
        err.print(f"trainmedic lint: error: {exc}", style="red", markup=False, soft_wrap=True)
        return USAGE
    if as_json:
        out(json.dumps([v.to_dict() for v in result.violations], indent=2))
    else:
        for violation in result.violations:
            out(str(violation))
    for problem in result.problems:
        err.print(
            str(problem),
            style=None if problem.skipped else "red",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if not as_json:
        err.print(_summary(result), markup=False, highlight=False, soft_wrap=True)
    return FINDINGS if result.failed else CLEAN


def explain(code: str, out: Callable[[str], None], err: Console) -> int:
    try:
        out(get_rule(code).explain())
    except LintError as exc:
        err.print(f"trainmedic lint: error: {exc}", style="red", markup=False, soft_wrap=True)
        return USAGE
    return CLEAN


def list_rules(out: Callable[[str], None]) -> int:
    for rule in all_rules():
        out(f"{rule.code}  {rule.name:<28} {rule.summary.rstrip('.')}")
    return CLEAN


def _codes(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [code for code in text.replace(" ", ",").split(",") if code]


def _summary(result: LintResult) -> str:
    files = f"{result.files_checked} file{'s' if result.files_checked != 1 else ''} checked"
    broken = sum(1 for p in result.problems if not p.skipped and not p.checked)
    tail = f"; {broken} could not be checked" if broken else ""
    if not result.violations:
        return f"No findings ({files}{tail})."
    count = len(result.violations)
    with_findings = len({v.path for v in result.violations})
    return (
        f"Found {count} finding{'s' if count != 1 else ''} in {with_findings} file{'s' if with_findings != 1 else ''} "
        f"({files}{tail}). `trainmedic lint --explain CODE` says why and how to fix."
    )
