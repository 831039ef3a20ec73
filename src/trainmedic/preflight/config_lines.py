"""The line of each key in a config file: a small scanner for YAML, TOML and JSON text.

Runs in the parent (``trainmedic preflight``) when a finding names a key: ``FileLines(path).get(
"time_predictor.num_iterations")`` is the line the user should look at. Not a parser (the file
was already parsed by the user's own loader); it only has to find where each dotted key is
written, and gives up on a key (None) rather than guess.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
from collections.abc import Callable


class FileLines:
    """Key path -> line of one config file, scanned on first use (None: not found or ambiguous)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lines: dict[str, int | None] | None = None

    def get(self, key: str) -> int | None:
        if self._lines is None:
            try:
                with open(self.path, encoding="utf-8", errors="replace") as f:
                    self._lines = key_lines(f.read(), self.path)
            except OSError:
                self._lines = {}
        return self._lines.get(key)


def key_lines(text: str, name: str) -> dict[str, int | None]:
    """Dotted key path -> 1-based line for a YAML, TOML or JSON text (chosen by ``name``'s suffix);
    a path that occurs twice maps to None. A small scanner, not a parser: keys reached only through
    YAML aliases or merge keys (``<<: *base``) are not found."""
    suffix = os.path.splitext(name)[1].lower()
    found: dict[str, int | None] = {}
    try:
        if suffix == ".json":
            start = len(text) - len(text.lstrip())
            if text[start : start + 1] in ("{", "["):
                _scan_flow(text, start, "", _line_of(text), found, ":")
        elif suffix == ".toml":
            _scan_toml(text, found)
        else:
            _scan_yaml(text, found)
    except (IndexError, ValueError):
        pass  # a file the scanner does not understand: the lines found so far still hold
    return found


def _put(found: dict[str, int | None], path: str, line: int) -> None:
    found[path] = line if found.get(path, line) == line else None


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _line_of(text: str) -> Callable[[int], int]:
    starts = [i for i, c in enumerate(text) if c == "\n"]
    return lambda pos: bisect.bisect_left(starts, pos) + 1


def _unquote(match: re.Match) -> str:
    dq, sq, plain = match.group("dq"), match.group("sq"), match.group("plain")
    if dq is not None:
        try:
            return ast.literal_eval(f'"{dq}"')
        except (ValueError, SyntaxError):
            return dq
    return sq.replace("''", "'") if sq is not None else plain.strip()


_QUOTED = r""""(?P<dq>(?:[^"\\\n]|\\.)*)"|'(?P<sq>(?:[^'\n]|'')*)'"""
_FLOW_KEY = {
    ":": re.compile(rf"""\s*(?:{_QUOTED}|(?P<plain>[^\s'"{{}}\[\],:#][^{{}}\[\],:#\n]*?))\s*:"""),
    "=": re.compile(rf"""\s*(?:{_QUOTED}|(?P<plain>[A-Za-z0-9_.\- ]+?))\s*="""),
}


def _scan_flow(text: str, pos: int, base: str, line_of: Callable[[int], int], found: dict, sep: str) -> int:
    """Record the keys of the ``{...}``/``[...]`` starting at ``text[pos]``; return the index after
    its end (``len(text)`` when it never closes). JSON, YAML flow style and TOML inline values."""
    key_re = _FLOW_KEY[sep]
    stack: list[list] = []  # [is_mapping, path, next_index]
    pending, want_key, i, n = base, False, pos, len(text)
    while i < n:
        if want_key:
            want_key = False
            m = key_re.match(text, i)
            if m:
                plain = m.group("plain")
                parts = _toml_parts(plain) if sep == "=" and plain is not None else [_unquote(m)]
                pending = stack[-1][1]
                for part in parts:
                    pending = _join(pending, part)
                _put(found, pending, line_of(m.start(m.lastgroup or 0)))
                i = m.end()
                continue
        c = text[i]
        if c in "{[":
            stack.append([c == "{", pending, 0])
            want_key = c == "{"
            if c == "[":
                pending = _join(pending, "0")
        elif c in "}]":
            stack.pop()
            if not stack:
                return i + 1
        elif c == "," and stack:
            top = stack[-1]
            if top[0]:
                want_key = True
            else:
                top[2] += 1
                pending = _join(top[1], str(top[2]))
        elif c == '"':
            m = re.compile(r'"(?:[^"\\]|\\.)*"').match(text, i)
            i = m.end() if m else n
            continue
        elif c == "'":
            end = text.find("'", i + 1)
            i = n if end < 0 else end + 1
            continue
        elif c == "#" and sep != ":" or (c == "#" and text[i - 1 : i].isspace()):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        i += 1
    return n


_YAML_KEY = re.compile(
    rf"""(?:{_QUOTED}|(?P<plain>[^\s'"#\[\]{{}},&*!|>%@`-](?:[^#:\n]|:(?=\S))*?))[ \t]*:(?=\s|$)"""
)


