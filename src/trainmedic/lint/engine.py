"""Parse a file once, run the selected rules over it, drop what ``# noqa`` silences."""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Iterable
from dataclasses import replace

from trainmedic.lint.config import LintConfig
from trainmedic.lint.context import ModuleContext
from trainmedic.lint.files import discover
from trainmedic.lint.model import FileProblem, LintResult, Rule, Violation
from trainmedic.lint.noqa import is_silenced
from trainmedic.lint.rules import select_rules


def lint_paths(
    paths: Iterable[str],
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    *,
    with_fixes: bool = False,
    config: LintConfig | None = None,
) -> LintResult:
    """Lint every Python file under ``paths``. A file that cannot be parsed is reported in
    ``problems`` and the others are still linted; a path that does not exist or an unknown rule
    code raises :class:`~trainmedic.errors.LintError`. ``with_fixes`` fills each finding's
    ``fix`` (or ``unfixable``). ``config`` (a project's ``[tool.trainmedic.lint]``) adds its
    selection, per-file ignores and excludes; ``select``/``ignore`` override its selection as
    :meth:`LintConfig.overridden` says."""
    config = (config or LintConfig()).overridden(select, ignore)
    rules_for = config.rule_picker()
    files, problems = discover(list(paths), config)
    result = LintResult(problems=problems)
    for path in files:
        rules = rules_for(path)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            result.problems.append(FileProblem(path, f"cannot be read: {exc.strerror or exc}"))
            continue
        violations, problems = lint_bytes(data, path, rules, with_fixes=with_fixes)
        result.violations.extend(violations)
        result.problems.extend(problems)
        if all(p.checked for p in problems):
            result.files_checked += 1
    result.violations.sort()
    result.problems.sort()
    return result


def lint_source(
    source: str, path: str = "<string>", rules: list[Rule] | None = None, *, with_fixes: bool = False
) -> list[Violation]:
    """Lint Python source text; raises SyntaxError when it does not parse."""
    tree = _parse(source, path)
    violations, _ = _run(
        ModuleContext(tree, source, path),
        select_rules(None, None) if rules is None else rules,
        strict=True,
        with_fixes=with_fixes,
    )
    return violations


def lint_bytes(
    data: bytes, path: str, rules: list[Rule], *, with_fixes: bool = False
) -> tuple[list[Violation], list[FileProblem]]:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        return [], [FileProblem(path, f"cannot be decoded as Python source ({exc}); {_NOT_CHECKED}")]
    return lint_text(source, path, rules, with_fixes=with_fixes)


def lint_text(
    source: str, path: str, rules: list[Rule], *, with_fixes: bool = False
) -> tuple[list[Violation], list[FileProblem]]:
    """Lint decoded source text; a file that does not parse is a problem, not an exception."""
    try:
        tree = _parse(source, path)
    except SyntaxError as exc:
        where = f"{exc.lineno or 1}:{exc.offset or 1}"
        return [], [FileProblem(path, f"{where}: syntax error: {exc.msg}; {_NOT_CHECKED}")]
    except ValueError as exc:  # source with NUL bytes
        return [], [FileProblem(path, f"not Python source ({exc}); {_NOT_CHECKED}")]
    except (RecursionError, MemoryError):
        return [], [
            FileProblem(path, f"an expression is nested too deeply for Python's parser; {_NOT_CHECKED}")
        ]
    return _run(ModuleContext(tree, source, path), rules, with_fixes=with_fixes)


_NOT_CHECKED = "the file was not checked"


def _parse(source: str, path: str) -> ast.Module:
    # The code is read, not run: its SyntaxWarnings (invalid escapes...) are not ours to print.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, filename=path)


def _run(
    context: ModuleContext, rules: list[Rule], strict: bool = False, with_fixes: bool = False
) -> tuple[list[Violation], list[FileProblem]]:
    found: dict[tuple[int, int, str], Violation] = {}
    problems: list[FileProblem] = []
    comments: dict[int, str] | None = None
    for rule in rules:
        try:
            reported = list(rule.check(context))
        except Exception as exc:  # a rule's bug must not hide the other rules' findings
            if strict:
                raise
            problems.append(
                FileProblem(
                    context.path,
                    f"{rule.code} failed on this file ({type(exc).__name__}: {exc}); "
                    "the other rules still ran. Please report it with the file.",
                    checked=True,
                )
            )
            continue
        for node, message in reported:
            line = getattr(node, "lineno", 1)
            text = context.lines[line - 1] if 0 < line <= len(context.lines) else ""
            # ast counts UTF-8 bytes; editors count characters.
            col = len(text.encode("utf-8")[: getattr(node, "col_offset", 0)].decode("utf-8", "replace")) + 1
            if "noqa" in text.lower():
                # Only a real comment counts, not the word inside a string: tokenize, once per file.
                comments = _comments(context.source) if comments is None else comments
                if is_silenced(comments.get(line, ""), rule.code):
                    continue
            # One finding per rule and place, however many ways a rule reached it.
            if (line, col, rule.code) in found:
                continue
            violation = Violation(context.path, line, col, rule.code, message)
            if with_fixes:
                violation = _with_fix(violation, rule, context, node, strict)
            found[line, col, rule.code] = violation
    return sorted(found.values()), problems


def _with_fix(
    violation: Violation, rule: Rule, context: ModuleContext, node: ast.AST, strict: bool
) -> Violation:
    if rule.fixer is None:
        return replace(violation, unfixable=rule.not_fixable or "this rule has no automatic fix")
    try:
        repair = rule.fixer(context, node)
    except Exception as exc:  # a fixer's bug leaves the finding standing, said as such
        if strict:
            raise
        return replace(
            violation,
            unfixable=f"the fixer failed on this code ({type(exc).__name__}: {exc}); please report it with the file",
        )
    if isinstance(repair, str):
        return replace(violation, unfixable=repair)
    return replace(violation, fix=repair)


def _comments(source: str) -> dict[int, str]:
    lines: dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                lines[token.start[0]] = token.string
    except (tokenize.TokenError, SyntaxError):  # the file parsed; tokenize is only stricter at EOF
        pass
    return lines
