"""In-memory sources: a dict of NumPy arrays or torch tensors, and ``.npy`` files on disk."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.data.sources.base import (
    FieldSpec,
    Source,
    check_dtype,
    check_same_length,
    select_fields,
)
from trainmedic.errors import FieldError, SourceError


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


class ArraySource(Source):
    """A dict of arrays (NumPy arrays, memory-maps or torch tensors), one per field.

    Tensors stay tensors: a dict of CUDA tensors is served by the vram tier without a round trip
    through the host."""

    kind = "dict"
    random_access = True
    length: int  # the fields' common length, known from the start

    def __init__(
        self,
        arrays: dict[str, Any],
        fields: list[str] | None = None,
        description: str = "dict of arrays",
        kind: str = "dict",
    ) -> None:
        if not arrays:
            raise FieldError(
                "the dict given to data.load is empty; it needs one array per field, e.g. {'x': x, 'y': y}."
            )
        self.description = description
        self.kind = kind
        self._arrays: dict[str, Any] = {}
        specs: dict[str, FieldSpec] = {}
        for name, value in arrays.items():
            if not isinstance(name, str):
                raise FieldError(
                    f"field name {name!r} is a {type(name).__name__}; field names must be strings."
                )
            if not _is_tensor(value):
                value = _as_array(name, value, description)
            if len(value.shape) == 0:
                raise FieldError(
                    f"field {name!r} in {description} is a scalar; each field needs one row per sample."
                )
            dtype = _numpy_dtype(value)
            specs[name] = FieldSpec(
                name, check_dtype(name, dtype, description), tuple(int(d) for d in value.shape[1:])
            )
            self._arrays[name] = value
        self.specs = select_fields(specs, fields, description)
        self.length = check_same_length(
            {s.name: int(self._arrays[s.name].shape[0]) for s in self.specs}, description
        )

    @property
    def nbytes(self) -> int:  # never None here: the length is known from the start
        return self.length * self.sample_bytes

    def array(self, field: str) -> Any:
        """The stored array or tensor itself (tiers use it without copying when they can)."""
        return self._arrays[field]

    def fingerprint(self) -> str:
        # In-memory data has no identity across processes: the disk tier keys a dict on all of
        # its bytes (already in RAM; hashing runs at ~1 GB/s, once per load with tier="disk").
        digest = hashlib.blake2b(digest_size=16)
        for spec in self.specs:
            data = _host_bytes(self._arrays[spec.name])
            digest.update(f"{spec.describe()}:{len(data)}".encode())
            digest.update(data)
        return f"dict:{digest.hexdigest()}"

    def cache_identity(self) -> str:
        return self.fingerprint() if type(self) is ArraySource else self.description

    def iter_chunks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, self.length, rows):
            yield {s.name: to_numpy(self._arrays[s.name][start : start + rows]) for s in self.specs}

    def read(self, field: str, indices: np.ndarray, out: np.ndarray) -> None:
        value = self._arrays[field]
        if _is_tensor(value):
            import torch

            out[...] = value[torch.from_numpy(indices).to(value.device)].cpu().numpy()
        elif value.dtype == out.dtype:
            np.take(value, indices, axis=0, out=out)
        else:  # a big-endian array: converted to the native order of `out`
            out[...] = np.take(value, indices, axis=0)


class NumpySource(ArraySource):
    """A ``.npy`` file (one field named after the file, or one per name of a structured dtype)
    or a folder of ``.npy`` files, one field per file. Files are memory-mapped, never loaded."""

    kind = "numpy"

    def __init__(self, path: str | os.PathLike, fields: list[str] | None = None) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            files = sorted(self.path.glob("*.npy"))
            if not files:
                raise SourceError(
                    f"folder {str(self.path)!r} has no .npy files; expected one .npy file per field."
                )
            arrays = {f.stem: _open_npy(f) for f in files}
        else:
            array = _open_npy(self.path)
            if array.dtype.names:
                arrays = {name: array[name] for name in array.dtype.names}
            else:
                arrays = {self.path.stem: array}
        super().__init__(arrays, fields, description=str(self.path), kind="numpy")
        self._files = [self.path] if self.path.is_file() else sorted(self.path.glob("*.npy"))

    def fingerprint(self) -> str:
        parts = [str(self.path.resolve())]
        for f in self._files:
            st = f.stat()
            parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
        return "numpy:" + "|".join(parts)


def _open_npy(path: Path) -> np.ndarray:
    if not path.exists():
        raise SourceError(f"{str(path)!r} does not exist; expected a .npy file or a folder of .npy files.")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise SourceError(
            f"{str(path)!r} is not a NumPy .npy array file ({exc}); save it with np.save."
        ) from None


def _as_array(name: str, value: Any, where: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except ValueError:
        raise FieldError(
            f"field {name!r} in {where} has rows of different lengths (ragged); pad them to one shape "
            f"or store them as a flat array plus offsets."
        ) from None


def _numpy_dtype(value: Any) -> np.dtype:
    if _is_tensor(value):
        import torch

        try:
            return torch.empty(0, dtype=value.dtype).numpy().dtype
        except TypeError:
            raise FieldError(
                f"a tensor of dtype {value.dtype} has no NumPy equivalent; convert it first, e.g. .float()."
            ) from None
    return value.dtype


def to_numpy(value: Any) -> np.ndarray:
    """A tensor, array or sequence as a host NumPy array; bfloat16, which NumPy lacks, widened to
    float32 (``trainmedic.batch`` hashes and stores such values; data.load refuses them first)."""
    if _is_tensor(value):
        value = value.detach()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def _host_bytes(value: Any) -> memoryview:
    return np.ascontiguousarray(to_numpy(value)).data.cast("B")
