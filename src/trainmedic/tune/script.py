"""Script mode of ``trainmedic tune``: measure a training script under each combination of its options.

``trainmedic tune --script train.py --set batch_size=2,4,8 --set lr=1e-3,1e-4 -- ARGS`` needs no
build function: every combination is the user's own command line with those options overridden,
run under ``trainmedic run --steps N`` in a child process, and measured from that run's report.

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
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainmedic.errors import TuneError
from trainmedic.tune.model import Config, Measurement, Row

ARGPARSE, HYDRA = "argparse", "hydra"
#: Seconds ``SCRIPT --help`` / ``SCRIPT --cfg all`` may take: a torch import is ~2 s, a script
#: that ignores ``--help`` and starts training must not stall the search.
CHECK_TIMEOUT_S = 60.0
#: The watcher's stack-sampling interval in measured runs. Its breakdown is not used here; a
#: sparser sampler perturbs short steps less than run's default of 10 ms.
SAMPLE_INTERVAL_MS = 50
_TAIL_BYTES = 64 * 1024
# All of a --help: HfArgumentParser's lists ~200 options in well over 64 KiB.
_HELP_BYTES = 4 * 1024 * 1024

# Leaf names (lower case, "-" as "_") that name the per-step batch, in order of preference.
_BATCH_NAMES = ("batch_size", "per_device_train_batch_size", "train_batch_size", "micro_batch_size",
                "per_gpu_train_batch_size", "batch_size_per_gpu", "per_device_batch_size", "batchsize",
                "mini_batch_size", "minibatch_size", "micro_batch", "batch", "bs", "train_bs")
_NOT_TRAINING = re.compile(r"(^|_)(eval|val|valid|validation|test|predict|inference)(_|$)")
_SET_NAME = re.compile(r"(--?|\+{1,2}|~)?[A-Za-z_][\w.\-/@]*")
_HYDRA_TOKEN = re.compile(r"(\+{1,2}|~)?[A-Za-z_][\w.\-/@]*=")
_USES_HYDRA = re.compile(r"^\s*(import hydra|from hydra\b)|@hydra\.main", re.MULTILINE)
_FLAG_IN_HELP = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.\-]*)")
_ASSIGNED = re.compile(r"^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)
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


# --- the grid ------------------------------------------------------------------------------------

def parse_sets(values: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["batch_size=2,4", "lr=1e-3"]`` -> ``[("batch_size", ["2", "4"]), ("lr", ["1e-3"])]``."""
    sets: list[tuple[str, list[str]]] = []
    seen: dict[str, str] = {}
    for text in values:
        name, sep, rest = text.partition("=")
        name = name.strip()
        if not sep or not _SET_NAME.fullmatch(name):
            raise TuneError(f"--set {text!r} is not NAME=V1,V2,...; expected e.g. --set batch_size=2,4,8 "
                            "or --set --lr=1e-3,1e-4 or --set training.batch_size=16,32 (Hydra)")
        choices = _split_values(rest)
        if not choices or any(not v for v in choices):
            raise TuneError(f"--set {text!r} has an empty value; expected comma-separated values after "
                            f"'=', e.g. --set {name}=2,4,8")
        key = _normal(name)
        if key in seen:
            raise TuneError(f"--set names {name!r} twice (also as {seen[key]!r}); give all its values in one "
                            f"--set, e.g. --set {name}=2,4,8")
        seen[key] = name
        sets.append((name, choices))
    return sets


def batch_option(names: Sequence[str]) -> str | None:
    """The ``--set`` name that is the per-step batch size, or None (speeds are then steps/s)."""
    leaves = {name: _normal(name).rsplit(".", 1)[-1] for name in names}
    for wanted in _BATCH_NAMES:
        for name, leaf in leaves.items():
            if leaf == wanted:
                return name
    # train_batch_size-like names the list lacks; an eval/test batch is not the training step's.
    return next((n for n, leaf in leaves.items() if leaf.endswith("batch_size") and not _NOT_TRAINING.search(leaf)),
                None)


def script_grid(sets: Sequence[tuple[str, Sequence[str]]]) -> list[Config]:
    """Every combination of the ``--set`` values, the first option varying slowest."""
    names = [name for name, _ in sets]
    batch = batch_option(names)
    if batch is not None:
        values = dict(sets)[batch]
        ints = [v for v in values if _positive_int(v) is not None]
        if ints and len(ints) != len(values):
            bad = [v for v in values if _positive_int(v) is None]
            # samples/s of some rows against steps/s of others would compare nothing.
            raise TuneError(f"--set {batch}: {', '.join(map(repr, bad))} is not a positive whole number, the "
                            f"others are; give batch sizes only, e.g. --set {batch}={','.join(ints)}")
    configs = []
    for combination in itertools.product(*(values for _, values in sets)):
        overrides = tuple(zip(names, combination))
        size = _positive_int(dict(overrides)[batch]) if batch is not None else None
        configs.append(Config(batch_size=size, overrides=overrides))
    return configs


# --- option style and validation -----------------------------------------------------------------

