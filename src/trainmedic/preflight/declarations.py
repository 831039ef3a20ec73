"""What to preflight: ``[tool.trainmedic.preflight]`` in pyproject.toml, plus the command line.

::

    [tool.trainmedic.preflight]
    budget = "2m"            # per run, wall clock (default 2m)
    device = "t4"            # target GPU for the memory plan (optional)
    session_limit = "9h"     # the platform's session limit (optional)
    resume_check = true      # save -> kill -> resume for scripts that use checkpoint.Checkpointer

    [tool.trainmedic.preflight.experiments]
    toy2d = "python train.py --dataset 2d --train-iters 5"
    mnist = { command = "python train.py --dataset mnist --train-iters 5", plan = "model.py:build",
              batch = 128, steps = 40000, step_time = "0.62s", env = { DATA = "tiny" }, cwd = "mnist" }

A command runs without a shell (split as a shell would, then started directly), so shell syntax
in it (``FOO=1 python ...``, ``cd sub && ...``, ``> out.txt``) is refused with the table key that
does the same: ``env``, ``cwd`` (a folder relative to the project root), or a script.

Every bad value raises PreflightError naming the key, the value, what was expected and the fix,
before anything runs: a typo must not cost the first experiment's budget.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic._pyproject import tool_table
from trainmedic.errors import DeviceError, PreflightError
from trainmedic.preflight.shell_syntax import refuse_shell_syntax
from trainmedic.units import parse_duration

DEFAULT_BUDGET = 120.0
TABLE = "tool.trainmedic.preflight"
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

_GLOBAL_KEYS = ("budget", "device", "session_limit", "resume_check", "experiments")
_EXPERIMENT_KEYS = ("command", "budget", "plan", "batch", "precision", "steps", "step_time", "env", "cwd")


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """One command to run tiny on the CPU, and what is known about its full run."""

    name: str
    command: str
    budget: float
    plan: str | None = None
    batch: int | None = None
    precision: str = "fp32"
    #: Optimizer steps of the full run, and seconds per step measured on the target GPU.
    steps: int | None = None
    step_time: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    #: Where the command runs: the project root (the pyproject's folder: declared paths are
    #: relative to it) or the table's ``cwd`` under it for declared ones, the folder the user
    #: typed --command in for the others. None: the project root.
    cwd: Path | None = None
    #: Given with --command rather than declared in pyproject.toml: the report says where each came from.
    from_command_line: bool = False


@dataclass(frozen=True)
class Settings:
    """Everything one ``trainmedic preflight`` needs: the project, its experiments, the targets."""

    root: Path
    #: The pyproject.toml the chosen experiments were declared in; None when only --command ones run
    #: (a pyproject found on the way still gives the root and the defaults, but no experiment).
    pyproject: Path | None
    experiments: tuple[Experiment, ...]
    device: str | None = None
    session_limit: float | None = None
    resume_check: bool = True


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """The command line: it wins over pyproject.toml."""

    names: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    budget: str | None = None
    device: str | None = None
    session_limit: str | None = None
    resume_check: bool | None = None
    project: Path | None = None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml in ``start`` or above it (the project the user is in)."""
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_settings(overrides: Overrides, cwd: Path | None = None) -> Settings:
    """Read the declarations, apply the command line, and check every value."""
    start = Path(overrides.project) if overrides.project is not None else Path(cwd or Path.cwd())
    if not start.is_dir():
        raise PreflightError(f"--project {start}: no such folder; give the folder that holds pyproject.toml")
    pyproject = find_pyproject(start)
    table = _preflight_table(pyproject) if pyproject is not None else None
    if table is None and not overrides.commands:
        where = (
            f"{pyproject} has no [{TABLE}] table"
            if pyproject
            else f"no pyproject.toml in {start.resolve()} or above it"
        )
        raise PreflightError(
            f"no experiments to run: {where}. Declare them there, e.g.\n"
            f'  [{TABLE}.experiments]\n  toy = "python train.py --steps 5"\n'
            'or give one on the command line: trainmedic preflight --command "python train.py --steps 5"'
        )
    table = table or {}
    _check_keys(table, _GLOBAL_KEYS, f"[{TABLE}]")
    root = pyproject.parent if pyproject is not None else start.resolve()

    budget = _duration(table.get("budget", DEFAULT_BUDGET), f"[{TABLE}] budget", 'budget = "2m"')
    if overrides.budget is not None:
        budget = _duration(overrides.budget, "--budget", "--budget 2m")
    device = _device(table.get("device"), f"[{TABLE}] device")
    if overrides.device is not None:
        device = _device(overrides.device, "--device")
    limit = table.get("session_limit")
    session_limit = (
        None if limit is None else _duration(limit, f"[{TABLE}] session_limit", 'session_limit = "9h"')
    )
    if overrides.session_limit is not None:
        session_limit = _duration(overrides.session_limit, "--session-limit", "--session-limit 9h")
    resume_check = table.get("resume_check", True)
    if not isinstance(resume_check, bool):
        raise PreflightError(
            f"[{TABLE}] resume_check = {resume_check!r}: expected true or false, e.g. resume_check = false"
        )
    if overrides.resume_check is not None:
        resume_check = overrides.resume_check

    declared = _experiments(table.get("experiments", {}), budget, root)
    if overrides.budget is not None:  # the command line is this run's intent: it caps every experiment
        declared = {name: _replace_budget(e, budget) for name, e in declared.items()}
    chosen = _choose(declared, overrides.names, pyproject)
    if not overrides.names and overrides.commands:
        chosen = []  # `--command` alone runs only those commands, like naming experiments does
    chosen += _ad_hoc(overrides.commands, budget, {e.name for e in chosen}, start.resolve())
    if not chosen:
        raise PreflightError(
            f'[{TABLE}.experiments] in {pyproject} is empty; add one, e.g. toy = "python train.py --steps 5"'
        )
    declared_run = any(not e.from_command_line for e in chosen)
    return Settings(
        root, pyproject if declared_run else None, tuple(chosen), device, session_limit, resume_check
    )


