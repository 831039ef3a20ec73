"""The exact ``data.load(...)`` call that serves the batches a data-bound script waited for.

Built from what ``probe/sources.py`` saw the script open: the SQLite file or database URL and
the query it ran per batch, the HDF5 file and the datasets it read, the ``.npy`` files or Zarr
store, or the Dataset its DataLoader wrapped. Whatever could not be known is left as a
``<...>`` placeholder, which cannot run as it stands, and said in ``notes``: the call is meant
to be pasted, so it never guesses silently.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainmedic.run.diagnose.sql import whole_table_query
from trainmedic.run.probe.source_facts import Database, DatasetUse, FileUse, Hdf5File, Query, Sources

#: More .npy files than this, all read per step, are one file per sample: no one call fits them.
MAX_NPY_FIELDS = 16

_FROMBUFFER = re.compile(r"frombuffer\s*\(")
_DTYPE = re.compile(r"^\s*(?:dtype\s*=\s*)?(?:np\.|numpy\.)?[\"']?(?P<dtype>[A-Za-z]+\d*)[\"']?\s*$")


@dataclass(frozen=True)
class Suggestion:
    #: Python source, one call: ``data.load(...)``.
    call: str
    #: Field names in the order the loader yields them (for ``for x, y in loader``).
    fields: tuple[str, ...] = ()
    #: What the user must check or fill in, and what was changed from their per-batch read.
    notes: tuple[str, ...] = ()
    #: True when the call has a ``<...>`` placeholder to fill in.
    placeholder: bool = False


@dataclass
class _Call:
    source: str
    kwargs: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fields: tuple[str, ...] = ()
    placeholder: bool = False

    def build(self) -> Suggestion:
        args = ", ".join([self.source] + [f"{k}={v}" for k, v in self.kwargs])
        return Suggestion(f"data.load({args})", self.fields, tuple(self.notes), self.placeholder)


def suggest(kind: str, sources: Sources | None, device: str = "cpu") -> Suggestion | None:
    """The call for a ``data`` finding of ``kind``, or None when the sources do not tell one."""
    if sources is None:
        return None
    if kind == "database":
        call = _database(sources)
    elif kind == "hdf5":
        call = _hdf5(sources)
    elif kind == "zarr":
        call = _zarr(sources)
    elif kind == "disk":
        call = _numpy(sources)
    elif kind == "batch preparation":
        # Only files read again and again (or mapped) are the batches' source, not a stats file.
        call = _numpy(sources, repeated=True) or _hdf5(sources, repeated=True)
    elif kind in ("loader", "collate"):
        call = None if sources.loaders else _dataset(sources)
    elif kind == "transform":
        call = _numpy(sources, repeated=True) or _hdf5(sources, repeated=True) or _zarr(sources)
        if call is not None:
            call.notes.append(
                "data.load reads each sample once and caches it: apply the per-sample random "
                "augmentation to each batch as tensor ops after loading, not in __getitem__."
            )
    else:
        call = None
    if call is None:
        return None
    _batch_size(call, sources)
    if device == "cuda":
        call.kwargs.append(("device", '"cuda"'))
    return call.build()


# -- one builder per source --------------------------------------------------------------------


def _database(sources: Sources) -> _Call | None:
    best: tuple[Database, Query] | None = None
    for db in sources.databases:
        if db.url.endswith(":memory:"):
            continue  # an in-memory database lives and dies with the script's connection
        for query in db.queries:
            if _is_select(query.text) and (best is None or query.count > best[1].count):
                best = (db, query)
    if best is None:
        return None
    db, query = best
    derived = whole_table_query(query, tuple(q for q in db.queries if q is not query))
    call = _Call(_py(db.url))
    if "***" in db.url:
        call.notes.append("Put the password back into the URL (it is masked here).")
    if derived.text is None:
        call.kwargs.append(("query", _py("<fill in: one SELECT that returns every training row>")))
        call.placeholder = True
        call.notes.append(
            f"Fill in query=: the per-batch query cannot be rewritten ({derived.problem}); it was: {_oneline(query.text)}"
        )
        return call
    call.kwargs.append(("query", _py(derived.text)))
    if not derived.exact:
        call.placeholder = True
        call.notes.append(f"Fill in the WHERE clause: {derived.problem}.")
    if derived.changes:
        call.notes.append(
            f"Dropped the per-batch {_and(derived.changes)}: data.load reads the rows once and shuffles every epoch itself."
        )
    if derived.carried:
        call.notes.append(f"Kept `{' AND '.join(derived.carried)}` from the query that listed the ids.")
    elif derived.selectors:
        call.notes.append(
            "If the ids came from a subset of the table (a split), add its condition as a WHERE clause."
        )
    selected = list(query.columns)
    call.fields = tuple(c.name for c in selected)
    schema = []
    for column in selected:
        if column.kind != "blob":
            continue
        dtype = _decoded_dtype(query.caller)
        if dtype is None or column.nbytes % np.dtype(dtype).itemsize:
            schema.append(f"{_py(column.name)}: {_py('<dtype>')}")
            call.placeholder = True
            call.notes.append(
                f'Fill in the dtype of BLOB column {column.name!r} ({column.nbytes} bytes a row), e.g. "float32".'
            )
        else:
            schema.append(
                f"{_py(column.name)}: ({_py(dtype)}, ({column.nbytes // np.dtype(dtype).itemsize},))"
            )
    if schema:
        call.kwargs.append(("schema", "{" + ", ".join(schema) + "}"))
    elif not query.columns:
        call.notes.append(
            'A BLOB/bytea column needs schema={"name": ("float32", (n,))}: its dtype and shape.'
        )
    return call


def _hdf5(sources: Sources, repeated: bool = False) -> _Call | None:
    files = [f for f in sources.hdf5 if f.datasets] or list(sources.hdf5)
    if repeated:
        files = [f for f in files if sum(n for _, n in f.datasets) > 1 or f.opens > 1]
    if not files:
        return None
    best: Hdf5File = max(files, key=lambda f: (sum(n for _, n in f.datasets), f.opens))
    call = _Call(_py(best.path))
    if best.datasets:
        names = tuple(name for name, _ in best.datasets)
        call.kwargs.append(("fields", "[" + ", ".join(_py(n) for n in names) + "]"))
        call.fields = names
    else:
        call.notes.append("Without fields=, every dataset whose first axis is the sample axis is served.")
    return call


def _zarr(sources: Sources) -> _Call | None:
    if not sources.zarr:
        return None
    store: FileUse = max(sources.zarr, key=lambda f: f.count)
    return _Call(_py(store.path))


def _numpy(sources: Sources, repeated: bool = False) -> _Call | None:
    files = [f for f in sources.numpy if f.count > 1 or f.mapped or not repeated]
    if not files:
        return None
    if len(files) == 1:
        return _Call(_py(files[0].path), fields=(Path(files[0].path).stem,))
    if len(files) > MAX_NPY_FIELDS:
        return None  # one file per sample: stacking them is the fix, not a call
    folders = {os.path.dirname(f.path) for f in files}
    stems = [Path(f.path).stem for f in files]
    if len(folders) == 1 and len(set(stems)) == len(stems):
        folder = folders.pop()
        call = _Call(_py(folder), fields=tuple(stems))
        call.kwargs.append(("fields", "[" + ", ".join(_py(s) for s in stems) + "]"))
        return call
    return None


def _dataset(sources: Sources) -> _Call | None:
    if not sources.datasets:
        return None
    use: DatasetUse = max(sources.datasets, key=lambda d: d.length or 0)
    if use.variable is not None:
        call = _Call(use.variable)
    else:
        name = use.type_name.rsplit(".", 1)[-1]
        call = _Call(f"{name}(<fill in: its arguments>)", placeholder=True)
        call.notes.append(f"Pass your {name} instance (the one your DataLoader wraps).")
    if use.batch_size is not None:
        call.kwargs.append(("batch_size", str(use.batch_size)))
    return call


# -- helpers -----------------------------------------------------------------------------------


def _batch_size(call: _Call, sources: Sources) -> None:
    if any(k == "batch_size" for k, _ in call.kwargs):
        return
    if sources.model_batch:
        call.kwargs.append(("batch_size", str(sources.model_batch)))


def _is_select(sql: str) -> bool:
    return bool(re.match(r"\s*(select|with)\b", sql, re.IGNORECASE))


def _decoded_dtype(caller: str | None) -> str | None:
    """The one dtype the caller's file decodes BLOBs with (``np.frombuffer(b, dtype=np.float32)``)."""
    if caller is None:
        return None
    try:
        text = Path(caller).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = set()
    for match in _FROMBUFFER.finditer(text):
        args = _arguments(text, match.end())
        named = [a for a in args if a.lstrip().startswith("dtype")]
        if not named and len(args) == 1:
            found.add("float64")  # frombuffer's default dtype
            continue
        for arg in named or args[1:2]:
            decoded = _DTYPE.match(arg)
            if decoded is None:
                continue
            try:
                found.add(np.dtype(decoded.group("dtype")).name)
            except TypeError:
                continue
    return found.pop() if len(found) == 1 else None


def _arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` ends just before ``start``."""
    args: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text[start : start + 2000]:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            args.append("".join(current))
            current = []
            continue
        current.append(char)
    args.append("".join(current))
    return args


def _py(text: str) -> str:
    """A Python string literal in double quotes."""
    return json.dumps(text, ensure_ascii=False)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _oneline(sql: str, width: int = 160) -> str:
    text = re.sub(r"\(\s*\?(?:\s*,\s*\?)+\s*\)", "(...)", " ".join(sql.split()))
    return text if len(text) <= width else text[: width - 1] + "…"