def detect_style(script: str | Path, args: Sequence[str], names: Sequence[str]) -> str:
    """HYDRA when the script uses Hydra or ARGS already hold ``key=value`` overrides, else ARGPARSE."""
    if any(name.startswith("-") for name in names):
        return ARGPARSE  # the user spelled the names as flags
    source = _read_source(script)
    if _USES_HYDRA.search(source) or any(_HYDRA_TOKEN.match(token) for token in args):
        return HYDRA
    return ARGPARSE


def check_options(script: str | Path, args: Sequence[str], names: Sequence[str], *,
                  python: str = sys.executable, env: Mapping[str, str] | None = None,
                  timeout_s: float = CHECK_TIMEOUT_S) -> OptionStyle:
    """The script's option style, with every name checked to exist; TuneError for one that does not."""
    kind = detect_style(script, args, names)
    if kind == HYDRA:
        return _check_hydra(str(script), list(args), names, python, env, timeout_s)
    return _check_argparse(str(script), list(args), names, python, env, timeout_s)


def _check_argparse(script: str, args: list[str], names: Sequence[str], python: str, env, timeout_s: float) -> OptionStyle:
    # Leading words of ARGS are a subcommand (LightningCLI's `fit`): its --help lists its options.
    command = list(itertools.takewhile(lambda token: not token.startswith("-"), args))
    code, output = _capture([python, script, *command, "--help"], env, timeout_s)
    flags = _unique(_FLAG_IN_HELP.findall(output)) if code == 0 else []
    evidence = f"`{Path(script).name} --help`"
    if not flags:
        # No parser answered --help: sys.argv read by hand, or a configurator that overrides the
        # script's globals (nanoGPT's --batch_size=32). The source is all there is to go by.
        source = _read_source(script)
        flags = _unique(_FLAG_LITERAL.findall(source) + [f"--{name}" for name in _ASSIGNED.findall(source)])
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


def _check_hydra(script: str, args: list[str], names: Sequence[str], python: str, env, timeout_s: float) -> OptionStyle:
    # --cfg all prints the composed config (ARGS applied: they may pick config groups) plus hydra.*.
    code, output = _capture([python, script, *args, "--cfg", "all"], env, timeout_s)
    keys = _yaml_keys(output) if code == 0 else []
    evidence, leaves_only = f"`{Path(script).name} --cfg all`", False
    if not keys:
        source = _read_source(script)
        if _USES_HYDRA.search(source):
            line = _error_line(output) or ("timed out" if code is None else f"exit code {code}")
            raise TuneError(f"cannot read the Hydra config of {script}: {evidence} failed ({line}); run it "
                            "yourself to see why, or give the options as flags (--set --batch-size=...)")
        # key=value ARGS but no Hydra: a hand-rolled parser. Its names can only be read in the
        # source: top-level assignments (nanoGPT's `batch_size = 12`) and string literals.
        keys = _unique(_ASSIGNED.findall(source) + _NAME_LITERAL.findall(source))
        evidence, leaves_only = f"the source of {Path(script).name} (it is not a Hydra app)", True
    shown = [k for k in keys if not k.startswith("hydra.") and k != "hydra"]
    for name in names:
        bare = name.lstrip("+~")
        leaf = bare.rsplit(".", 1)[-1]
        # +key adds a key that must not exist yet; ++key adds or replaces; a/b and @package are
        # config-group paths the composed config does not show. The source only shows leaf names.
        if name.startswith("+") or "/" in bare or "@" in bare or bare in keys or (leaves_only and leaf in keys):
            continue
        same_leaf = [k for k in shown if k.rsplit(".", 1)[-1] == leaf]
        close = same_leaf or difflib.get_close_matches(bare, shown, n=1, cutoff=0.6)
        _raise_unknown(script, name, bare, [k for k in shown if "." not in k] + same_leaf,
                       close[0] if close else None, evidence, hydra=True)
    return OptionStyle(HYDRA, {name: name for name in names}, tuple(shown))


def _raise_unknown(script: str, name: str, wrong: str, known: list[str], close: str | None, evidence: str,
                   hydra: bool = False) -> None:
    listed = ", ".join(known[:15]) + (f" (+{len(known) - 15} more)" if len(known) > 15 else "")
    hint = f"did you mean {close}? " if close else ""
    fix = f"--set {close if hydra else close.lstrip('-')}=..." if close else "--set with one of those names"
    raise TuneError(f"{script} has no option {wrong} (from --set {name}=...): {hint}its options per {evidence}: "
                    f"{listed or 'none found'}; fix: {fix}")


# --- the command line ----------------------------------------------------------------------------

def command_for(script: str | Path, args: Sequence[str], style: OptionStyle,
                overrides: Sequence[tuple[str, str]]) -> list[str]:
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
    out, at, i = [], None, 0
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


# --- measuring -----------------------------------------------------------------------------------

