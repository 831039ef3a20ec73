"""A :class:`LintResult` as text: ``path:line:col`` lines, JSON, SARIF 2.1.0 for code-scanning
tools, or GitHub Actions workflow commands (annotations on a pull request's diff).

These return strings; the command line prints them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import quote

from trainmedic._version import __version__
from trainmedic.errors import LintError
from trainmedic.lint.model import Edit, FileProblem, LintResult, Rule, Violation
from trainmedic.lint.rules import all_rules

FORMATS = ("text", "json", "sarif", "github")

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: SARIF's name for the folder relative locations start from (GitHub's code scanning uses it too).
SRCROOT = "%SRCROOT%"

#: "path:1:7: syntax error..." → the place a file problem names, when it names one.
_PLACE = re.compile(r"(\d+):(\d+): (.*)", re.DOTALL)


def format_result(result: LintResult, output_format: str, **options) -> str:
    """``result`` in one of :data:`FORMATS`; ``options`` go to that format's function."""
    try:
        render: Callable[..., str] = _RENDERERS[output_format]
    except KeyError:
        raise LintError(
            f"unknown output format {output_format!r}; the formats are {', '.join(FORMATS)}"
        ) from None
    return render(result, **options)


def format_text(result: LintResult, *, show_unfixable: bool = False) -> str:
    """``path:line:col: CODE message``, one finding a line; with ``show_unfixable`` (after
    ``--fix``) a finding left unrepaired gets a second, indented line saying why."""
    lines = []
    for violation in result.violations:
        lines.append(str(violation))
        if show_unfixable and violation.unfixable:
            lines.append(f"  not fixed: {violation.unfixable}")
    return "\n".join(lines)


def format_json(result: LintResult) -> str:
    """The findings as a JSON list of ``{path, line, col, code, message}``, with ``fix`` (and
    ``unfixable``) where the repairs were computed."""
    return json.dumps([violation.to_dict() for violation in result.violations], indent=2)


def format_github(result: LintResult) -> str:
    """One ``::warning`` workflow command per finding, and ``::error`` per file that could not
    be checked, as GitHub Actions reads them from a step's output."""
    lines = [
        _workflow_command(
            "warning",
            {"file": _posix(v.path), "line": v.line, "col": v.col, "title": f"{v.code} {_rule_name(v.code)}"},
            v.message,
        )
        for v in result.violations
    ]
    for problem in result.problems:
        line, col, message = _problem_place(problem)
        command = "notice" if problem.skipped else "warning" if problem.checked else "error"
        properties: dict[str, object] = {"file": _posix(problem.path)}
        if line:
            properties.update(line=line, col=col)
        properties["title"] = "trainmedic lint"
        lines.append(_workflow_command(command, properties, message))
    return "\n".join(lines)


def format_sarif(
    result: LintResult, *, root: str | os.PathLike[str] | None = None, rules: Sequence[Rule] | None = None
) -> str:
    """A SARIF 2.1.0 log with one run: the rules (``rules``, every rule by default) with their
    cards, one result per finding (with its repair as a SARIF fix, where one was computed), and
    the files that could not be checked as the invocation's notifications. Paths are given
    relative to ``root`` (the working directory by default) under ``%SRCROOT%``."""
    base = Path(os.path.abspath(root if root is not None else os.getcwd()))
    rules = list(all_rules() if rules is None else rules)
    index = {rule.code: i for i, rule in enumerate(rules)}
    driver: dict[str, object] = {"name": "trainmedic", "version": __version__, "semanticVersion": __version__}
    information = _information_uri()
    if information:
        driver["informationUri"] = information
    driver["rules"] = [_sarif_rule(rule) for rule in rules]
    run = {
        "tool": {"driver": driver},
        "invocations": [_sarif_invocation(result, base)],
        # Where %SRCROOT% is, so a viewer can open the files; a folder's URI ends with "/".
        "originalUriBaseIds": {SRCROOT: {"uri": _folder_uri(base)}},
        # Our columns count characters; SARIF's default is UTF-16 code units.
        "columnKind": "unicodeCodePoints",
        "results": [_sarif_result(v, index, base) for v in result.violations],
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2)


_RENDERERS: dict[str, Callable[..., str]] = {
    "text": format_text,
    "json": format_json,
    "sarif": format_sarif,
    "github": format_github,
}


