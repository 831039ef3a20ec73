"""One ``[tool.trainmedic.*]`` table of a pyproject.toml: ``trainmedic lint`` and ``trainmedic
preflight`` read their settings the same way, each raising its own error."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any


def tool_table(
    pyproject: Path, name: str, error: type[Exception], *, invalid_fix: str = "", no_tomli_fix: str = ""
) -> dict[str, Any] | None:
    """The table ``name`` (``tool.trainmedic.lint``) of ``pyproject``, or None when it has none.
    An unreadable file, broken TOML or a key that is not a table raises ``error``; ``invalid_fix``
    and ``no_tomli_fix`` end those messages with what the caller's user can do instead."""
    toml = _toml_module(error, no_tomli_fix)
    try:
        with open(pyproject, "rb") as handle:
            data = toml.load(handle)
    except OSError as exc:
        raise error(f"cannot read {pyproject}: {exc.strerror or exc}") from exc
    except toml.TOMLDecodeError as exc:  # its message names the line and column
        raise error(f"{pyproject} is not valid TOML: {exc}{invalid_fix}") from exc
    table: Any = data
    for part in name.split("."):
        table = table.get(part) if isinstance(table, dict) else None
        if table is None:
            return None
    if not isinstance(table, dict):
        raise error(f"{pyproject}: {name} = {table!r} must be a table: [{name}]")
    return table


def _toml_module(error: type[Exception], no_tomli_fix: str) -> ModuleType:
    # Tried by import, not by sys.version_info: the tests hide tomllib to run the 3.10 path. mypy
    # checks for 3.10, which has no tomllib, and cannot tell that the except below covers that.
    try:
        import tomllib  # type: ignore[import-not-found]  # Python 3.11+
    except ImportError:
        try:
            import tomli as tomllib  # the same parser, for Python 3.10 (a dependency there)
        except ImportError:
            raise error(
                f"reading pyproject.toml on Python 3.10 needs the package tomli: pip install tomli {no_tomli_fix}"
            ) from None
    return tomllib
