"""Config findings from a :class:`ConfigTracker` snapshot (the key lines come from config_lines.py).

Runs in the parent (``trainmedic preflight``), never inside the user's process.

- ``missed_override``: a key the code set (``op == "set"``; ``setdefault`` of a missing key and
  deletions are not overrides) shares its last name with a key of the same file that nothing wrote
  and that still holds another value: a ``time_predictor.num_iterations = 40000``
  next to two ``num_iterations`` set to 5. A key whose value equals the new value is consistent
  and not reported; list positions (``layers.0``) are not names.
- ``never_read``: a key of the file nothing read (grouped under the highest section nothing under
  was read), or a key the code set and never read afterwards (the override came too late, or hit a
  name the code does not read). Only for a snapshot of a run that finished (``complete``): a run
  stopped in phase 3 has not read phase 4's keys yet; and never for a file marked ``copied``.
"""

from __future__ import annotations

import ast
import os
import re

from trainmedic.errors import PreflightError
from trainmedic.preflight.config_lines import FileLines
from trainmedic.preflight.configs import FORMAT, ConfigFinding

_LAST = 1 << 30


def analyse(snapshot: dict, argv: list[str] | None = None, *, complete: bool = True) -> list[ConfigFinding]:
    """Findings for one snapshot, sorted by (file, line, key). ``argv`` (the experiment's
    command) lets a message name the flag that carried the new value; pass ``complete=False`` for
    a snapshot taken while the run was still going (SIGUSR2): never-read is then skipped."""
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        got = snapshot.get("format") if isinstance(snapshot, dict) else type(snapshot).__name__
        raise PreflightError(
            f"config snapshot has format {got!r}, expected {FORMAT!r}: write it with ConfigTracker.snapshot()"
        )
    root = snapshot.get("root") or os.getcwd()
    argv = [str(arg) for arg in argv or ()]
    findings: list[ConfigFinding] = []
    for entry in snapshot.get("files", ()):
        lines = FileLines(os.path.join(root, entry["path"]))
        findings += _missed_overrides(entry, lines, argv)
        if complete and not entry.get("copied"):
            findings += _never_read(entry, lines)
    findings.sort(key=lambda f: (f.file, f.line if f.line is not None else _LAST, f.key, f.kind))
    return findings


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _touched(key: str, sets: dict) -> bool:
    return key in sets or any(p in sets for p in _prefixes(key))


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None or a == b:
        return a == b
    try:
        return ast.literal_eval(a) == ast.literal_eval(b)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _missed_overrides(entry: dict, lines: FileLines, argv: list[str]) -> list[ConfigFinding]:
    keys, sets = entry.get("keys", {}), {s["key"]: s for s in entry.get("set", ())}
    by_name: dict[str, list[str]] = {}
    for key, record in sets.items():
        name = key.rpartition(".")[2]
        if record.get("op") == "set" and name and not name.isdigit():
            by_name.setdefault(name, []).append(key)
    found = []
    for key, value in keys.items():
        setters = by_name.get(key.rpartition(".")[2])
        if not setters or _touched(key, sets):
            continue
        news = [sets[s]["new"] for s in setters]
        if any(_same(value, new) for new in news):
            continue  # set to what this copy already says: consistent
        if len(set(news)) == 1:
            what = f"{_and(setters)} {'was' if len(setters) == 1 else 'were'} set to {news[0]}"
        else:
            rest = [f"{s} to {n}" for s, n in zip(setters[1:], news[1:])]
            what = _and([f"{setters[0]} was set to {news[0]}", *rest])
        name = key.rpartition(".")[2]
        flag = next((f for f in (_flag_for(new, argv, name) for new in news) if f), None)
        run = f"a run with {flag} still does {value} here" if flag else f"the run still uses {value} here"
        message = (
            f"{key} = {value} was not changed, but {what} (by an override?): {run}; override it too "
            f"(every `{name}` in {entry['path']}), or give it its own option if it is meant to differ"
        )
        related = tuple(sorted(setters))
        found.append(ConfigFinding("missed_override", entry["path"], key, lines.get(key), message, related))
    return found