def _strip_comment(text: str) -> str:
    m = re.search(r"(^|\s)#", text)
    return text[: m.start()] if m else text


def _scan_yaml(text: str, found: dict) -> None:
    line_of = _line_of(text)
    stack: list[tuple[int, str, str]] = [(-1, "", "root")]  # (column, path, "key" | "item")
    counters: dict[str, int] = {}
    skip_deeper = None  # column: following lines indented more belong to a block/continued scalar
    skip_until = 0  # offset: lines before it are inside a flow collection already scanned
    seen_content = False
    offset = 0
    for lineno, raw in enumerate(text.split("\n"), 1):
        start, offset = offset, offset + len(raw) + 1
        if start < skip_until:
            continue
        line = raw.rstrip()
        stripped = line.lstrip(" ")
        col = len(line) - len(stripped)
        if not stripped or stripped.startswith("#"):
            continue
        if skip_deeper is not None and col > skip_deeper:
            continue
        skip_deeper = None
        if col == 0 and stripped.startswith(("---", "...", "%")):
            if seen_content:
                return  # a second document: the loaders we track return the first
            continue
        seen_content = True
        rest = stripped
        while rest:
            if rest == "-" or rest.startswith("- "):
                while stack[-1][0] > col or (stack[-1][0] == col and stack[-1][2] == "item"):
                    stack.pop()
                parent = stack[-1][1]
                index = counters.get(parent, 0)
                counters[parent] = index + 1
                stack.append((col, _join(parent, str(index)), "item"))
                after = rest[1:]
                col += 1 + len(after) - len(after.lstrip(" "))
                rest = after.lstrip(" ")
                if not rest or rest.startswith("#"):
                    break
                continue
            m = _YAML_KEY.match(rest)
            if m is None:
                value, path = rest, stack[-1][1]  # a scalar item, or a flow item
            else:
                while stack[-1][0] >= col:
                    stack.pop()
                path = _join(stack[-1][1], _unquote(m))
                _put(found, path, lineno)
                value = rest[m.end() :].strip()
            value = _strip_comment(value).strip()
            if m is not None and (not value or (value[0] in "&!" and " " not in value)):
                stack.append((col, path, "key"))  # opens a block mapping or sequence
            elif value[:1] in ("|", ">"):
                skip_deeper = col
            elif value[:1] in ("{", "["):
                at = start + len(raw) - len(raw.lstrip(" ")) + (len(stripped) - len(rest))
                at = text.index(value[0], at + (m.end() if m else 0))
                skip_until = _scan_flow(text, at, path, line_of, found, ":")
                skip_deeper = col
            else:
                skip_deeper = col  # a plain scalar may continue on more-indented lines
            break


_TOML_PART = re.compile(r"""\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_\-]+))\s*(\.|$)""")


def _toml_parts(text: str) -> list[str]:
    parts, i = [], 0
    text = text.strip()
    while i < len(text):
        m = _TOML_PART.match(text, i)
        if m is None:
            raise ValueError(text)
        basic, literal, bare = m.group(1), m.group(2), m.group(3)
        parts.append(bare if bare is not None else literal if literal is not None else basic)
        i = m.end()
    return parts


def _scan_toml(text: str, found: dict) -> None:
    line_of = _line_of(text)
    table = ""
    arrays: dict[str, int] = {}  # array-of-tables path -> current index
    skip_until, offset = 0, 0
    part = r"""(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[A-Za-z0-9_\-]+)"""
    key_re = re.compile(rf"""\s*({part}(?:\s*\.\s*{part})*)\s*=""")
    for lineno, raw in enumerate(text.split("\n"), 1):
        start, offset = offset, offset + len(raw) + 1
        stripped = raw.strip()
        if start < skip_until or not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            is_array = stripped.startswith("[[")
            inner = stripped[2 : stripped.index("]]")] if is_array else stripped[1 : stripped.index("]")]
            parts, path = _toml_parts(inner), ""
            for j, part in enumerate(parts):  # [a.b] after [[a]] means b of the current a element
                path = _join(path, part)
                if j < len(parts) - 1 and path in arrays:
                    path = _join(path, str(arrays[path]))
            if is_array:
                arrays[path] = arrays.get(path, -1) + 1
                path = _join(path, str(arrays[path]))
            table = path
            _put(found, table, lineno)
            continue
        m = key_re.match(raw)
        if m is None:
            continue
        path = table
        for part in _toml_parts(m.group(1)):
            path = _join(path, part)
        _put(found, path, lineno)
        value_at = m.end() + len(raw[m.end() :]) - len(raw[m.end() :].lstrip())
        value = raw[value_at:]
        if value.startswith(('"""', "'''")):
            end = text.find(value[:3], start + value_at + 3)
            skip_until = len(text) if end < 0 else end
        elif value[:1] in ("[", "{"):
            skip_until = _scan_flow(text, start + value_at, path, line_of, found, "=")
