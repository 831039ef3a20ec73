"""How one object's state becomes a file and back: torch.save or pickle 5, hashed on the way out."""

from __future__ import annotations

import hashlib
import pickle
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_PARALLEL_HASH = 1 << 20  # below this a thread hand-off costs more than it saves


class HashingWriter:
    """A file wrapper that hashes what passes through, so a save never reads its bytes back.

    A large chunk is hashed on a helper thread while the file write of the same chunk runs
    (both release the GIL), and write() returns only when both are done: the caller may free
    or reuse the buffer right after (torch hands over temporary CPU copies of CUDA storages).
    SHA-256 alone took 0.86 s of a 2.9 s save of 1 GiB when it ran in line.
    """

    def __init__(self, handle: Any, pool: ThreadPoolExecutor) -> None:
        self._handle = handle
        self._hash = hashlib.sha256()
        self._pool = pool
        self.bytes = 0
        #: The file system's own error, kept: torch's C++ writer turns it into a RuntimeError
        #: ("unexpected pos ..."), which would read as an object that cannot be saved.
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        try:
            if len(view) >= _PARALLEL_HASH:
                hashed = self._pool.submit(self._hash.update, view)
                try:
                    self._handle.write(view)
                finally:
                    hashed.result()
            else:
                self._hash.update(view)
                self._handle.write(view)
        except OSError as exc:
            self.error = exc
            raise
        self.bytes += len(view)
        return len(view)

    def flush(self) -> None:
        self._handle.flush()

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


def serializer(payload: Any) -> str:
    """torch.save for a state holding torch tensors, pickle (protocol 5) for everything else.

    Each writes its own kind of array without a copy in memory: torch.save streams tensor
    storages, pickle 5 hands NumPy buffers to the file. Crossed, both copy — plain pickle copies a
    tensor's storage, torch.save a NumPy array (+544 MB for 100 MB of arrays) — so a NumPy sample
    pool is pickled even when torch is loaded.
    """
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and _holds_tensor(payload, torch.Tensor, 0) else "pickle"


def _holds_tensor(value: Any, tensor: type, depth: int) -> bool:
    if isinstance(value, tensor):
        return True
    if depth > 8:
        return False
    if isinstance(value, dict):
        return any(_holds_tensor(v, tensor, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v, tensor, depth + 1) for v in value)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return any(_holds_tensor(v, tensor, depth + 1) for v in vars(value).values())
    return False


def dump(payload: Any, handle: Any, kind: str) -> None:
    if kind == "torch":
        import torch
        from torch import serialization

        # The manifest's SHA-256 already covers every byte: torch's own per-record CRC-32 would
        # be a second full pass (0.45 s of a 2.9 s save of 1 GiB, benchmarks/checkpoint_save.py).
        # torch.load reads files written either way.
        crc32 = serialization.get_crc32_options() if hasattr(serialization, "get_crc32_options") else None
        if crc32:
            serialization.set_crc32_options(False)
        try:
            torch.save(payload, handle)
        finally:
            if crc32:
                serialization.set_crc32_options(True)
    else:
        # Protocol 5 hands NumPy buffers to the file without an in-memory copy.
        pickle.dump(payload, handle, protocol=5)


def load_file(path: Path, kind: str, mmap: bool = False) -> Any:
    """Read one object's file.

    ``mmap=True`` suits states that are copied into place (a module's parameters): the file's
    pages are read once and dropped. Not for optimizer states, which keep the loaded tensors:
    they would stay copy-on-write pages of a file that retention later deletes (the disk space
    held for the whole run, and a slower first step).
    """
    if kind == "torch":
        import torch

        # weights_only=False: a checkpoint also holds optimizer/scheduler states and NumPy RNG
        # states; like torch.load itself, only restore checkpoints you trust.
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    with open(path, "rb") as handle:
        return pickle.load(handle)
