"""Where ``trainmedic run``'s own options end and the script's arguments begin.

click reads every option it knows wherever it stands; python stops at the script. main() marks
that boundary with ``--`` before click parses, so ``trainmedic run -m pkg.train -h`` gives ``-h``
to the module, as ``python -m pkg.train -h`` would.
"""

from __future__ import annotations

from typer.core import TyperCommand, TyperGroup, TyperOption


def mark_script_args(argv: list[str], group: TyperGroup) -> list[str]:
    """Parse `run` like python: trainmedic's options come before the script (or `-m MODULE`), and
    everything after it is the script's, `-h` and `--steps` included. The boundary is marked with
    `--` for click, which would otherwise read options after `-m MODULE` as trainmedic's. Which
    options take a value comes from the commands' own parameters, so a new option cannot break it."""
    at = _options_end(argv, 0, group)
    if (
        at >= len(argv)
        or argv[at] != "run"
        or not isinstance(run_command := group.commands.get("run"), TyperCommand)
    ):
        return argv
    start = at + 1
    end = _options_end(argv, start, run_command, stop_after=frozenset({"module"}))
    if end >= len(argv) or argv[end] == "--":
        return argv  # nothing is the script's, or marked already
    return [*argv[:end], "--", *argv[end:]]


def _options_end(
    argv: list[str], start: int, command: TyperCommand | TyperGroup, stop_after: frozenset[str] = frozenset()
) -> int:
    """The index of the first word after ``command``'s options from ``start``: its first positional
    word, a `--`, or what follows the value of an option named in ``stop_after``."""
    options = {
        name: param
        for param in command.params
        if isinstance(param, TyperOption)
        for name in (*param.opts, *param.secondary_opts)
    }
    i = start
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            return i
        i += 1
        if arg.startswith("--"):  # --name, --name=value
            param = options.get(arg.split("=", 1)[0])
            if param is not None and "=" not in arg:
                i += _values(param)
        else:  # -q, -mpkg.train, -qm pkg.train: flags, then at most one option that takes a value
            param = None
            for j in range(1, len(arg)):
                param = options.get("-" + arg[j])
                if param is not None and _values(param):
                    if j + 1 == len(arg):
                        i += _values(param)
                    break
        if param is not None and param.name in stop_after:
            return min(i, len(argv))
    return i


def _values(option: TyperOption) -> int:
    """How many words after its name an option takes: none for a flag or a count."""
    return 0 if option.is_flag or option.count else option.nargs


__all__ = ["mark_script_args"]
