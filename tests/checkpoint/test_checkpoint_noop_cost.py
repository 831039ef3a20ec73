"""A save() call that does not write costs next to nothing and never asks an object for its state."""

from __future__ import annotations

import statistics
import time

from trainmedic.checkpoint import Checkpointer

CALLS = 20_000


class Counted:
    """Counts state_dict() calls: a skipped save() must make none."""

    def __init__(self) -> None:
        self.calls = 0
        self.weights = list(range(1000))

    def state_dict(self) -> dict:
        self.calls += 1
        return {"weights": self.weights}

    def load_state_dict(self, state: dict) -> None:
        self.weights = state["weights"]


def test_a_skipped_save_is_cheap_and_asks_no_state(tmp_path):
    model, optimizer = Counted(), Counted()
    # A deadline and a time interval: the skipped call still does the deadline arithmetic.
    ckpt = Checkpointer(tmp_path, every="1h", deadline="10h", signals=("SIGTERM",))
    try:
        assert ckpt.save(1, model=model, optimizer=optimizer, extra={"lr": 0.1})  # the first call writes
        assert (model.calls, optimizer.calls) == (1, 1)
        save, clock = ckpt.save, time.perf_counter_ns
        costs = []
        for step in range(2, CALLS + 2):
            start = clock()
            written = save(step, model=model, optimizer=optimizer, extra={"lr": 0.1})
            costs.append(clock() - start)
            assert written is False
        assert (model.calls, optimizer.calls) == (1, 1), "a skipped save() asked for state_dict()"
        median_us = statistics.median(costs) / 1000
        # A behaviour bound, not a benchmark: the design target is about a microsecond.
        assert median_us < 50, f"a skipped save() costs {median_us:.1f} µs (median of {CALLS})"
        assert ckpt.save(CALLS + 2, force=True, model=model, optimizer=optimizer, extra={"lr": 0.1})
    finally:
        ckpt.close()  # gives the SIGTERM handler back; nothing is pending after the forced save