def measure_script(script: str | Path, args: Sequence[str], config: Config, *, steps: int, trials: int,
                   python: str = sys.executable, timeout_s: float, env: Mapping[str, str] | None = None,
                   warmup: int = 3, style: OptionStyle | None = None) -> Row:
    """Run the script with ``config``'s overrides under ``trainmedic run --steps STEPS``; measure it.

    ``steps`` steady-state steps (after ``warmup``) are split into ``trials`` consecutive groups:
    samples/s per group is ``batch_size * steps / seconds`` (steps/s when the batch is unknown);
    a script that stops after fewer steps than ``trials`` gets one trial per step it made.
    ``first_step_s`` is the run's ``setup_s``: the process start to the end of the first step, so
    it holds the imports and data loading as well as the first step's compile and autotuning.
    Ctrl+C kills the child's process group and re-raises.
    """
    if steps < 1 or trials < 1:
        raise TuneError(f"steps={steps!r}, trials={trials!r}; expected at least 1 of each, e.g. steps=30, trials=3")
    if style is None:
        style = OptionStyle(detect_style(script, args, [name for name, _ in config.overrides]))
    with tempfile.TemporaryDirectory(prefix="trainmedic-tune-") as tmp:
        report_path = Path(tmp, "report.json")
        argv = [python, "-m", "trainmedic", "run", "--steps", str(steps), "--warmup", str(warmup),
                "--interval-ms", str(SAMPLE_INTERVAL_MS), "--quiet", "--json", str(report_path),
                "--", *command_for(script, args, style, config.overrides)]
        code, output = _run_group(argv, env, timeout_s, Path(tmp), _TAIL_BYTES)
        report = _read_json(report_path)
    if code is None:
        return Row(config, "failed", reason=f"no result within {timeout_s:g} s, so it was stopped; "
                                            "allow more time or measure fewer steps")
    if code != 0:
        return Row(config, "failed", reason=_failure_line(code, output, report))
    points = [float(p["seconds"]) for p in (report or {}).get("timeline", [])]
    if not points:
        return Row(config, "failed", reason="the script ended (exit code 0) before trainmedic saw a steady-state "
                                            "training step: no optimizer.step(), DataLoader batch or "
                                            "trainmedic.step() after the warm-up; give it more steps")
    return Row(config, "measured", measurement=_measurement(points, report, config.batch_size, trials, warmup))


def _measurement(points: list[float], report: dict, batch_size: int | None, trials: int, warmup: int) -> Measurement:
    # A run past the timeline's capacity keeps every k-th step; each kept point stands for k steps.
    stride = max(1, round(report["steps"]["count"] / len(points))) if report.get("steps") else 1
    trials = min(trials, len(points))
    per = len(points) // trials
    points = points[len(points) - per * trials:]  # drop the earliest leftovers: later steps are steadier
    work = batch_size or 1
    rates = tuple(work * per / max(sum(points[i * per:(i + 1) * per]), 1e-9) for i in range(trials))
    return Measurement(rates, per * stride, float(report.get("setup_s", 0.0)), warmup)


def _failure_line(code: int, output: str, report: dict | None) -> str:
    message = (report or {}).get("message")
    if report and report.get("outcome") == "exception" and message:
        return message.splitlines()[0]  # "RuntimeError: ... (at train.py:12)": names the user's line
    line = _error_line(output) or (message.splitlines()[0] if message else None)
    if line is None and code < 0:  # SIGKILL from the kernel's OOM killer, most often
        return f"the script was killed by signal {-code} ({_signal_name(-code)}) and printed no error"
    return line or f"the script exited with code {code} and printed no error"


def _error_line(output: str) -> str | None:
    lines = [line.strip() for line in output.splitlines()]
    return next((line for line in reversed(lines) if _ERROR_LINE.match(line)
                 and not line.startswith("trainmedic: JSON report")), None)


# --- child processes -----------------------------------------------------------------------------

def _run_group(argv: list[str], env, timeout_s: float, folder: Path, tail_bytes: int) -> tuple[int | None, str]:
    """Run ``argv`` in its own process group; (exit code or None on timeout, the output's tail)."""
    log = folder / "output.log"
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(argv, env=None if env is None else dict(env), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise TuneError(f"cannot start {argv[0]!r}: {exc.strerror or exc}; pass the Python that runs "
                            "the script (python=...)") from None
        code = None
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # Also on Ctrl+C: the script, its DataLoader workers and grandchildren never outlive us.
            _kill_group(proc.pid)
            proc.wait()
    return code, _tail(log, tail_bytes)


def _capture(argv: list[str], env, timeout_s: float) -> tuple[int | None, str]:
    with tempfile.TemporaryDirectory(prefix="trainmedic-tune-") as tmp:
        return _run_group(argv, env, timeout_s, Path(tmp), _HELP_BYTES)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- small helpers -------------------------------------------------------------------------------

def _normal(name: str) -> str:
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


def _positive_int(value: str) -> int | None:
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number > 0 else None


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _read_source(script: str | Path) -> str:
    try:
        return Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TuneError(f"cannot read the script {str(script)!r}: {exc.strerror or exc}; expected a path to "
                        "the training script (.py)") from None


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tail(path: Path, size: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode("utf-8", errors="replace")
