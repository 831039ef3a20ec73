"""Option checking and command lines for ``trainmedic tune --script``.

Two option styles are understood: argparse-like (``--batch-size 8`` / ``--batch-size=8``; also
click, typer, fire, HfArgumentParser) and Hydra (``training.batch_size=8``). Every name is checked
against what the script really accepts before any measurement, because a misspelt option either
stops argparse with exit code 2 after a slow import, or - worse, with Hydra's ``+key`` or a
hand-rolled parser - is silently ignored and the sweep measures one configuration N times.

Nothing here prints or exits: functions return values or raise :class:`TuneError`.
"""

from __future__ import annotations

import difflib
import itertools
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from trainmedic._os import kill_group, read_tail
from trainmedic.errors import TuneError

ARGPARSE, HYDRA = "argparse", "hydra"
#: Seconds ``SCRIPT --help`` / ``SCRIPT --cfg all`` may take: a torch import is ~2 s, a script
#: that ignores ``--help`` and starts training must not stall the search.
CHECK_TIMEOUT_S = 60.0
# All of a --help: HfArgumentParser's lists ~200 options in well over 64 KiB.
_HELP_BYTES = 4 * 1024 * 1024
_SET_NAME = re.compile(r"(--?|\+{1,2}|~)?[A-Za-z_][\w.\-/@]*")
_HYDRA_TOKEN = re.compile(r"(\+{1,2}|~)?[A-Za-z_][\w.\-/@]*=")
_USES_HYDRA = re.compile(r"^\s*(import hydra|from hydra\b)|@hydra\.main", re.MULTILINE)
_FLAG_IN_HELP = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.\-]*)")
_ASSIGNED = re.compile(r"^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)
# A script's globals are options only where its command line can reach them: it reads sys.argv,
# or execs a configurator that does (nanoGPT's `exec(open('configurator.py').read())`).
_READS_ARGV = re.compile(
    r"\bsys\.argv\b|^\s*from\s+sys\s+import\b[^\n]*\bargv\b|\bexec\(\s*open\(", re.MULTILINE
)
_NAME_LITERAL = re.compile(r"""["']([A-Za-z_][\w.]*)["']""")
_FLAG_LITERAL = re.compile(r"""["'](--?[A-Za-z][\w.\-]*)["']""")
_NEGATIVE_NUMBER = re.compile(r"-\d|-\.\d|-inf|-nan", re.IGNORECASE)
_ERROR_LINE = re.compile(r"^([\w.]*(Error|Exception|Exit|Interrupt)\b.*|.*\berror: .*)$")


@dataclass(frozen=True)
class OptionStyle:
    """How a script takes its options, and how it spells each ``--set`` name."""

    kind: str  # ARGPARSE or HYDRA
    #: ``--set`` name -> the spelling the script accepts (``batch_size`` -> ``--batch-size``).
    spellings: dict[str, str] = field(default_factory=dict)
    #: Every option (argparse) or config key (Hydra) found, for messages.
    known: tuple[str, ...] = ()

    def spell(self, name: str) -> str:
        if name in self.spellings:
            return self.spellings[name]
        return name if self.kind == HYDRA or name.startswith("-") else f"--{name}"


def parse_sets(values: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["batch_size=2,4", "lr=1e-3"]`` -> ``[("batch_size", ["2", "4"]), ("lr", ["1e-3"])]``."""
    sets: list[tuple[str, list[str]]] = []
    seen: dict[str, str] = {}
    for text in values:
        name, sep, rest = text.partition("=")
        name = name.strip()
        if not sep or not _SET_NAME.fullmatch(name):
            raise TuneError(
                f"--set {text!r} is not NAME=V1,V2,...; expected e.g. --set batch_size=2,4,8 "
                "or --set --lr=1e-3,1e-4 or --set training.batch_size=16,32 (Hydra)"
            )
        choices = _split_values(rest)
        if not choices or any(not v for v in choices):
            raise TuneError(
                f"--set {text!r} has an empty value; expected comma-separated values after "
                f"'=', e.g. --set {name}=2,4,8"
            )
        key = normal_name(name)
        if key in seen:
            raise TuneError(
                f"--set names {name!r} twice (also as {seen[key]!r}); give all its values in one "
                f"--set, e.g. --set {name}=2,4,8"
            )
        seen[key] = name
        sets.append((name, choices))
    return sets


# --- option style and validation -----------------------------------------------------------------


def detect_style(script: str | Path, args: Sequence[str], names: Sequence[str]) -> str:
    """HYDRA when the script uses Hydra or ARGS already hold ``key=value`` overrides, else ARGPARSE."""
    if any(name.startswith("-") for name in names):
        return ARGPARSE  # the user spelled the names as flags
    source = _read_source(script)
    if _USES_HYDRA.search(source) or any(_HYDRA_TOKEN.match(token) for token in args):
        return HYDRA
    return ARGPARSE


def check_options(
    script: str | Path,
    args: Sequence[str],
    names: Sequence[str],
    *,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> OptionStyle:
    """The script's option style, with every name checked to exist; TuneError for one that does not."""
    kind = detect_style(script, args, names)
    if kind == HYDRA:
        return _check_hydra(str(script), list(args), names, python, env, timeout_s)
    return _check_argparse(str(script), list(args), names, python, env, timeout_s)


def _check_argparse(
    script: str, args: list[str], names: Sequence[str], python: str, env, timeout_s: float
) -> OptionStyle:
    # Leading words of ARGS are a subcommand (LightningCLI's `fit`): its --help lists its options.
    command = list(itertools.takewhile(lambda token: not token.startswith("-"), args))
    code, output = _capture([python, script, *command, "--help"], env, timeout_s)
    flags = _unique(_FLAG_IN_HELP.findall(output)) if code == 0 else []
    evidence = f"`{Path(script).name} --help`"
    if not flags:
        # No parser answered --help: sys.argv read by hand, or a configurator that overrides the
        # script's globals (nanoGPT's --batch_size=32). The source is all there is to go by.
        source = _read_source(script)
        flags = _unique(
            _FLAG_LITERAL.findall(source) + [f"--{name}" for name in _globals_read_from_argv(source)]
        )
        evidence = f"the source of {Path(script).name} (its --help listed no options)"
    shown = [f for f in flags if f.startswith("--") and f != "--help"]
    spellings = {}
    for name in names:
        match = next((flag for flag in _flag_spellings(name) if flag in flags), None)
        if match is None:
            wrong = _flag_spellings(name)[0]
            close = difflib.get_close_matches(wrong, shown, n=1, cutoff=0.6)
            _raise_unknown(script, name, wrong, shown, close[0] if close else None, evidence)
        spellings[name] = match
    return OptionStyle(ARGPARSE, spellings, tuple(shown))


def _check_hydra(
    script: str, args: list[str], names: Sequence[str], python: str, env, timeout_s: float
) -> OptionStyle:
    # --cfg all prints the composed config (ARGS applied: they may pick config groups) plus hydra.*.
    code, output = _capture([python, script, *args, "--cfg", "all"], env, timeout_s)
    keys = _yaml_keys(output) if code == 0 else []
    evidence, leaves_only = f"`{Path(script).name} --cfg all`", False
    if not keys:
        source = _read_source(script)
        if _USES_HYDRA.search(source):
            line = error_line(output) or ("timed out" if code is None else f"exit code {code}")
            raise TuneError(
                f"cannot read the Hydra config of {script}: {evidence} failed ({line}); run it "
                "yourself to see why, or give the options as flags (--set --batch-size=...)"
            )
        # key=value ARGS but no Hydra: a hand-rolled parser. Its names can only be read in the
        # source: top-level assignments (nanoGPT's `batch_size = 12`) and string literals.
        keys = _unique(_globals_read_from_argv(source) + _NAME_LITERAL.findall(source))
        evidence, leaves_only = f"the source of {Path(script).name} (it is not a Hydra app)", True
    shown = [k for k in keys if not k.startswith("hydra.") and k != "hydra"]
    for name in names:
        bare = name.lstrip("+~")
        leaf = bare.rsplit(".", 1)[-1]
        # +key adds a key that must not exist yet; ++key adds or replaces; a/b and @package are
        # config-group paths the composed config does not show. The source only shows leaf names.
        if (
            name.startswith("+")
            or "/" in bare
            or "@" in bare
            or bare in keys
            or (leaves_only and leaf in keys)
        ):
            continue
        same_leaf = [k for k in shown if k.rsplit(".", 1)[-1] == leaf]
        close = same_leaf or difflib.get_close_matches(bare, shown, n=1, cutoff=0.6)
        _raise_unknown(
            script,
            name,
            bare,
            [k for k in shown if "." not in k] + same_leaf,
            close[0] if close else None,
            evidence,
            hydra=True,
        )
    return OptionStyle(HYDRA, {name: name for name in names}, tuple(shown))


def _raise_unknown(
    script: str,
    name: str,
    wrong: str,
    known: list[str],
    close: str | None,
    evidence: str,
    hydra: bool = False,
) -> NoReturn:
    listed = ", ".join(known[:15]) + (f" (+{len(known) - 15} more)" if len(known) > 15 else "")
    hint = f"did you mean {close}? " if close else ""
    fix = f"--set {close if hydra else close.lstrip('-')}=..." if close else "--set with one of those names"
    if not known:  # nothing to choose from: the script must take the option first
        fix = (
            f'give the script an option for it (e.g. parser.add_argument("{wrong}", type=int)) and use it '
            "where the value is used, then --set it"
        )
    raise TuneError(
        f"{script} has no option {wrong} (from --set {name}=...): {hint}its options per {evidence}: "
        f"{listed or 'none found'}; fix: {fix}"
    )


# --- the command line ----------------------------------------------------------------------------


def command_for(
    script: str | Path, args: Sequence[str], style: OptionStyle, overrides: Sequence[tuple[str, str]]
) -> list[str]:
    """``[script, *args]`` with each override replacing that option's value in ARGS, else appended."""
    argv = list(args)
    for name, value in overrides:
        spelled = style.spell(name)
        if style.kind == HYDRA:
            argv = _replace_hydra(argv, spelled, value)
        else:
            argv = _replace_flag(argv, spelled, _flag_spellings(name) + _flag_spellings(spelled), value)
    return [str(script), *argv]


def _replace_flag(argv: list[str], spelled: str, spellings: list[str], value: str) -> list[str]:
    end = argv.index("--") if "--" in argv else len(argv)  # after a bare --, tokens are positional
    out: list[str] = []
    at, i = None, 0
    while i < end:
        token = argv[i]
        if token in spellings:
            at = len(out) if at is None else at
            nxt = argv[i + 1] if i + 1 < end else None
            takes = nxt is not None and (not nxt.startswith("-") or _NEGATIVE_NUMBER.match(nxt))
            i += 2 if takes else 1
            continue
        if any(token.startswith(s + "=") for s in spellings):
            at = len(out) if at is None else at
            i += 1
            continue
        out.append(token)
        i += 1
    # --flag=value also works where --flag value does not (fire, nanoGPT-style configurators).
    new = [f"{spelled}={value}"]
    at = len(out) if at is None else at
    return out[:at] + new + out[at:] + argv[end:]


def _replace_hydra(argv: list[str], spelled: str, value: str) -> list[str]:
    bare = spelled.lstrip("+~")
    pattern = re.compile(rf"(\+{{1,2}}|~)?{re.escape(bare)}=")
    at = next((i for i, token in enumerate(argv) if pattern.match(token)), len(argv))
    kept = [token for token in argv if not pattern.match(token)]
    at -= sum(1 for token in argv[:at] if pattern.match(token))
    return kept[:at] + [f"{spelled}={value}"] + kept[at:]


# --- running the script ------------------------------------------------------------------------


def run_group(
    argv: list[str], env, timeout_s: float, folder: Path, tail_bytes: int
) -> tuple[int | None, str]:
    """Run ``argv`` in its own process group; (exit code or None on timeout, the output's tail)."""
    log = folder / "output.log"
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                argv,
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise TuneError(
                f"cannot start {argv[0]!r}: {exc.strerror or exc}; pass the Python that runs "
                "the script (python=...)"
            ) from None
        code = None
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # Also on Ctrl+C: the script, its DataLoader workers and grandchildren never outlive us.
            kill_group(proc.pid)
            proc.wait()
    return code, read_tail(log, tail_bytes)


def _capture(argv: list[str], env, timeout_s: float) -> tuple[int | None, str]:
    with tempfile.TemporaryDirectory(prefix="trainmedic-tune-") as tmp:
        return run_group(argv, env, timeout_s, Path(tmp), _HELP_BYTES)


def error_line(output: str) -> str | None:
    lines = [line.strip() for line in output.splitlines()]
    return next(
        (
            line
            for line in reversed(lines)
            if _ERROR_LINE.match(line) and not line.startswith("trainmedic: JSON report")
        ),
        None,
    )


# --- small helpers -------------------------------------------------------------------------------


def normal_name(name: str) -> str:
    return name.lstrip("-+~").lower().replace("-", "_")


def _flag_spellings(name: str) -> list[str]:
    base = name.lstrip("-")
    dashes = name[: len(name) - len(base)] or "--"
    return _unique([dashes + base, dashes + base.replace("_", "-"), dashes + base.replace("-", "_")])


def _split_values(text: str) -> list[str]:
    """Split on commas outside brackets and quotes: Hydra lists like [1,2] stay one value."""
    values, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
        elif char == "," and depth == 0:
            values.append(current.strip())
            current = ""
            continue
        current += char
    return values + [current.strip()]


def _yaml_keys(text: str) -> list[str]:
    """Dotted key paths of the block YAML Hydra prints; list items are not addressable and skipped."""
    keys: list[str] = []
    stack: list[tuple[int, str | None]] = []
    for line in text.splitlines():
        body = line.strip()
        if not body or body.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if body.startswith("-"):
            stack.append((indent, None))
            continue
        match = re.match(r"""([^\s:'"#][^:]*?|'[^']*'|"[^"]*")\s*:(\s|$)""", body)
        if match is None or any(key is None for _, key in stack):
            continue
        key = match.group(1).strip("'\"")
        keys.append(".".join([k for _, k in stack if k] + [key]))
        stack.append((indent, key))
    return keys


def _globals_read_from_argv(source: str) -> list[str]:
    """Top-level names a script's command line can override, nanoGPT-style; none if it never reads it.

    A global such as ``batch_size = 64`` in a script that reads no arguments is no option: a
    sweep over it measured one configuration under several names (and, counting samples by the
    value set, reported a speed-up that never happened).
    """
    return _ASSIGNED.findall(source) if _READS_ARGV.search(source) else []


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _read_source(script: str | Path) -> str:
    try:
        return Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TuneError(
            f"cannot read the script {str(script)!r}: {exc.strerror or exc}; expected a path to "
            "the training script (.py)"
        ) from None
