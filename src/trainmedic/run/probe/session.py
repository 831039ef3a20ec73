"""A watch session: the step clock, hooks, stack sampler and op census, started and stopped together.

``WatchSession.stop()`` returns :class:`Measurements`, the raw material ``diagnose`` turns into a
Report. Only one session can be active at a time (``trainmedic.step()`` finds it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from trainmedic.errors import WatchError
from trainmedic.run.probe import device as device_probe
from trainmedic.run.probe.census import Census, OpCensus
from trainmedic.run.probe.clock import LOOP, MARKER, StepClock
from trainmedic.run.probe.collectives import CollectiveStats, CollectiveTimer
from trainmedic.run.probe.confirm import Confirmation, Experiment
from trainmedic.run.probe.device_busy import DeviceBusy, DeviceBusyProbe
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.hooks import TorchHooks
from trainmedic.run.probe.keras_hooks import KerasHooks
from trainmedic.run.probe.loops import LoopWatch
from trainmedic.run.probe.op_costs import OpCostCounter, OpCosts
from trainmedic.run.probe.recorder import Aggregate, Recorder
from trainmedic.run.probe.sampler import DEFAULT_INTERVAL_S, StackSampler
from trainmedic.run.probe.source_facts import Sources
from trainmedic.run.probe.sources import SourceRecorder
from trainmedic.run.probe.sync_waits import SyncWaits, SyncWaitTimer
from trainmedic.run.probe.worker_items import ItemProfile, profile_items
from trainmedic.run.report.model import DeviceInfo

DEFAULT_WARMUP = 3  # step 0 (allocator, autotuning, lazy init) and two op-census steps


@dataclass
class Measurements:
    wall_s: float
    setup_s: float
    step_source: str | None
    warmup: int
    steady_steps: int
    durations: list[tuple[int, float]]
    warmup_durations: list[float]
    cpu_durations: list[tuple[int, float]]
    steady: Aggregate
    warm: Aggregate
    setup: Aggregate
    per_step: list[tuple[int, list[float]]]
    ops_by_function: dict[str, int]
    census_steps: int
    device: DeviceInfo
    sampler_interval_s: float
    samples: int
    sampler_busy_s: float
    notes: list[str] = field(default_factory=list)
    #: The files, databases and datasets the script read its data from (see probe/sources.py).
    sources: Sources = field(default_factory=Sources)
    #: Seconds each steady step waited in collectives (DDP all-reduce, dist.* calls): torchrun ranks.
    collectives: CollectiveStats = field(default_factory=CollectiveStats)
    #: With no step source of its own, the loop whose iterations were counted as steps
    #: (``train.py:42``, see probe/loops.py), or why no loop could be timed.
    loop: str | None = None
    loop_problem: str | None = None
    #: ``--steps N``: the run was to stop after N steady-state steps.
    max_steps: int | None = None
    #: CUDA runs only: steady-state time inside .item()/.cpu()/synchronize... per user line
    #: (probe/sync_waits.py), and the census steps' FLOPs and bytes per op (probe/op_costs.py).
    sync_waits: SyncWaits = field(default_factory=SyncWaits)
    op_costs: OpCosts = field(default_factory=OpCosts)
    #: The user's own torch calls per function and line, and this machine's call floor
    #: (probe/census.py): what decides tiny_ops, and data from compute in plain user code.
    census: Census = field(default_factory=Census)
    #: CUDA runs only: the GPU's own busy time over the census steps (probe/device_busy.py),
    #: which tells a device-bound model from one waiting on its launches.
    device_busy: DeviceBusy = field(default_factory=DeviceBusy)
    #: A DataLoader with worker processes: one item's cost, fetched here after the run, and the
    #: user's code it was spent in (probe/worker_items.py); None without such a loader.
    worker_items: ItemProfile | None = None
    #: Per steady step, wall and CPU seconds from the model's first call to the step's end
    #: (probe/clock.py): the exact split of a step into its batch preparation and its model.
    model_durations: list[tuple[int, tuple[float, float]]] = field(default_factory=list)
    #: ``trainmedic attach``: how the stacks were read from outside (py-spy, its rate); None for
    #: a run trainmedic started. No hooks, census or timers ran: their fields stay empty.
    outside: str | None = None
    #: After the window of a diagnosis-only run: the top finding's fix tried for a few more
    #: steps (probe/confirm.py), or why it was not; None where no confirmation was asked for.
    confirmation: Confirmation | None = None


#: Given the window's measurements, the experiment to run before the run stops, or a
#: Confirmation that says why there is none (diagnose/confirmed.py builds both).
Confirmer = Callable[[Measurements], "Experiment | Confirmation | None"]


_active: WatchSession | None = None
_active_lock = threading.Lock()


def active_session() -> WatchSession | None:
    return _active


class WatchSession:
    def __init__(
        self,
        warmup: int = DEFAULT_WARMUP,
        max_steps: int | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        cwd: str | None = None,
        sync_cuda_steps: bool = True,
        find_loops: bool = False,
        confirm: Confirmer | None = None,
    ) -> None:
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps={max_steps!r}; expected a positive number of steps, or None")
        self.clock = StepClock(warmup=warmup, max_steps=max_steps)
        self.recorder = Recorder(warmup=warmup)
        self.classifier = FrameClassifier(cwd=cwd)
        self.sampler = StackSampler(self.clock, self.recorder, self.classifier, interval=interval)
        self.hooks = TorchHooks(self.clock)
        self.keras = KerasHooks(self.clock, self.hooks.batch_sizes)  # fit steps; one batch-size count
        self.collectives = CollectiveTimer(self.clock)
        self.sources = SourceRecorder()
        self.census = OpCensus(self.classifier, start_step=1, steps=max(warmup - 1, 0))
        self._census_source: str | None = None  # the step source the census counts steps of
        self._census_restarts = 0
        self.nvml: device_probe.NvmlSampler | None = None
        self.sync_cuda_steps = sync_cuda_steps
        self.find_loops = find_loops
        self.loop_watch: LoopWatch | None = None
        self.sync_timer: SyncWaitTimer | None = None
        self._started_at: float | None = None
        self._measurements: Measurements | None = None
        #: The window's measurements, taken when --steps N was reached and a confirmation follows.
        self._window: Measurements | None = None
        self._confirm = confirm
        self.experiment: Experiment | None = None
        self.confirmation: Confirmation | None = None
        #: The run ended while the confirmation was still running (its fix may be why).
        self.confirmation_cut_short = False
        if confirm is not None and max_steps is not None:
            self.clock.on_limit = self._start_confirmation

    def start(self) -> WatchSession:
        global _active
        with _active_lock:
            if _active is not None:
                raise WatchError(
                    "a trainmedic watch is already running (trainmedic run, or an outer trainmedic.watch()); "
                    "mark steps with trainmedic.step() inside it instead of starting a second one"
                )
            _active = self
        self._started_at = time.perf_counter()
        self.hooks.on_install.append(lambda torch: self.clock.listeners.append(self._on_step))
        self.hooks.on_install.append(self.collectives.install)
        self.hooks.install()
        self.keras.install()
        self.sources.install()
        if self.find_loops:
            self.loop_watch = self.sampler.loop_watch = LoopWatch(self.clock, self.classifier)
        self.sampler.start()
        return self

    def step(self) -> None:
        """An explicit step boundary (``trainmedic.step()``)."""
        self.clock.boundary(MARKER)

    def _on_step(self, index: int) -> None:
        if self.loop_watch is not None and self.clock.source != LOOP:
            self.loop_watch.clock.untrace()  # a real step source took over (main thread, as the tracer)
        if index == 1 and not self.classifier.cuda and device_probe.cuda_in_use():
            self.classifier = _with_cuda(self.classifier)
            self.sampler.classifier = self.classifier
            self.census.classifier = self.classifier
            if self.sync_cuda_steps:
                import torch

                self.clock.before_boundary = torch.cuda.synchronize
            self._start_gpu_measurements()
            if device_probe.nvml_wanted() and self.nvml is None:
                self.nvml = device_probe.NvmlSampler()
                self.nvml.start()
        if self.clock.source != self._census_source or self.clock.restarts != self._census_restarts:
            # A better step source took over, or the loop clock moved to another loop.
            self._census_source, self._census_restarts = self.clock.source, self.clock.restarts
            self._restart_census()
        if self.census.end_step > self.census.start_step:
            self.census.on_step(index)

    def _restart_census(self) -> None:
        """A better step source took over (the first optimizer step after the iterations of a
        set-up loop, or a Keras model's build): ops counted per step of the old one say nothing
        about the new steps, so the census counts again over the new source's warm-up."""
        old = self.census
        if not old.started:
            return
        old.stop()
        self.census = OpCensus(
            self.classifier, start_step=old.start_step, steps=old.end_step - old.start_step
        )
        if old.costs is not None:
            self.census.costs = OpCostCounter()
        if old.busy is not None:
            self.census.busy = DeviceBusyProbe()

    def _start_gpu_measurements(self) -> None:
        # After before_boundary took the unwrapped torch.cuda.synchronize: the step boundary's
        # own wait is not the user's. The FLOP/byte count runs with the census (warm-up only).
        import torch

        clock = self.clock
        self.sync_timer = SyncWaitTimer(self.classifier, counting=lambda: clock.index >= clock.warmup)
        self.sync_timer.install(torch)
        self.census.costs = OpCostCounter()
        self.census.busy = DeviceBusyProbe()

    def _start_confirmation(self) -> Callable[[float], bool] | None:
        """--steps N reached: measure the window as stop() would, then try the top finding's fix."""
        assert self._confirm is not None  # on_limit is only set with a confirmer
        self._window = self._measure_window(time.perf_counter())
        try:
            planned = self._confirm(self._window)
        except Exception as exc:  # noqa: BLE001 - on the user's training thread: a failure here must not end the run
            self.confirmation = Confirmation(
                category="",
                where=None,
                problem=f"the confirmation could not be set up ({type(exc).__name__}: {exc})",
            )
            return None
        if isinstance(planned, Confirmation):
            self.confirmation = planned
            return None
        if planned is None:
            return None
        self.experiment = planned
        return self._confirmation_step

    def _confirmation_step(self, seconds: float) -> bool:
        assert self.experiment is not None  # the clock calls this only while one runs
        done = self.experiment.step(seconds)
        if done:
            self.confirmation = self.experiment.result
        return done

    def _measure_window(self, ended: float) -> Measurements:
        """Stop the sampling probes and read what they measured; the step clock's hooks stay."""
        self.sampler.stop()
        self.census.stop()
        if self.sync_timer is not None:
            self.sync_timer.uninstall()
        if self.nvml is not None:
            self.nvml.stop()
        self.recorder.close()
        sources = self.sources.snapshot(model_batch=self.hooks.batch_size())
        worker_items = None
        if self.sources.worker_loader is not None and self.clock.index > self.clock.warmup:
            # After the sampler stopped: none of this is the script's time.
            dataset, workers, batch = self.sources.worker_loader
            worker_items = profile_items(dataset, self.classifier, workers, batch)
        self.sources.worker_loader = None  # the dataset is the script's to free
        clock, recorder = self.clock, self.recorder
        setup_end = clock.first_boundary_t if clock.first_boundary_t is not None else ended
        return Measurements(
            wall_s=ended - (self._started_at or ended),
            setup_s=setup_end - (self._started_at or ended),
            step_source=clock.source,
            warmup=clock.warmup,
            steady_steps=max(clock.index - clock.warmup, 0),
            durations=clock.durations.items(),
            warmup_durations=list(clock.warmup_durations),
            cpu_durations=clock.cpu_durations.items(),
            model_durations=clock.model_durations.items(),
            steady=recorder.steady,
            warm=recorder.warm,
            setup=recorder.setup,
            per_step=recorder.per_step.items(),
            ops_by_function=self.census.ops_by_function,
            census_steps=self.census.steps_counted,
            device=device_probe.describe(self.nvml),
            sampler_interval_s=self.sampler.interval,
            samples=self.sampler.samples,
            sampler_busy_s=self.sampler.busy_seconds,
            sources=sources,
            collectives=self.collectives.stats(),
            loop=self.loop_watch.loop.where if self.loop_watch and self.loop_watch.loop else None,
            loop_problem=self.loop_watch.problem if self.loop_watch else None,
            max_steps=clock.max_steps,
            sync_waits=self.sync_timer.snapshot() if self.sync_timer is not None else SyncWaits(),
            op_costs=self.census.costs.snapshot() if self.census.costs is not None else OpCosts(),
            census=self.census.snapshot(),
            device_busy=self.census.busy.result if self.census.busy is not None else DeviceBusy(),
            worker_items=worker_items,
        )

    def stop(self) -> Measurements:
        global _active
        if self._measurements is not None:
            return self._measurements
        if self._started_at is None:
            raise WatchError("stop() called on a watch session that was never started")
        ended = time.perf_counter()
        if self.loop_watch is not None:
            self.loop_watch.stop()
        if self.experiment is not None and self.confirmation is None:
            # The script ended (or was stopped) before the confirmation's last block.
            self.confirmation_cut_short = True
            self.confirmation = self.experiment.finish()
        self.clock.on_limit = self.clock.overtime = None
        self.hooks.uninstall()
        self.keras.uninstall()
        self.collectives.uninstall()
        self.sources.uninstall()
        measurements = self._window if self._window is not None else self._measure_window(ended)
        with _active_lock:
            if _active is self:
                _active = None
        measurements.confirmation = self.confirmation
        self._measurements = measurements
        return measurements


def _with_cuda(classifier: FrameClassifier) -> FrameClassifier:
    # Line rules for sync and transfer only apply when the job really uses a GPU.
    return FrameClassifier(cwd=classifier._cwd, cuda=True)
