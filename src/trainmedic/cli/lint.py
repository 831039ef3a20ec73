"""``trainmedic lint``: find the project's settings, lint (or repair), render in the asked format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rich.console import Console

from trainmedic.errors import LintError
from trainmedic.lint import LintConfig, LintResult, all_rules, find_config, get_rule, lint_paths, load_config
from trainmedic.lint.autofix import FixResult, fix_paths
from trainmedic.lint.formats import format_result

#: Exit codes, as flake8 and ruff use them: findings are 1, a usage error is 2.
CLEAN, FINDINGS, USAGE = 0, 1, 2


@dataclass(frozen=True, kw_only=True)
class LintOptions:
    """What ``trainmedic lint`` was asked to do (the command line's options, as given)."""

    output_format: str | None = None
    as_json: bool = False
    select: str | None = None
    ignore: str | None = None
    fix: bool = False
    diff: bool = False
    config: str | None = None
    isolated: bool = False
    force_exclude: bool = False


def run_lint(paths: list[str], options: LintOptions, *, out: Callable[[str], None], err: Console) -> int:
    paths = paths or ["."]
    try:
        output_format = _output_format(options)
        config = _config(paths, options)
        select, ignore = _codes(options.select), _codes(options.ignore) or None
        if options.diff:  # --fix --diff is --diff, as in ruff: show, change nothing
            return _show_diff(fix_paths(paths, select, ignore, write=False, config=config), out, err)
        if options.fix:
            fixed = fix_paths(paths, select, ignore, config=config)
            result = fixed.remaining
        else:
            # SARIF carries each finding's repair; the other formats keep their contract (no repairs).
            fixed = None
            result = lint_paths(paths, select, ignore, config=config, with_fixes=output_format == "sarif")
        rendered = format_result(result, output_format, **_format_options(output_format, options.fix))
    except LintError as exc:
        _error(err, exc)
        return USAGE
    if rendered:
        out(rendered)
    if output_format != "github":  # github puts the file problems in its annotations
        _print_problems(result, err)
    if fixed is not None:
        _note(err, _fix_summary(fixed))
    elif output_format in ("text", "github"):
        _note(err, _summary(result))
    return FINDINGS if result.failed else CLEAN


def explain(code: str, out: Callable[[str], None], err: Console) -> int:
    try:
        out(get_rule(code).explain())
    except LintError as exc:
        _error(err, exc)
        return USAGE
    return CLEAN


def list_rules(out: Callable[[str], None]) -> int:
    # "fix" marks the rules `--fix` repairs (where the repair is mechanical), as ruff's list does.
    for rule in all_rules():
        fixes = "fix" if rule.fixer else "   "
        out(f"{rule.code}  {rule.name:<28} {fixes}  {rule.summary.rstrip('.')}")
    return CLEAN


def _output_format(options: LintOptions) -> str:
    if options.as_json and options.output_format not in (None, "json"):
        raise LintError(
            f"--json is --output-format json; it cannot go with --output-format {options.output_format}"
        )
    return "json" if options.as_json else options.output_format or "text"


def _config(paths: list[str], options: LintOptions) -> LintConfig | None:
    """The settings to lint with: --config's file, else the nearest pyproject.toml with the table
    above the first path (read once for the whole run), none with --isolated."""
    if options.isolated and options.config is not None:
        raise LintError("--isolated ignores every config file; it cannot go with --config")
    if options.isolated:
        config = None
    elif options.config is not None:
        config = load_config(options.config)
    else:
        config = find_config(paths[0])
    if options.force_exclude:
        config = replace(config or LintConfig(), force_exclude=True)
    return config


def _format_options(output_format: str, fixing: bool) -> dict:
    return {"show_unfixable": True} if output_format == "text" and fixing else {}


def _show_diff(fixed: FixResult, out: Callable[[str], None], err: Console) -> int:
    diffs = [repair.diff() for repair in fixed.repairs]
    if diffs:
        # Each file's diff on its own lines, even when the file does not end with a newline.
        out("".join(d if d.endswith("\n") else d + "\n" for d in diffs).rstrip("\n"))
    _print_problems(fixed.remaining, err)
    if fixed.repairs:
        count, files, left = len(fixed.fixed), len(fixed.repairs), len(fixed.remaining.violations)
        _note(
            err,
            f"Would fix {_plural(count, 'finding')} in {_plural(files, 'file')}; {left or 'none'} would be left. "
            "Run with --fix to apply.",
        )
        return FINDINGS
    _note(err, f"No fixes to apply ({_checked(fixed.remaining)}).")
    return CLEAN


def _print_problems(result: LintResult, err: Console) -> None:
    for problem in result.problems:
        err.print(
            str(problem),
            style=None if problem.skipped else "red",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _error(err: Console, exc: LintError) -> None:
    err.print(f"trainmedic lint: error: {exc}", style="red", markup=False, soft_wrap=True)


def _note(err: Console, text: str) -> None:
    err.print(text, markup=False, highlight=False, soft_wrap=True)


def _codes(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [code for code in text.replace(" ", ",").split(",") if code]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _checked(result: LintResult) -> str:
    broken = sum(1 for p in result.problems if not p.skipped and not p.checked)
    tail = f"; {broken} could not be checked" if broken else ""
    return f"{_plural(result.files_checked, 'file')} checked{tail}"


def _summary(result: LintResult) -> str:
    if not result.violations:
        return f"No findings ({_checked(result)})."
    with_findings = len({v.path for v in result.violations})
    return (
        f"Found {_plural(len(result.violations), 'finding')} in {_plural(with_findings, 'file')} "
        f"({_checked(result)}). `trainmedic lint --explain CODE` says why and how to fix."
    )


def _fix_summary(fixed: FixResult) -> str:
    result = fixed.remaining
    if not fixed.fixed:
        return _summary(result) if not result.violations else f"No fixes applied. {_summary(result)}"
    left = len(result.violations)
    head = f"Fixed {_plural(len(fixed.fixed), 'finding')} in {_plural(len(fixed.repairs), 'file')}"
    if not left:
        return f"{head}; none left ({_checked(result)})."
    return (
        f"{head}; {left} left ({_checked(result)}). `trainmedic lint --explain CODE` says why and how to fix."
    )
