"""Shell syntax in an experiment's command, refused before anything runs.

A command is split as a shell would (``shlex``) and started directly, without a shell: in
``FOO=1 python fail.py`` the program would be ``FOO=1``; in ``cd sub && python x.py``,
``python x.py > out.txt`` or ``a | b`` the operator would reach the program as an argument and
the verdict would be about another run than the user meant. Each is refused with what does the
same in preflight: ``env = { FOO = "1" }``, ``cwd = "sub"``, or a script.
"""

from __future__ import annotations

import json
import re
import shlex

from trainmedic.errors import PreflightError

#: Unquoted, these make sense only to a shell.
_SHELL_OPERATORS = ("&&", "||", ">>", "&>", "|", ";", ">", "<", "&")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def refuse_shell_syntax(command: str, argv: list[str], where: str, key: str | None) -> None:
    """Raise PreflightError for shell syntax in ``command`` (split into ``argv``); ``where`` names
    the setting, ``key`` is the experiment's TOML key (None for ``--command``), for the fix."""
    argv = list(argv)
    assignments = []
    while argv and _ASSIGNMENT.match(argv[0]):
        assignments.append(argv.pop(0))
    if assignments:
        rest = shlex.join(argv) if argv else "python train.py"
        table = ", ".join(f"{a.split('=', 1)[0]} = {_toml_string(a.split('=', 1)[1])}" for a in assignments)
        if key is None:
            exports = " ".join(shlex.quote(a) for a in assignments)
            fix = (
                f"set it for trainmedic itself (its environment reaches the command): "
                f"{exports} trainmedic preflight --command {shlex.quote(rest)}, or declare the experiment in "
                f"pyproject.toml with env = {{ {table} }}"
            )
        else:
            fix = f"set it in the experiment's table: {key} = {{ command = {_toml_string(rest)}, env = {{ {table} }} }}"
        raise PreflightError(
            f"{where} = {command!r}: {assignments[0]!r} is a shell variable assignment, but the command runs "
            f"without a shell (it would look for a program named {assignments[0].split('=', 1)[0]}=...); {fix}"
        )
    found = _unquoted_operator(command)
    if found is None:
        return
    operator, at = found
    head = (
        f"{where} = {command!r}: {operator!r} is shell syntax, but the command runs without a shell "
        "(the program would get it as an argument); "
    )
    if operator in (">", ">>", "&>", "<") or operator[:1].isdigit():
        fix = (
            "drop the redirection: the command's stdout and stderr are captured (the report shows their last "
            'lines), or put the command in a script and run that, e.g. command = "sh run.sh"'
        )
    elif argv and argv[0] == "cd" and operator == "&&" and len(argv) > 1:
        folder, rest = argv[1], command[at + 2 :].strip()
        if key is None:
            fix = (
                f"run it from that folder (a --command runs where trainmedic is started): cd {shlex.quote(folder)} "
                f"&& trainmedic preflight --command {shlex.quote(rest)}, or declare the experiment in pyproject.toml "
                f"with cwd = {_toml_string(folder)}"
            )
        else:
            fix = (
                f"instead of cd, give the folder (relative to the project root) as cwd: "
                f"{key} = {{ command = {_toml_string(rest)}, cwd = {_toml_string(folder)} }}"
            )
    else:
        fix = 'put the steps in a script and run that, e.g. command = "sh run.sh"'
    raise PreflightError(head + fix)


def _unquoted_operator(command: str) -> tuple[str, int] | None:
    """The first shell operator outside quotes (``2>`` with its file descriptor) and where it is."""
    quote, i = "", 0
    while i < len(command):
        c = command[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c.isdigit() and command[i + 1 : i + 2] == ">" and (i == 0 or command[i - 1].isspace()):
            return command[i : i + 2], i
        elif c in "&|;<>":
            return next(op for op in _SHELL_OPERATORS if command.startswith(op, i)), i
        i += 1
    return None


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a TOML basic string is a JSON string for anything a shell word holds
