"""A ``torch.utils.data.Dataset`` (map-style), materialised once into stacked arrays.

A per-sample ``__getitem__`` plus collate makes batch assembly about 10x slower than
pre-stacked arrays; here the dataset is walked once, front to back — through
``__getitems__`` when it has one, so a dataset that can fetch many rows in one call does — and
every epoch after that is one gather per batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from trainmedic.data.sources.base import FieldSpec, Source, check_dtype, select_fields
from trainmedic.errors import FieldError, SourceError


class DatasetSource(Source):
    """Samples may be a tensor/array/number (one field), a tuple or list (one field per position,
    named by ``fields`` or "0", "1", ...), or a dict (one field per key)."""

    kind = "dataset"
    random_access = False
    sees_changes = False
    length: int  # a map-style Dataset's len(), known from the start

    def __init__(self, dataset: Any, fields: list[str] | None = None) -> None:
        self.dataset = dataset
        name = type(dataset).__qualname__
        self.description = f"{type(dataset).__module__}.{name}"
        try:
            self.length = len(dataset)
        except TypeError:
            raise SourceError(
                f"{self.description} has no len(); data.load needs a map-style Dataset "
                f"(__getitem__ and __len__). Materialise an IterableDataset into a dict of arrays first."
            ) from None
        if self.length == 0:
            raise SourceError(f"{self.description} is empty (len 0); there is nothing to serve.")
        first = self._fetch([0])[0]
        self._layout, names = _layout(first, fields)
        specs = {}
        for key, field in zip(self._layout, names):
            value = _as_array(_pick(first, key), field, 0, self.description)
            specs[field] = FieldSpec(field, check_dtype(field, value.dtype, self.description), value.shape)
        self._keys = dict(zip(names, self._layout))
        self.specs = select_fields(
            specs, None if fields is None or not isinstance(first, dict) else fields, self.description
        )

    def fingerprint(self) -> str:
        # A Dataset cannot say whether its contents changed. Its class, length and first and last
        # samples key the cache; explain() says a change elsewhere needs the cache deleted.
        digest = hashlib.blake2b(digest_size=16)
        for row in self._fetch([0, self.length - 1]):
            for spec in self.specs:
                digest.update(
                    np.ascontiguousarray(
                        _as_array(_pick(row, self._keys[spec.name]), spec.name, 0, "")
                    ).tobytes()
                )
        return f"dataset:{self.description}:{self.length}:{digest.hexdigest()}"

    def iter_chunks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, self.length, rows):
            indices = list(range(start, min(self.length, start + rows)))
            samples = self._fetch(indices)
            chunk = {}
            for spec in self.specs:
                out = np.empty((len(indices),) + spec.shape, dtype=spec.dtype)
                key = self._keys[spec.name]
                for i, sample in enumerate(samples):
                    value = _as_array(_pick(sample, key), spec.name, start + i, self.description)
                    if value.shape != spec.shape:
                        raise FieldError(
                            f"field {spec.name!r} of sample {start + i} in {self.description} has shape "
                            f"{value.shape}, but sample 0 has {spec.shape}; every sample of a field must "
                            f"have one shape (pad or crop in the dataset)."
                        )
                    out[i] = value
                chunk[spec.name] = out
            yield chunk

    def _fetch(self, indices: Sequence[int]) -> list[Any]:
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            samples = getitems(list(indices))
            if len(samples) != len(indices):
                raise SourceError(
                    f"{self.description}.__getitems__ returned {len(samples)} samples for {len(indices)} indices; "
                    f"it must return one sample per index."
                )
            return list(samples)
        return [self.dataset[i] for i in indices]


def _layout(sample: Any, fields: list[str] | None) -> tuple[list[Any], list[str]]:
    """The keys to pick each field out of a sample, and the field names."""
    if isinstance(sample, dict):
        keys = list(sample)
        return keys, [str(k) for k in keys]
    if isinstance(sample, (tuple, list)):
        positions = list(range(len(sample)))
        if fields is not None:
            if len(fields) != len(sample):
                raise FieldError(
                    f"fields={list(fields)} names {len(fields)} fields, but the dataset's samples are "
                    f"tuples of {len(sample)}; name each position once, in order."
                )
            return positions, [str(f) for f in fields]
        return positions, [str(p) for p in positions]
    name = fields[0] if fields else "x"
    return [None], [name]


def _pick(sample: Any, key: Any) -> Any:
    return sample if key is None else sample[key]


def _as_array(value: Any, field: str, row: int, where: str) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except ValueError:
        raise FieldError(
            f"field {field!r} of sample {row} in {where} is ragged (rows of different lengths); "
            f"pad it to one shape in the dataset."
        ) from None
