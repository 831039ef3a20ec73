"""The per-sample parameters of a generation job: columns of one row per sample, checked once.

Generators often keep them as a list of dicts (``batch_params: list[dict]``); a dict of arrays is the
shape a batched call wants. Both are accepted and turned into columns; whatever is ragged,
of mixed lengths or a single value is named before any work starts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainmedic.data.sources.arrays import to_numpy
from trainmedic.errors import BatchError

__all__ = ["Params", "as_params"]


@dataclass(frozen=True)
class Params:
    """Columns by name, each with ``length`` rows (NumPy arrays or torch tensors, as given)."""

    columns: dict[str, Any]
    length: int

    def rows(self, start: int, stop: int) -> dict[str, Any]:
        return {name: column[start:stop] for name, column in self.columns.items()}

    def describe(self) -> dict[str, dict]:
        """Dtype and per-sample shape of each column, for the manifest."""
        return {
            name: {"dtype": _dtype_name(c), "shape": list(c.shape[1:])} for name, c in self.columns.items()
        }

    def digest(self) -> str:
        """SHA-256 of every column's name, dtype, shape and bytes: a re-run with other params is
        another job, and its shards must not be mixed with these."""
        digest = hashlib.sha256()
        for name, column in sorted(self.columns.items()):
            array = np.ascontiguousarray(to_numpy(column))
            digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
            digest.update(array.data.cast("B"))
        return digest.hexdigest()


def as_params(params: Any) -> Params:
    """Columns from a dict of sequences/arrays/tensors, or from a list of per-sample dicts."""
    if isinstance(params, Mapping):
        columns = {}
        for name, value in params.items():
            if not isinstance(name, str):
                raise BatchError(
                    f"params has the key {name!r}, a {type(name).__name__}; parameter names are strings (the function's argument names)."
                )
            columns[name] = _column(name, value)
    elif (
        isinstance(params, Sequence)
        and not isinstance(params, (str, bytes))
        and params
        and all(isinstance(p, Mapping) for p in params)
    ):
        columns = _from_records(params)
    else:
        raise BatchError(
            f"params is a {type(params).__name__}; expected a dict of one value per sample per name "
            f"({{'freq': freqs, 'snr_db': snrs}}) or a list of per-sample dicts."
        )
    if not columns:
        raise BatchError("params is empty; give at least one parameter with one value per sample.")
    lengths = {name: int(c.shape[0]) for name, c in columns.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name}: {n}" for name, n in lengths.items())
        raise BatchError(f"params have mixed lengths ({listed}); every parameter needs one value per sample.")
    length = next(iter(lengths.values()))
    if length == 0:
        raise BatchError("params have 0 samples; give at least one.")
    return Params(columns, length)


def _column(name: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dim() == 0:
            raise _single(name, value)
        return tensor
    if isinstance(value, (str, bytes)):
        raise _single(name, value)
    try:
        array = np.asarray(value)
    except ValueError:
        raise BatchError(f"params[{name!r}] has rows of different lengths; pad them to one shape.") from None
    if array.ndim == 0:
        raise _single(name, value)
    if array.dtype.kind not in "biufc":
        raise BatchError(
            f"params[{name!r}] has dtype {array.dtype}; parameters must be numbers (ints, floats, bools, complex). "
            f"Map strings to codes first."
        )
    return array


def _from_records(records: Sequence[Mapping]) -> dict[str, Any]:
    names = list(records[0])
    for i, record in enumerate(records):
        if list(record) != names and set(record) != set(names):
            missing = sorted(set(names) - set(record))
            extra = sorted(set(record) - set(names))
            raise BatchError(
                f"params[{i}] has keys {sorted(record)} but params[0] has {sorted(names)} "
                f"(missing {missing}, extra {extra}); every sample needs the same parameters."
            )
    for name in names:
        if not isinstance(name, str):
            raise BatchError(
                f"params[0] has the key {name!r}, a {type(name).__name__}; parameter names are strings."
            )
    columns = {}
    for name in names:
        values = [record[name] for record in records]
        if all(isinstance(v, torch.Tensor) for v in values):
            try:
                columns[name] = torch.stack([v.detach() for v in values])
            except RuntimeError:
                raise BatchError(
                    f"params[i][{name!r}] has tensors of different shapes or devices; give each sample the same shape."
                ) from None
            continue
        values = [to_numpy(v) if isinstance(v, torch.Tensor) else v for v in values]
        columns[name] = _column(name, values)
    return columns


def _single(name: Any, value: Any) -> BatchError:
    return BatchError(
        f"params[{name!r}] is {value!r}, a single value; every parameter needs one value per sample. "
        f"Bind constants with functools.partial(fn, {name}=...)."
    )


def _dtype_name(column: Any) -> str:
    return str(column.dtype).replace("torch.", "")