def _preflight_table(pyproject: Path) -> dict[str, Any] | None:
    return tool_table(
        pyproject,
        TABLE,
        PreflightError,
        invalid_fix="; fix the file (or run from another folder)",
        no_tomli_fix="(or give the experiments with --command)",
    )


def _experiments(table: Any, budget: float, root: Path) -> dict[str, Experiment]:
    if not isinstance(table, dict):
        raise PreflightError(
            f'[{TABLE}] experiments = {table!r}: expected a table of name = "command", '
            f'e.g. [{TABLE}.experiments] then toy = "python train.py --steps 5"'
        )
    return {str(name): _experiment(str(name), value, budget, root) for name, value in table.items()}


def _experiment(name: str, value: Any, budget: float, root: Path) -> Experiment:
    where = f"[{TABLE}.experiments] {_key(name)}"
    if isinstance(value, str):
        return Experiment(name=name, command=_command(value, where, name), budget=budget)
    if not isinstance(value, dict):
        raise PreflightError(
            f"{where} = {value!r}: expected a command string or a table, "
            f'e.g. {_key(name)} = "python train.py --steps 5" or {_key(name)} = {{ command = "python train.py" }}'
        )
    where = f"[{TABLE}.experiments.{_key(name)}]"
    _check_keys(value, _EXPERIMENT_KEYS, where)
    if "command" not in value:
        raise PreflightError(f'{where} has no command; add one, e.g. command = "python train.py --steps 5"')
    command = _command(value["command"], f"{where} command", name)
    if "budget" in value:
        budget = _duration(value["budget"], f"{where} budget", 'budget = "2m"')
    plan = value.get("plan")
    if plan is not None and (not isinstance(plan, str) or not plan.strip()):
        raise PreflightError(
            f'{where} plan = {plan!r}: expected "FILE.py:FUNCTION", e.g. plan = "model.py:build"'
        )
    batch = _positive_int(value.get("batch"), f"{where} batch", "batch = 128")
    if plan is not None and batch is None:
        raise PreflightError(
            f"{where} has plan = {plan!r} but no batch: add the batch size to plan, e.g. batch = 128"
        )
    precision = value.get("precision", "fp32")
    if not isinstance(precision, str) or precision.lower() not in PRECISIONS:
        raise PreflightError(
            f'{where} precision = {precision!r}: expected one of {", ".join(PRECISIONS)}, e.g. precision = "bf16"'
        )
    steps = _positive_int(
        value.get("steps"), f"{where} steps", "steps = 40000 (optimizer steps of the full run)"
    )
    step_time = value.get("step_time")
    if step_time is not None:
        step_time = _duration(
            step_time, f"{where} step_time", 'step_time = "0.62s" (measured on the target GPU)'
        )
    return Experiment(
        name=name,
        command=command,
        budget=budget,
        plan=plan,
        batch=batch,
        precision=precision.lower(),
        steps=steps,
        step_time=step_time,
        env=_env(value.get("env", {}), where),
        cwd=_cwd(value.get("cwd"), where, root),
    )


