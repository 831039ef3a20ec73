"""The command lines and Python the docs show still fit the code: every option a ``trainmedic``
command line gives is one of that command's, and every name a Python block takes from
trainmedic exists."""

from __future__ import annotations

import ast
import importlib
import shlex

import pytest
import typer
from markdown_blocks import Block, blocks

from trainmedic.cli.main import app

COMMAND_BLOCKS = blocks("bash") + blocks("console")
PYTHON_BLOCKS = blocks("python")
#: The commands whose first free word is a script: what follows it is the script's own.
_TAKES_A_SCRIPT = {"run"}


def _command_lines(block: Block) -> list[str]:
    """A bash block's trainmedic command lines; in a transcript only its `$ ` lines (the rest is output)."""
    lines = []
    for line in block.text.splitlines():
        if block.lang == "console" and not line.startswith("$ "):
            continue
        line = line.removeprefix("$ ").split(" # ")[0].strip()
        if line.startswith("trainmedic "):
            lines.append(line)
    return lines


def _unknown_options(line: str) -> list[str]:
    group = typer.main.get_command(app)  # a group: typer's own copy of click's
    words = shlex.split(line)[1:]
    if not words or words[0].startswith("-"):
        return [
            w for w in words if w.startswith("-") and w.split("=")[0] not in ("--version", "-h", "--help")
        ]
    command = group.commands.get(words[0])
    if command is None:
        return [words[0]]
    options = {name: param for param in command.params for name in (*param.opts, *param.secondary_opts)}
    unknown, rest = [], iter(words[1:])
    for word in rest:
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            if words[0] in _TAKES_A_SCRIPT or (words[0] == "tune" and "--script" in words):
                break
            continue
        name = word.split("=")[0]
        param = options.get(name)
        if param is None and name not in ("-h", "--help"):
            unknown.append(name)
        elif param.param_type_name == "option" and not param.is_flag and "=" not in word:
            next(rest, None)  # its value
            if words[0] in _TAKES_A_SCRIPT and name in ("-m", "--module"):
                break  # the module's own arguments follow
    return unknown


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=[block.name for block in COMMAND_BLOCKS])
def test_every_option_shown_is_one_of_the_commands(block: Block):
    wrong = {line: bad for line in _command_lines(block) if (bad := _unknown_options(line))}
    assert not wrong, f"{block.name}: options the command does not have: {wrong}"


def test_the_option_check_catches_an_option_that_does_not_exist():
    assert _unknown_options("trainmedic lint --fix --no-such-flag src/") == ["--no-such-flag"]
    assert _unknown_options("trainmedic run --steps 3 train.py --no-such-flag") == []
    assert _unknown_options("trainmedic plann model.py:build") == ["plann"]


def _trainmedic_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    """(module, name) pairs the code imports from trainmedic, and (module, attribute) pairs it
    reads off an imported trainmedic module (``data.load``)."""
    found: list[tuple[str, str | None]] = []
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "trainmedic":
            for alias in node.names:
                found.append((node.module, alias.name))
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "trainmedic":
                    found.append((alias.name, None))
                    # `import trainmedic.data as d` binds d to the module; `import trainmedic.data` binds trainmedic
                    modules[alias.asname or "trainmedic"] = alias.name if alias.asname else "trainmedic"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append((modules[node.value.id], node.attr))
    return found


def _resolves(module: str, name: str | None) -> bool:
    try:
        target = importlib.import_module(module)
    except ImportError:
        parent, _, child = module.rpartition(".")
        if not parent:
            return False
        target = getattr(importlib.import_module(parent), child, None)
        if target is None:
            return False
    if name is None:
        return True
    if hasattr(target, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[block.name for block in PYTHON_BLOCKS])
def test_python_shown_parses_and_its_trainmedic_names_exist(block: Block):
    tree = ast.parse(block.text, filename=block.name)
    missing = [f"{module}.{name}" for module, name in _trainmedic_names(tree) if not _resolves(module, name)]
    assert not missing, f"{block.name}: these trainmedic names do not exist: {missing}"


def test_the_name_check_catches_a_name_that_does_not_exist():
    tree = ast.parse("from trainmedic import data\nloader = data.lode('x.h5')\n")
    assert [(m, n) for m, n in _trainmedic_names(tree) if not _resolves(m, n)] == [
        ("trainmedic.data", "lode")
    ]
