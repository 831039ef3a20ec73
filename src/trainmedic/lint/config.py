"""``[tool.trainmedic.lint]`` in pyproject.toml: which rules run, where, and which files are skipped.

Found as ruff finds its settings: the nearest pyproject.toml at or above the first linted path
that has the table (one without it is passed over). Globs are relative to that file's folder.

    [tool.trainmedic.lint]
    select = ["TM1"]
    ignore = ["TM111"]
    exclude = ["legacy", "notebooks/**"]

    [tool.trainmedic.lint.per-file-ignores]
    "tests/**" = ["TM107"]
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainmedic._pyproject import tool_table
from trainmedic.errors import LintError
from trainmedic.lint.model import Rule
from trainmedic.lint.rules import select_rules

TABLE = "tool.trainmedic.lint"
KEYS = ("select", "ignore", "per-file-ignores", "exclude")


@dataclass(frozen=True)
class LintConfig:
    """The settings one ``trainmedic lint`` call runs with.

    ``select`` is None for every rule. ``per_file_ignores`` pairs a glob with the codes (or
    prefixes) it turns off; a glob starting with ``!`` applies to the files it does not match.
    Globs are matched relative to ``root``: one without ``/`` matches a file or folder name at
    any depth, one with ``/`` a path from ``root``; ``*`` stays within a folder, ``**`` spans
    folders, and a glob that matches a folder covers everything in it. ``exclude`` applies to the
    files found by walking folders; a file or folder named on the command line is still linted
    unless ``force_exclude``."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    force_exclude: bool = False
    #: The folder the globs are relative to (the config file's); None: the working directory.
    root: Path | None = None
    #: The file the settings were read from, for messages; None when built in code.
    source: Path | None = None

    def overridden(self, select: Iterable[str] | None, ignore: Iterable[str] | None) -> LintConfig:
        """The command line's ``--select``/``--ignore`` over these settings, with ruff's meaning:
        ``--select`` replaces the selection (the settings' ``select`` and ``ignore`` both), and
        ``--ignore`` alone adds to the settings' ``ignore``. ``per-file-ignores`` always apply."""
        if select is not None:
            return replace(self, select=tuple(select), ignore=tuple(ignore or ()))
        return replace(self, ignore=self.ignore + tuple(ignore or ()))

    def excluded(self, path: str, *, with_parents: bool = False) -> bool:
        """Whether ``exclude`` matches ``path`` (or, ``with_parents``, a folder above it)."""
        return bool(self.exclude) and _matches_any(self.exclude, self._where(path, with_parents))

    def ignored_codes(self, path: str) -> tuple[str, ...]:
        """The codes ``per-file-ignores`` turns off for ``path``."""
        if not self.per_file_ignores:
            return ()
        where = self._where(path, with_parents=True)
        codes: list[str] = []
        for pattern, ignored in self.per_file_ignores:
            negated = pattern.startswith("!")
            if _matches_any([pattern.removeprefix("!")], where) != negated:
                codes.extend(ignored)
        return tuple(codes)

    def rule_picker(self) -> Callable[[str], list[Rule]]:
        """``pick(path)``: the rules to run on that file. The selection is checked (and its
        errors raised) here, once; files that share their per-file ignores share one list."""
        chosen = select_rules(self.select, self.ignore)
        by_ignored: dict[tuple[str, ...], list[Rule]] = {(): chosen}

        def pick(path: str) -> list[Rule]:
            ignored = self.ignored_codes(path)
            if ignored not in by_ignored:
                by_ignored[ignored] = [r for r in chosen if not r.code.startswith(tuple(ignored))]
            return by_ignored[ignored]

        return pick

    def _where(self, path: str, with_parents: bool) -> _Place:
        root = os.path.abspath(self.root) if self.root is not None else os.getcwd()
        relative = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        if relative == ".." or relative.startswith("../"):
            # Outside the project: only a bare name can match it.
            return _Place((), (os.path.basename(path),))
        parts = relative.split("/")
        if not with_parents:
            return _Place((relative,), (parts[-1],))
        return _Place(tuple("/".join(parts[: i + 1]) for i in range(len(parts))), tuple(parts))


@dataclass(frozen=True)
class _Place:
    paths: tuple[str, ...]  # the path from the root (and the folders above it, when asked)
    names: tuple[str, ...]  # their last components


