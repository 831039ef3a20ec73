"""``tune``: measure a build target over batch size × precision × memory format × compile.

The search is staged so that a budget buys the informative configurations first:

1. every precision's batch ladder, eager, default memory format: powers of two up to the
   largest batch the plan says fits (and that batch), a rung at a time, stopping a ladder once
   two rungs in a row are no faster than the best below them (a bandwidth-bound step can get slower with a bigger batch);
2. the other memory format (``channels_last[_3d]``) on the two fastest configurations so far;
3. ``torch.compile`` on the two fastest configurations so far.

``exhaustive=True`` measures the whole product instead. Configurations the plan says do not fit
are never run (no OOM on purpose); they are reported as skipped with the plan's numbers.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainmedic.errors import PlanError, TrainmedicError, TuneError
from trainmedic.roofline.place import roofline
from trainmedic.tune.budget import Budget, OutOfTime
from trainmedic.tune.ceilings import device_ceilings
from trainmedic.tune.counting import count_step
from trainmedic.tune.explain import explain
from trainmedic.tune.grid import (
    batch_ladder,
    check_batches,
    check_memory_formats,
    check_precisions,
    default_precisions,
    inspect_build,
    resolve_device,
)
from trainmedic.tune.measure import measure
from trainmedic.tune.model import Config, Row, TuneResult
from trainmedic.tune.step import TrainingStep, tf32
from trainmedic.tune.ties import pick_best
from trainmedic.units import format_bytes, format_duration

#: A rung must beat the best smaller batch by this much to count as faster.
RISE = 0.05
#: Later stages try their variant on this many of the fastest configurations so far.
FINALISTS = 2
CUDA_ON_CPU = (
    'the build names CUDA (.cuda(), .to("cuda"), device="cuda"); measured on the CPU, those tensors '
    "were put on the CPU, as trainmedic plan does"
)


@dataclass
class Callbacks:
    """What the caller hears while the search runs (the CLI draws a progress bar from it)."""

    started: Callable[[Config], None] = lambda config: None
    finished: Callable[[Row, TuneResult], None] = lambda row, result: None


def tune(
    build: Callable[[int], Any],
    *,
    target: str = "build",
    device: str = "auto",
    batch_sizes: Sequence[int] | None = None,
    precisions: Sequence[str] | None = None,
    compile: Sequence[bool] = (False, True),
    memory_formats: Sequence[str] | None = None,
    budget_s: float | None = None,
    trials: int = 5,
    min_trial_s: float = 0.3,
    current_batch: int | None = None,
    exhaustive: bool = False,
    headroom: float = 0.1,
    capacity: int | str | None = None,
    callbacks: Callbacks | None = None,
    started_at: float | None = None,
) -> TuneResult:
    """Measure samples/s of real training steps of ``build(batch_size)`` over a grid; pick the fastest.

    ``device``: "auto" (CUDA when present), "cpu", "cuda", "cuda:1". ``batch_sizes`` replaces the
    ladder (all measured, none skipped for being slow). ``current_batch``: the batch the user
    trains with now (fp32, eager); the gain is reported against it, else against fp32 eager at
    the largest batch that fits. ``budget_s`` bounds the whole search, counted from ``started_at``
    (a ``time.monotonic()`` reading; default: now; the CLI passes its process's start), planning
    and compiling included (see budget.py); Ctrl+C ends it early. Either way the result holds
    what was measured. The plan skips batches that do not fit the device's free memory
    (``capacity``, bytes or "8GiB", replaces it) less ``headroom``.
    """
    from trainmedic.plan.planner import check_headroom, parse_capacity

    check_headroom(headroom)
    capacity_bytes = parse_capacity(capacity) if capacity is not None else None
    budget = Budget(budget_s, started_at if started_at is not None else time.monotonic())
    search = _Search(
        build=build,
        target=target,
        device=resolve_device(device),
        trials=trials,
        min_trial_s=min_trial_s,
        headroom=headroom,
        budget=budget,
        callbacks=callbacks or Callbacks(),
        capacity_bytes=capacity_bytes,
    )
    search.check(batch_sizes, precisions, compile, memory_formats, current_batch)
    try:
        # The alarm bounds what no check between runs can: planning, a compile, a slow step.
        with budget.alarm():
            search.prepare(memory_formats)
            if exhaustive:
                search.exhaustive()
            else:
                search.staged()
    except KeyboardInterrupt:
        search.result.stopped_early = (
            f"stopped by Ctrl+C after {len(search.result.measured)} measured configurations"
        )
    except (_BudgetSpent, OutOfTime):
        search.result.stopped_early = (
            f"the budget of {format_duration(budget_s or 0)} ran out after "
            f"{len(search.result.measured)} measured configurations"
        )
        if search.in_flight is not None:
            search.result.stopped_early += f" (stopped while measuring {search.in_flight.label})"
    return search.finish()


class _BudgetSpent(Exception):
    pass


@dataclass(kw_only=True)
class _Search:
    build: Callable[[int], Any]
    target: str
    device: torch.device
    trials: int
    min_trial_s: float
    headroom: float
    budget: Budget
    callbacks: Callbacks
    capacity_bytes: int | None = None
    result: TuneResult = field(init=False)
    #: Seconds each eager configuration took to measure: the shortest is what the next one needs.
    run_seconds: list[float] = field(default_factory=list)
    in_flight: Config | None = None
    limits: dict[str, int | None] = field(default_factory=dict)
    costs: dict[tuple[int, str], Any] = field(default_factory=dict)
    explicit_batches: list[int] | None = None
    precisions: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    compile_options: list[bool] = field(default_factory=list)
    current: Config | None = None

    def check(self, batch_sizes, precisions, compile, memory_formats, current_batch) -> None:
        # Every typo is refused before the slow part (importing, tracing, measuring the roofs).
        self.result = TuneResult(self.target, _describe(self.device), None, budget_s=self.budget.seconds)
        if self.trials < 3:
            raise TuneError(
                f"trials={self.trials}: at least 3 trials are needed to see the noise; e.g. --trials 5."
            )
        self.explicit_batches = check_batches(batch_sizes) if batch_sizes else None
        if precisions:
            self.precisions = check_precisions(precisions, self.device)
        self.compile_options = list(dict.fromkeys(bool(c) for c in compile)) or [False]
        if memory_formats is not None:
            self.formats = check_memory_formats(memory_formats)
        if current_batch is not None:
            check_batches([current_batch])
            self.current = Config(current_batch, "fp32")

    def prepare(self, memory_formats) -> None:
        """The slow part before any measurement: the batch axis, the roofs, the memory plans."""
        conv_format = inspect_build(self.build)
        if memory_formats is None:
            self.formats = ["contiguous", conv_format] if conv_format else ["contiguous"]
        ceilings = self.result.ceilings = device_ceilings(str(self.device))
        if not self.precisions:
            # A GPU's measured rates are not its tensor-core rates (catalog ones are); a CPU's are the
            # only evidence of an fp16 fast path.
            known = ceilings.source == "catalog" or self.device.type == "cpu"
            self.precisions = default_precisions(self.device, ceilings.peak_flops if known else None)
        if self.device.type == "cpu":
            self.result.notes.append(
                f"CPU threads: {torch.get_num_threads()}; a step's speed here depends on what else the machine runs"
            )
        for precision in self.precisions:
            same_memory = (
                "fp32" if precision == "tf32" and "fp32" in self.limits else None
            )  # tf32 stores fp32
            self.limits[precision] = self.limits[same_memory] if same_memory else self._max_batch(precision)

    # -- the two orders -------------------------------------------------------------------

    def staged(self) -> None:
        for precision in self.precisions:
            self._ladder(precision)
        if self.current is not None and self.result.row(self.current) is None:
            self._run(self.current)
        for fmt in self.formats[1:]:
            for config in self._finalists():
                self._run(config.replace(memory_format=fmt))
        if True in self.compile_options:
            for config in self._finalists():
                self._run(config.replace(compile=True))

    def exhaustive(self) -> None:
        for precision in self.precisions:
            batches = self._batches(precision)
            for batch, fmt, compiled in itertools.product(batches, self.formats, self.compile_options):
                self._run(Config(batch, precision, compiled, fmt))
        if self.current is not None and self.result.row(self.current) is None:
            self._run(self.current)

    def _ladder(self, precision: str) -> None:
        start = self.formats[0]
        base_compile = False not in self.compile_options
        best, slower = 0.0, 0
        for batch in self._batches(precision):
            row = self._run(Config(batch, precision, base_compile, start))
            if self.explicit_batches is not None or row.status != "measured":
                if row.status == "failed" and "out of memory" in (row.reason or ""):
                    break
                continue
            speed = row.samples_per_s or 0.0
            slower = slower + 1 if speed < best * (1 + RISE) else 0
            best = max(best, speed)
            if slower >= 2:
                rest = [b for b in self._batches(precision) if b > batch]
                if rest:
                    named = ", ".join(map(str, rest)) if len(rest) <= 4 else f"{rest[0]} to {rest[-1]}"
                    self.result.notes.append(
                        f"{precision}: batches {named} not measured: two batches in a row were no faster "
                        f"than a smaller one (samples/s stopped rising)"
                    )
                break

    def _batches(self, precision: str) -> list[int]:
        limit = self.limits.get(precision)
        if self.explicit_batches is not None:
            for batch in self.explicit_batches:
                if limit is not None and batch > limit:
                    self._skip(
                        Config(batch, precision, False, self.formats[0]), self._does_not_fit(batch, precision)
                    )
            return [b for b in self.explicit_batches if limit is None or b <= limit]
        return batch_ladder(limit)

    def _finalists(self) -> list[Config]:
        measured = sorted(self.result.measured, key=lambda r: -(r.samples_per_s or 0.0))
        return [r.config for r in measured[:FINALISTS]]

    # -- one configuration ----------------------------------------------------------------

    def _run(self, config: Config) -> Row:
        existing = self.result.row(config)
        if existing is not None:
            return existing
        limit = self.limits.get(config.precision)
        if limit is not None and (config.batch_size or 0) > limit:
            return self._skip(config, self._does_not_fit(config.batch_size or 0, config.precision))
        # Not started when it cannot finish: it needs at least what the quickest run so far took
        # (a compile's first run is not known in advance; the alarm bounds it).
        if not self.budget.allows(min(self.run_seconds, default=0.0)) or self.budget.spent():
            raise _BudgetSpent
        self.callbacks.started(config)
        self.in_flight, started = config, time.monotonic()
        row = self._measure(config, self.budget.deadline)
        self.in_flight = None
        if row.status == "measured" and not config.compile:
            self.run_seconds.append(time.monotonic() - started)
        self.result.rows.append(row)
        self.callbacks.finished(row, self.result)
        return row

    def _measure(self, config: Config, deadline: float | None) -> Row:
        step = None
        if config.compile:
            torch._dynamo.reset()  # a fresh compile: no graphs, guards or dynamic shapes from another configuration
        try:
            with tf32(config.precision == "tf32") if self.device.type == "cuda" else contextlib.nullcontext():
                step = TrainingStep(self.build, config, self.device)
                if step.cuda_on_cpu and CUDA_ON_CPU not in self.result.notes:
                    self.result.notes.append(CUDA_ON_CPU)
                measurement = measure(
                    step, trials=self.trials, min_trial_s=self.min_trial_s, deadline=deadline
                )
        except torch.cuda.OutOfMemoryError as exc:
            return Row(
                config,
                "failed",
                reason=f"out of memory at run time although the plan said it fits: {_first_line(exc)}",
            )
        except PlanError as exc:
            if not self.result.measured:
                raise  # build(batch_size) itself is broken: no configuration can run
            return Row(config, "failed", reason=str(exc))
        except TuneError as exc:
            return Row(config, "failed", reason=str(exc))
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is a row, not the end
            return Row(config, "failed", reason=f"{type(exc).__name__}: {_first_line(exc)}{_user_line(exc)}")
        finally:
            del step
            if config.compile:
                torch._dynamo.reset()
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        seconds_per_step = (config.batch_size or 1) / measurement.samples_per_s
        try:
            cost = self._cost(config)
        except OutOfTime:  # measured, but the roofline's trace did not finish: keep the speed
            self.result.warnings.append(
                f"no roofline for {config.label}: the budget ran out while counting its FLOPs and bytes"
            )
            return Row(config, "measured", measurement)
        line = (
            roofline(cost, self.result.ceilings, config.precision, seconds_per_step)
            if cost and self.result.ceilings
            else None
        )
        return Row(config, "measured", measurement, line)

    def _cost(self, config: Config):
        key = (config.batch_size or 1, config.precision)
        if key not in self.costs:
            try:
                self.costs[key] = count_step(
                    self.build, key[0], "fp32" if key[1] == "tf32" else key[1], self._plan_device()
                )
            except TrainmedicError as exc:
                self.costs[key] = None
                self.result.warnings.append(f"no roofline for batch {key[0]} {key[1]}: {exc}")
        return self.costs[key]

    def _skip(self, config: Config, reason: str) -> Row:
        row = self.result.row(config)
        if row is None:
            row = Row(config, "skipped", reason=reason)
            self.result.rows.append(row)
        return row

    # -- memory ---------------------------------------------------------------------------

    def _max_batch(self, precision: str) -> int | None:
        from trainmedic.plan import plan_memory

        plan = plan_memory(
            self.build,
            device=self._plan_device(),
            capacity=self._free_bytes(),
            precision=precision,
            headroom=self.headroom,
            max_batch=True,
            measure_growth=False,  # only the batch is read: no hotspot is shown
        )
        if plan.max_batch == 0:
            self.result.warnings.append(
                f"{precision}: the plan says even batch 1 does not fit ({format_bytes(plan.required_bytes)} needed)"
            )
        return plan.max_batch

    def _does_not_fit(self, batch: int, precision: str) -> str:
        from trainmedic.plan import plan_memory

        limit = self.limits.get(precision)
        usable = int(self._free_bytes() * (1 - self.headroom))
        try:  # one more trace, on fake tensors, for the number the user will ask for
            if self.budget.spent():
                raise TuneError("no time left to trace it")
            needed = plan_memory(
                self.build,
                batch,
                device=self._plan_device(),
                capacity=self._free_bytes(),
                precision=precision,
                headroom=self.headroom,
                measure_growth=False,
            ).required_bytes
            need = f"needs {format_bytes(needed)}"
        except TrainmedicError:
            need = "does not fit"
        return (
            f"the plan says batch {batch} {need}, more than the {format_bytes(usable)} usable; "
            f"the largest {precision} batch that fits is {limit}"
        )

    def _plan_device(self):
        from trainmedic.devices import get_device
        from trainmedic.errors import DeviceError
        from trainmedic.plan.planner import custom_device

        if self.device.type != "cuda":
            return get_device("cpu")
        name = torch.cuda.get_device_name(self.device)
        try:
            return get_device(name)
        except DeviceError:
            return custom_device(torch.cuda.get_device_properties(self.device).total_memory)

    def _free_bytes(self) -> int:
        if self.capacity_bytes is not None:
            return self.capacity_bytes
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free)
        import psutil

        from trainmedic.data.choose import cgroup_headroom

        # A container's limit, not the host's free memory: past it the OOM killer ends the search.
        return int(min(psutil.virtual_memory().available, cgroup_headroom()))

    # -- the answer -----------------------------------------------------------------------

    def finish(self) -> TuneResult:
        result = self.result
        result.elapsed_s = time.monotonic() - self.budget.started_at
        result.baseline, result.baseline_source = self._baseline()
        result.best, result.ties = pick_best(result.measured, result.baseline)
        above = [
            r
            for r in result.measured
            if r.roofline and r.roofline.achieved_flops > 1.05 * r.roofline.peak_flops
        ]
        if above and result.ceilings is not None and result.ceilings.source == "measured":
            top = max(
                above, key=lambda r: r.roofline.achieved_flops / r.roofline.peak_flops if r.roofline else 0.0
            )
            assert top.roofline is not None  # every row of `above` has one
            result.warnings.append(
                f"{top.config.label} reached {top.roofline.achieved_flops / 1e9:,.0f} GFLOP/s, above the measured "
                f"{top.config.precision} peak of {top.roofline.peak_flops / 1e9:,.0f}: the ceilings were measured while the "
                "machine was busier; delete the ceilings.json under ~/.cache/trainmedic to measure them again"
            )
        explain(result, self.limits)
        return result

    def _baseline(self) -> tuple[Config | None, str]:
        if self.current is not None:
            row = self.result.row(self.current)
            if row is not None and row.status == "measured":
                return self.current, "your current configuration (--current)"
        fp32 = [
            r
            for r in self.result.measured
            if r.config.precision == "fp32"
            and not r.config.compile
            and r.config.memory_format == "contiguous"
        ]
        if not fp32:
            return None, ""
        largest = max(fp32, key=lambda r: r.config.batch_size or 0)
        limit = self.limits.get("fp32")
        if limit is not None and largest.config.batch_size == limit:
            return largest.config, "fp32 eager at the largest batch that fits (the usual choice)"
        return largest.config, "fp32 eager at the largest batch measured"


def _describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return "cpu"


def _user_line(exc: BaseException) -> str:
    from trainmedic.plan.trace import user_line_of

    return user_line_of(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