def _flag_for(new: str | None, argv: list[str], name: str) -> str | None:
    """``--train-iters 5`` when argv carries the new value ``5`` after a flag; of several such
    flags, the one whose name looks most like the key's (``iters`` ~ ``num_iterations``)."""
    try:
        value = ast.literal_eval(new) if new is not None else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = new
    if value is None or isinstance(value, bool):
        return None  # store_true flags carry no value to match
    best, best_score = None, -1
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if len(w) >= 3]
    for i, token in enumerate(argv):
        if not token.startswith("-") or _number(token) is not None:
            continue
        if token.startswith("--") and "=" in token:
            flag, _, text = token.partition("=")
        elif i + 1 < len(argv):
            flag, text = token, argv[i + 1]
        else:
            continue
        if text == new or text == value or (isinstance(value, (int, float)) and _number(text) == value):
            parts = [p for p in re.split(r"[^a-z0-9]+", flag.lower()) if len(p) >= 3]
            score = sum(1 for p in parts for w in words if p[:4] == w[:4])
            if score > best_score:
                best, best_score = f"{flag} {text}", score
    return best


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _never_read(entry: dict, lines: FileLines) -> list[ConfigFinding]:
    path, keys = entry["path"], entry.get("keys", {})
    read, sets = set(entry.get("read", ())), {s["key"]: s for s in entry.get("set", ())}
    if keys and not read and not sets:
        message = (
            f"{path} was loaded but none of its {len(keys)} keys was read: the program does not use "
            f"this file, or loads the config it uses from somewhere else"
        )
        return [ConfigFinding("never_read", path, "", None, message, ())]
    under_read = read | {p for r in read for p in _prefixes(r)}
    groups: dict[str, list[str]] = {}
    for key in keys:
        if _touched(key, sets) or _was_read(key, read):
            continue
        top = next((p for p in _prefixes(key) + [key] if p not in under_read), key)
        groups.setdefault(top, []).append(key)
    found = []
    for top, members in groups.items():
        if members == [top]:
            message = (
                f"{top} = {keys[top]} is never read: a typo of a key the code reads, or a dead setting; "
                f"fix its name or delete it"
            )
            related: tuple[str, ...] = ()
        else:
            example = f"{members[0]} = {keys[members[0]]}"
            message = (
                f"{top} is never read ({len(members)} keys, e.g. {example}): a section the code does not "
                f"use, or a typo of the name it reads; fix the name or delete it"
            )
            related = tuple(members)
        found.append(ConfigFinding("never_read", path, top, lines.get(top), message, related))
    for key, record in sets.items():
        if record.get("op") not in ("set", "default") or record.get("read_after"):
            continue
        if any(p in sets for p in _prefixes(key)):
            continue  # its section was replaced or deleted afterwards
        new, old = record.get("new"), record.get("old")
        if record.get("read_before"):
            message = (
                f"{key} was set to {new} after the program had read it (as {old}) and was never read again: "
                f"the override came too late to change the run; apply it before the config is used"
            )
        elif key in keys or old is not None:
            message = (
                f"{key} was set to {new} (the file says {old}) but the program never reads it: the override "
                f"changes nothing; is the code reading another key?"
            )
        else:
            message = f"{key} was set to {new} but nothing reads it: a key the code does not use (a typo?)"
        found.append(ConfigFinding("never_read", path, key, lines.get(key), message, ()))
    return found


def _was_read(key: str, read: set[str]) -> bool:
    # A list is read as one setting: a number inside a read list (``mixed.0``) was read with it.
    while key not in read:
        head, _, last = key.rpartition(".")
        if not (head and last.isdigit()):
            return False
        key = head
    return True