def _ad_hoc(commands: tuple[str, ...], budget: float, taken: set[str], cwd: Path) -> list[Experiment]:
    out = []
    for command in commands:
        text = _command(command, "--command")
        name, n = text, 2
        while name in taken:  # the same command twice: both run, told apart in the table
            name, n = f"{text} ({n})", n + 1
        taken.add(name)
        out.append(Experiment(name=name, command=text, budget=budget, cwd=cwd, from_command_line=True))
    return out


def _choose(
    declared: dict[str, Experiment], names: tuple[str, ...], pyproject: Path | None
) -> list[Experiment]:
    if not names:
        return list(declared.values())
    unknown = [n for n in names if n not in declared]
    if unknown:
        known = ", ".join(declared) or "none"
        source = f" in {pyproject}" if pyproject else ""
        raise PreflightError(
            f"no experiment named {', '.join(map(repr, unknown))}{source}; declared: {known}. "
            f"Declare it under [{TABLE}.experiments] or run a command with --command"
        )
    return [declared[n] for n in dict.fromkeys(names)]


def _command(value: Any, where: str, name: str | None = None) -> str:
    """A command line as given; ``name``: the experiment's (None for --command), for the fixes."""
    if not isinstance(value, str) or not value.strip():
        raise PreflightError(
            f'{where} = {value!r}: expected a command line, e.g. "python train.py --steps 5"'
        )
    try:
        argv = shlex.split(value)
    except ValueError as exc:
        raise PreflightError(
            f"{where} = {value!r} cannot be split into arguments ({exc}); close the quote"
        ) from None
    if not argv:
        raise PreflightError(
            f'{where} = {value!r}: expected a command line, e.g. "python train.py --steps 5"'
        )
    refuse_shell_syntax(value.strip(), argv, where, None if name is None else _key(name))
    return value.strip()


def _duration(value: Any, where: str, example: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a duration")
        seconds = parse_duration(value)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PreflightError(f"{where} = {value!r}: {exc}; e.g. {example}") from None
    if seconds <= 0:
        raise PreflightError(f"{where} = {value!r}: expected a duration above zero, e.g. {example}")
    return seconds


def _device(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PreflightError(f'{where} = {value!r}: expected a GPU name, e.g. device = "t4"')
    from trainmedic.devices import get_device  # the catalog: a misspelt card fails before anything runs

    try:
        get_device(value)
    except DeviceError as exc:
        # The catalog's message ends with plan's way out for another card (--capacity SIZE);
        # preflight has no such option: it plans only for cards of the catalog.
        text = re.sub(
            r"[;,]? ?or give --capacity SIZE \(e\.g\. [^)]*\) for (?:any other|another) card\.?$",
            "",
            str(exc),
        )
        text = text.rstrip(" .;,")
        raise PreflightError(
            f"{where} = {value!r}: {text}. `trainmedic plan --list-devices` shows each card's memory."
        ) from None
    return value


def _positive_int(value: Any, where: str, example: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PreflightError(f"{where} = {value!r}: expected a whole number of at least 1, e.g. {example}")
    return value


def _env(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise PreflightError(
            f'{where} env = {value!r}: expected a table of strings, e.g. env = {{ DATA = "tiny" }}'
        )
    env = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise PreflightError(
                f'{where} env.{key} = {item!r}: expected a string (environment values are text), e.g. {key} = "1"'
            )
        env[str(key)] = str(item)
    return env


def _cwd(value: Any, where: str, root: Path) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or Path(value).is_absolute():
        raise PreflightError(
            f'{where} cwd = {value!r}: expected a folder relative to the project root ({root}), e.g. cwd = "sub"'
        )
    folder = (root / value).resolve()
    if not folder.is_dir():
        raise PreflightError(f"{where} cwd = {value!r}: no folder {root / value}; create it or fix the path")
    return folder


def _check_keys(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PreflightError(f"{where} has an unknown key {key!r}; {hint}known keys: {', '.join(known)}")


def _replace_budget(experiment: Experiment, budget: float) -> Experiment:
    from dataclasses import replace

    return replace(experiment, budget=budget)


def _key(name: str) -> str:
    """A TOML key as the user would write it: bare when it can be, quoted otherwise."""
    bare = name.replace("-", "").replace("_", "").isalnum() and name.isascii()
    return name if bare else f'"{name}"'