def find_config(start: str | os.PathLike[str]) -> LintConfig | None:
    """The settings of the nearest pyproject.toml at or above ``start`` (a file or a folder)
    that has a ``[tool.trainmedic.lint]`` table; None when there is none up to the root."""
    here = Path(os.path.abspath(start))
    if not here.is_dir():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            table = _table(candidate)
            if table is not None:
                return _parse(table, candidate)
    return None


def load_config(path: str | os.PathLike[str]) -> LintConfig:
    """The settings of the pyproject.toml at ``path`` (``--config``); it must have the table."""
    pyproject = Path(os.path.abspath(path))
    if not pyproject.is_file():
        raise LintError(f"--config {os.fspath(path)!r}: no such file; give the pyproject.toml to read")
    table = _table(pyproject)
    if table is None:
        raise LintError(f"{pyproject} has no [{TABLE}] table; add one or leave out --config")
    return _parse(table, pyproject)


def _table(pyproject: Path) -> dict[str, Any] | None:
    return tool_table(pyproject, TABLE, LintError, no_tomli_fix="(or pass --isolated)")


def _parse(table: dict[str, Any], source: Path) -> LintConfig:
    where = f"{source}: [{TABLE}]"
    for key in table:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise LintError(f"{where} has an unknown key {key!r}; {hint}the keys are {', '.join(KEYS)}")
    select = _codes(table, "select", where) if "select" in table else None
    if select == ():
        raise LintError(f"{where} select = [] selects no rule; give codes or prefixes, or remove the key")
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise LintError(
            f"{where} per-file-ignores = {per_file!r} must be a table of glob = [codes], "
            f'e.g. [{TABLE}.per-file-ignores] then "tests/**" = ["TM107"]'
        )
    return LintConfig(
        select=select,
        ignore=_codes(table, "ignore", where),
        per_file_ignores=tuple(
            (_glob(glob, f"{where} per-file-ignores"), _codes(per_file, glob, f"{where} per-file-ignores"))
            for glob in per_file
        ),
        exclude=tuple(
            _glob(p, f"{where} exclude")
            for p in _strings(table, "exclude", where, "globs", '["legacy", "notebooks/**"]')
        ),
        root=source.parent,
        source=source,
    )


def _codes(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    given = _strings(table, key, where, "rule codes or prefixes", '["TM1"]')
    codes = tuple(code.strip().upper() for code in given if code.strip())
    for code in codes:
        try:
            select_rules([code], None)  # its message lists the valid codes
        except LintError as exc:
            raise LintError(f"{where} {_key(key)}: {exc}") from None
    return codes


def _strings(table: dict[str, Any], key: str, where: str, what: str, example: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise LintError(
            f"{where} {_key(key)} = {value!r} must be a list of {what}, e.g. {_key(key)} = {example}"
        )
    return value


def _glob(pattern: str, where: str) -> str:
    try:
        _compiled(pattern.removeprefix("!"))
    except re.error as exc:
        raise LintError(f"{where}: {pattern!r} is not a valid glob ({exc})") from None
    return pattern


def _key(name: str) -> str:
    """A key as the user writes it in TOML: a glob is always quoted, a name bare."""
    bare = name in KEYS
    return name if bare else f'"{name}"'


def _matches_any(patterns: Iterable[str], where: _Place) -> bool:
    for pattern in patterns:
        regex = _compiled(pattern)
        anchored = "/" in pattern.strip("/") or pattern.startswith("/")
        if any(regex.fullmatch(candidate) for candidate in (where.paths if anchored else where.names)):
            return True
    return False


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression: ``*`` and ``?`` within one folder, ``**`` across folders,
    ``[abc]`` and ``{a,b}`` as in ruff's (and git's) globs."""
    glob = pattern.removeprefix("./").strip("/")
    out, i, braces = [], 0, 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = glob.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
                continue
            body = glob[i:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        elif char == "{":
            braces += 1
            out.append("(?:")
        elif char == "}" and braces:
            braces -= 1
            out.append(")")
        elif char == "," and braces:
            out.append("|")
        else:
            out.append(re.escape(char))
    if braces:
        raise re.error("a '{' is not closed")
    return re.compile("".join(out))
