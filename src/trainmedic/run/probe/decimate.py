"""A bounded record of a run of any length: keep every ``stride``-th step, doubling the stride.

A 10-hour job with a million steps keeps at most ``capacity`` records, evenly spread over the
whole run, so medians, the first-vs-last-quarter growth and the timeline stay representative
while the watcher's memory stays flat.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Decimator(Generic[T]):
    def __init__(self, capacity: int = 2048) -> None:
        if capacity < 2:
            raise ValueError(f"capacity={capacity!r}; expected at least 2")
        self.capacity = capacity
        self.stride = 1
        self._items: list[tuple[int, T]] = []

    def add(self, index: int, item: T) -> None:
        """Record ``item`` for step ``index``; indices must increase."""
        if index % self.stride:
            return
        self._items.append((index, item))
        if len(self._items) > self.capacity:
            self.stride *= 2
            self._items = [(i, x) for i, x in self._items if i % self.stride == 0]

    def clear(self) -> None:
        self._items.clear()

    def items(self) -> list[tuple[int, T]]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)
