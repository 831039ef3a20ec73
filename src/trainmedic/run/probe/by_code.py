"""A cache keyed by code object, by identity: what the sampler knows of each function.

A ``dict`` keyed by the code object itself hashes it on every lookup, and a code object's hash is
not cached: CPython rehashes its name, bytecode and constants each time (1.3 µs for torch's
``Module._call_impl``). The sampler looks up every frame of every sample, 12 to 20 of them, so
that hashing was most of a sample's cost. By identity a lookup is one pointer. Each entry keeps
its code object alive, so an id is never reused while it is cached.
"""

from __future__ import annotations

from types import CodeType
from typing import Generic, TypeVar

V = TypeVar("V")


class ByCode(Generic[V]):
    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, tuple[CodeType, V]] = {}

    def get(self, code: CodeType) -> V | None:
        entry = self._entries.get(id(code))
        return None if entry is None else entry[1]

    def __setitem__(self, code: CodeType, value: V) -> None:
        self._entries[id(code)] = (code, value)

    def __len__(self) -> int:
        return len(self._entries)
