"""Per-database query statistics for the source recorder: which SQL runs per batch, with which
parameters changing, and one peeked row to learn BLOB column sizes."""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from trainmedic.run.probe.source_facts import Column, Query
from trainmedic.userfiles import is_user_file

#: Runs of a query whose parameters are compared with the first run's.
VARYING_RUNS = 64
#: Distinct SQL texts kept per database; later texts have their literals lifted out first.
MAX_TEXTS = 16
#: Literal-lifted texts per database: past this, runs are only counted (formatted per-sample SQL).
MAX_LIFTED = 1024
PEEK_TIMEOUT_S = 0.5
#: sqlite3.connect as it was before the recorder wrapped it (the peek must not be recorded).
original_connect: Callable[..., Any] = sqlite3.connect
_SELECT = re.compile(r"^\s*(select|with)\b", re.IGNORECASE)
_LITERAL = re.compile(r"'(?:[^']|'')*'|(?<![\w.:$?%])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


class QueryStats:
    __slots__ = ("caller", "columns", "count", "lifted", "params", "text", "varying")

    def __init__(self, text: str, params: Any, lifted: bool, caller: str | None) -> None:
        self.text = text
        self.count = 0
        self.params = params
        self.varying: set = set()
        self.lifted = lifted
        self.caller = caller
        self.columns: tuple[Column, ...] = ()

    def note(self, params: Any) -> None:
        self.count += 1
        first = self.params
        if params == first:
            return
        if isinstance(first, dict) and isinstance(params, dict):
            self.varying.update(k for k in first if first.get(k) != params.get(k))
        elif isinstance(first, (tuple, list)) and isinstance(params, (tuple, list)):
            if len(first) != len(params):
                self.varying.update(range(max(len(first), len(params))))
            else:
                self.varying.update(i for i, (a, b) in enumerate(zip(first, params)) if a != b)

    def freeze(self) -> Query:
        return Query(
            self.text,
            self.count,
            self.params,
            frozenset(self.varying),
            self.lifted,
            self.caller,
            self.columns,
        )


class DatabaseStats:
    def __init__(self, url: str, via: str, sqlite_path: str | None) -> None:
        self.url = url
        self.via = via
        self.sqlite_path = sqlite_path
        self.connects = 0
        self.queries: dict[str, QueryStats] = {}
        self.lifted = 0
        self.live = True

    def run(self, sql: Any, params: Any) -> None:
        """One execution; the hot path is the lookup and the counter at the top."""
        stats = self.queries.get(sql)
        if stats is not None and stats.count >= VARYING_RUNS:
            stats.count += 1
            return
        if not self.live or not isinstance(sql, str):
            return
        params = _plain(params)
        if stats is None:
            lifted = False
            if len(self.queries) >= MAX_TEXTS and not params:
                # Many distinct texts: SQL formatted per batch. Count it by its template.
                if self.lifted >= MAX_LIFTED:
                    return
                self.lifted += 1
                sql, params = lift_literals(sql)
                lifted = True
                stats = self.queries.get(sql)
            if stats is None:
                if len(self.queries) >= 2 * MAX_TEXTS:
                    return
                stats = self.queries[sql] = QueryStats(sql, params, lifted, user_caller())
        stats.note(params)
        if (
            stats.count == 2
            and self.sqlite_path is not None
            and not stats.columns
            and _SELECT.match(stats.text)
        ):
            stats.columns = peek_sqlite(self.sqlite_path, stats.text, stats.params)


def _plain(params: Any) -> Any:
    if params is None:
        return ()
    if isinstance(params, dict):
        return dict(params)
    if isinstance(params, (tuple, list)):
        return tuple(params)
    return params


def lift_literals(sql: str) -> tuple[str, tuple]:
    """``WHERE id IN (3, 17)`` -> (``WHERE id IN (?, ?)``, (3, 17)): formatted SQL as a template."""
    values: list[Any] = []

    def lift(match: re.Match) -> str:
        token = match.group(0)
        if token.startswith("'"):
            values.append(token[1:-1].replace("''", "'"))
        else:
            values.append(float(token) if any(c in token for c in ".eE") else int(token))
        return "?"

    return _LITERAL.sub(lift, sql), tuple(values)


def peek_sqlite(path: str, sql: str, params: Any) -> tuple[Column, ...]:
    """Names and kinds of the columns of one row of ``sql`` on a read-only connection; () if not seen."""
    try:
        conn = original_connect(Path(path).as_uri() + "?mode=ro", uri=True, timeout=0.1)
    except (sqlite3.Error, ValueError):
        return ()
    deadline = time.perf_counter() + PEEK_TIMEOUT_S
    conn.set_progress_handler(lambda: time.perf_counter() > deadline, 10_000)
    try:
        cursor = conn.execute(sql, params if params else ())
        row = cursor.fetchone()
        names = [d[0] for d in cursor.description or ()]
    except (sqlite3.Error, ValueError, TypeError):
        return ()
    finally:
        conn.close()
    if row is None:
        return ()
    return tuple(
        Column(name, _kind(value), len(value) if isinstance(value, (bytes, bytearray, memoryview)) else 0)
        for name, value in zip(names, row)
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, int):  # bool included
        return "integer"
    if isinstance(value, float):
        return "real"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "blob"
    return "text"


def user_caller() -> str | None:
    frame: FrameType | None = sys._getframe(2)
    depth = 0
    while frame is not None and depth < 200:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            return os.path.abspath(filename)
        frame = frame.f_back
        depth += 1
    return None
