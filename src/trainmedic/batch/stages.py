"""Where a generation job's time goes: generating, copying to the host, writing shards.

Generating runs in the caller's thread, writing in a background one, so the stages overlap and
their seconds do not add up to the wall time. The slower of the two threads sets the pace:
when the writer was busy longer than the generator (generate + copy), the disk is the
bottleneck, and a faster generator would not make the job end sooner. ``waited`` is the time
the generator sat idle because the writer's queue was full, the symptom a user sees.
"""

from __future__ import annotations

import threading
import time

__all__ = ["STAGES", "Stages", "bottleneck", "describe"]

#: generate: the batched calls; copy: outputs to host arrays (CUDA: device-to-pinned copies);
#: write: shard files written and fsync'ed (background thread); waited: the generator blocked
#: on a full writer queue, or on the last writes at the end.
STAGES = ("generate", "copy", "write", "waited")


class Stages:
    """Seconds per stage, added from both threads."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.samples = 0
        self._started = time.perf_counter()
        self._lock = threading.Lock()

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] += seconds

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seconds)

    @property
    def wall(self) -> float:
        return time.perf_counter() - self._started

    def line(self) -> str:
        return describe(self.snapshot(), self.samples, self.wall)

    def short(self) -> str:
        """The stages in a few words, for a progress bar's status column."""
        seconds = self.snapshot()
        text = (
            f"gen {seconds['generate']:.1f} s, copy {seconds['copy']:.1f} s, write {seconds['write']:.1f} s"
        )
        return text + "; the disk sets the pace" if bottleneck(seconds) == "write" else text


def bottleneck(seconds: dict[str, float]) -> str:
    """ "write" when the writer thread was busy longer than the generating one, else "generate"."""
    return "write" if seconds["write"] > seconds["generate"] + seconds["copy"] else "generate"


def describe(seconds: dict[str, float], samples: int, wall: float) -> str:
    """One line for progress and the log: the rate, each stage's seconds, and the verdict."""
    rate = samples / wall if wall > 0 else 0.0
    text = (
        f"{rate:,.0f} samples/s; generate {seconds['generate']:.2f} s, copy {seconds['copy']:.2f} s, "
        f"write {seconds['write']:.2f} s in the background"
    )
    if bottleneck(seconds) == "write":
        return (
            f"{text}; writing shards is the bottleneck (the generator waited {seconds['waited']:.2f} s for it): "
            f"a faster disk for out=, or fewer or smaller outputs, would speed the job up, a faster generator would not"
        )
    return f"{text}; generating is the bottleneck, writing keeps up"