def _sarif_rule(rule: Rule) -> dict:
    example = (
        f"Before:\n\n```python\n{rule.before.strip()}\n```\n\nAfter:\n\n```python\n{rule.after.strip()}\n```"
    )
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": _unwrap(rule.why)},
        "help": {"text": _unwrap(rule.fix), "markdown": f"{_unwrap(rule.fix)}\n\n{example}"},
        "defaultConfiguration": {"level": "warning"},
    }


def _sarif_result(violation: Violation, index: dict[str, int], base: Path) -> dict:
    location = _artifact(violation.path, base)
    found: dict[str, object] = {"ruleId": violation.code}
    if violation.code in index:
        found["ruleIndex"] = index[violation.code]
    found |= {
        "level": "warning",
        "message": {"text": violation.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": {"startLine": violation.line, "startColumn": violation.col},
                }
            }
        ],
    }
    if violation.fix is not None:
        found["fixes"] = [
            {
                "description": {"text": violation.fix.description},
                "artifactChanges": [
                    {
                        "artifactLocation": location,
                        "replacements": [_replacement(e) for e in violation.fix.edits],
                    }
                ],
            }
        ]
    return found


def _replacement(edit: Edit) -> dict:
    # SARIF's regions end where ours do (endColumn is the column after the last character), and
    # an empty region is an insertion point, as our insertions are.
    return {
        "deletedRegion": {
            "startLine": edit.line,
            "startColumn": edit.col,
            "endLine": edit.end_line,
            "endColumn": edit.end_col,
        },
        "insertedContent": {"text": edit.text},
    }


def _sarif_invocation(result: LintResult, base: Path) -> dict:
    notifications = []
    for problem in result.problems:
        line, col, message = _problem_place(problem)
        physical: dict[str, object] = {"artifactLocation": _artifact(problem.path, base)}
        if line:
            physical["region"] = {"startLine": line, "startColumn": col}
        notifications.append(
            {
                "level": "note" if problem.skipped else "warning" if problem.checked else "error",
                "message": {"text": message},
                "locations": [{"physicalLocation": physical}],
            }
        )
    invocation: dict[str, object] = {
        # A file that could not be checked (or a rule that failed on one) is a run that did not
        # do all it was asked; a non-Python file skipped on purpose is not.
        "executionSuccessful": not any(not problem.skipped for problem in result.problems)
    }
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return invocation


def _artifact(path: str, base: Path) -> dict:
    """A file as a URI relative to ``%SRCROOT%``, or an absolute ``file:`` URI when it lies
    outside the root."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(base)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(relative.as_posix()), "uriBaseId": SRCROOT}


def _folder_uri(folder: Path) -> str:
    uri = folder.as_uri()
    return uri if uri.endswith("/") else uri + "/"


def _information_uri() -> str | None:
    """The project's home page, as the installed package's metadata gives it (none is set yet)."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        meta = metadata("trainmedic")
    except PackageNotFoundError:
        return None
    urls = [entry.split(",", 1)[-1].strip() for entry in meta.get_all("Project-URL") or []]
    # Not meta.get(): the metadata's protocol has no get() before Python 3.12.
    home = meta["Home-page"] if "Home-page" in meta else None
    return home or (urls[0] if urls else None)


def _workflow_command(command: str, properties: dict[str, object], message: str) -> str:
    values = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties.items())
    return f"::{command} {values}::{_escape_data(message)}"


def _escape_data(text: str) -> str:
    # GitHub's own toolkit (actions/toolkit, command.ts) escapes these in a command's message.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    # ... and these as well in a property, where ':' and ',' would end the value.
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _problem_place(problem: FileProblem) -> tuple[int, int, str]:
    """(line, column, message) of a file problem; line 0 when it names no place."""
    match = _PLACE.fullmatch(problem.message)
    if match is None:
        return 0, 0, problem.message
    return int(match.group(1)), int(match.group(2)), match.group(3)


def _posix(path: str) -> str:
    return path.replace(os.sep, "/")


def _rule_name(code: str) -> str:
    return next((rule.name for rule in all_rules() if rule.code == code), "")


def _unwrap(text: str) -> str:
    """A rule card's hard-wrapped paragraphs as flowing text (SARIF viewers wrap it themselves)."""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)
