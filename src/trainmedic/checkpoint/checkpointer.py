"""``Checkpointer``: checkpoints that survive any kill, exact resume, a save before the deadline.

The loop calls ``save(step, **objects)`` at every step boundary and ``restore(**objects)`` once
before it; the Checkpointer decides which calls write (see ``schedule.py``), writes atomically
(``store.py``) and reads back (``readback.py``), captures every random stream with the objects (``rng.py``, ``state.py``), and on
SIGTERM/SIGUSR1 or near the deadline writes at the next boundary and ends the run cleanly.
Messages go to the ``trainmedic.checkpoint`` logger: INFO for a resume, WARNING for a skipped
checkpoint, a stop or an inexact resume. Under torch.distributed the ranks decide together,
rank 0 writes and every rank resumes from the same checkpoint (``ranks.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
import operator
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from trainmedic._version import __version__
from trainmedic.checkpoint import ranks as ranks_mod
from trainmedic.checkpoint import readback, rng, state, store
from trainmedic.checkpoint.preflight_log import PreflightLog
from trainmedic.checkpoint.records import CheckpointInfo, RestoreInfo, SaveInfo
from trainmedic.checkpoint.schedule import Schedule, SignalCatcher, parse_deadline, parse_every
from trainmedic.errors import CheckpointError, Preempted
from trainmedic.units import format_duration, format_seconds

logger = logging.getLogger("trainmedic.checkpoint")

_RNG = "_rng"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
#: Exit code after the deadline save: EX_TEMPFAIL, "try again" — the run is not finished.
DEADLINE_EXIT_CODE = 75


class Checkpointer:
    """Atomic, verified checkpoints of any objects, with exact resume and a deadline.

    >>> ckpt = Checkpointer("runs/exp1", keep_last=3, deadline="8h45m")
    >>> start = ckpt.restore(model=model, optimizer=opt)        # 0 when there is nothing yet
    >>> for step in range(start, total):
    ...     train_one_step()
    ...     ckpt.save(step + 1, model=model, optimizer=opt)     # writes only when due
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        keep_last: int = 3,
        every: int | float | str | None = "10m",
        deadline: Any = None,
        signals: tuple[str, ...] | list[str] = ("SIGTERM", "SIGUSR1"),
        exit_on_stop: bool = True,
        rng: bool = True,
    ) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise CheckpointError(
                f"keep_last={keep_last!r}: keep at least the newest checkpoint, e.g. keep_last=3."
            )
        if not isinstance(directory, (str, os.PathLike)) or not str(directory):
            raise CheckpointError(
                f"directory={directory!r}: give the folder for this run's checkpoints as a path, e.g. Checkpointer('runs/exp1')."
            )
        self.given_directory = Path(directory)
        self._preflight = PreflightLog.from_env()
        self.directory = (
            self._preflight.redirect(self.given_directory) if self._preflight else self.given_directory
        )
        every_steps, every_seconds = parse_every(
            every
        )  # checked under preflight too: the real run would refuse it
        if self._preflight:
            every_steps, every_seconds = 1, None  # preflight's resume check needs every call written
        deadline_at = parse_deadline(deadline, time.time(), time.monotonic())
        store.prepare_directory(self.directory)
        self.keep_last = keep_last
        self.exit_on_stop = exit_on_stop
        self.capture_rng = rng
        self.resumed: RestoreInfo | None = None
        self.last_save: SaveInfo | None = None
        self._schedule = Schedule(every_steps, every_seconds, deadline_at)
        self._phases: list[str] = []
        self._pending: tuple[int, dict[str, Any]] | None = None
        self._seq = store.next_seq(self.directory)
        self._stop_reason: str | None = None
        self._stop_signal: int | None = None  # the signal that stopped the run, on whichever rank it came
        self._stop_here = False  # whether that signal came to this process (known when the stop is decided)
        self._late_signal: int | None = None  # a signal any rank received while the last save was written
        self._ranks: ranks_mod.Ranks | None = None  # found at the first restore/save/close of a torchrun job
        self._bad: set[Path] = set()  # checkpoints restore found corrupt: dropped once a newer one is written
        # After a signal the loop has about three steps and a save to reach save(); then the signal
        # does what it would have done without trainmedic.
        # (The schedule, not self: a Checkpointer dropped without close() is freed at once, and its
        # signal handler given back with it.)
        schedule = self._schedule
        grace = lambda: 3 * schedule.step_seconds + 1.5 * schedule.save_seconds  # noqa: E731
        self._signals = SignalCatcher(signals, grace) if signals else None
        if self._preflight:
            self._preflight.emit("init", directory=str(self.given_directory), path=str(self.directory))

    # -- the loop's calls ------------------------------------------------------------------

    def save(self, step: int, phase: str | None = None, *, force: bool = False, **objects: Any) -> bool:
        """Checkpoint ``objects`` at ``step`` when a save is due; return whether it wrote.

        ``phase="name"`` marks the end of phase ``name`` and always writes. After a save asked
        for by a signal or the deadline, raises :class:`Preempted` (unless ``exit_on_stop=False``,
        then ``stopping`` is True and the loop should end).
        """
        now = time.monotonic()
        reason = self._schedule.due(step, now)
        received = self._received_here()
        coordinated = self._coordination()
        if coordinated is not None:  # every rank writes and stops at the same step (ranks.py)
            reason, received = coordinated.decide(reason, received, _whole_step(step), self._schedule, now)
        if received is not None and self._stop_reason is None:
            reason = self._stop_reason = "signal"
            self._stop_signal = received
            self._stop_here = self._received_here() is not None
            if self._signals is not None:
                self._signals.saving = True
        elif reason == "deadline":
            self._stop_reason = "deadline"  # whatever else asked for this save, the run ends after it
        elif phase is not None:
            reason = "phase"
        elif force:
            reason = "force"
        if reason is None:
            self._pending = (step, objects)  # references only: close() may still write them
            self._schedule.last_exit = now
            return False
        self._write(step, phase, objects, reason)
        if self._stop_reason is None and self._late_signal is not None:
            # The signal came while this save was writing: it already holds this step boundary.
            self._stop_reason = "signal"
            self._stop_signal = self._late_signal
            self._stop_here = self._received_here() is not None
            if self._signals is not None:
                self._signals.saving = True
        if self._stop_reason is not None and self.exit_on_stop:
            self._exit()
        return True

    def restore(self, **objects: Any) -> int:
        """Load the newest verified checkpoint into ``objects`` in place; return its step (0: none)."""
        self._check_names(objects)
        found = readback.newest_verified(self.directory)
        chosen, older, skipped = found.chosen, found.older, found.skipped
        self._bad.update(found.corrupt)
        coordinated = self._coordination()
        if coordinated is not None:
            coordinated.check_same_choice(
                chosen[1]["step"] if chosen else 0, chosen[0].path if chosen else None
            )
        if chosen is None:
            self._room_for(objects)
            self.resumed = RestoreInfo(0, None, None, (), tuple(skipped), (), tuple(objects))
            self._log_restore()
            self._schedule.last_exit = time.monotonic()  # set-up since __init__ is not a step
            return 0
        entry, manifest = chosen
        world_note = ranks_mod.check_world(entry.path, manifest, objects, self._ranks)
        sources = readback.sources(objects, chosen, older)
        loaded = {name: readback.load(path, mf, name) for name, (path, mf) in sources.items()}
        for name, saved in loaded.items():
            saved_type = sources[name][1].get("types", {}).get(name)
            state.check(name, objects[name], saved, str(sources[name][0]), saved_type)
        values, notes = {}, [world_note] if world_note else []
        for name, saved in loaded.items():
            value, note = state.apply(name, objects[name], saved, str(sources[name][0]))
            if saved.kind == state.VALUE:
                values[name] = value
            if note:
                notes.append(note)
        if self.capture_rng and f"{_RNG}.pt" in manifest["files"]:
            notes += rng.restore(
                ranks_mod.streams_of(readback.load(entry.path, manifest, _RNG).state, self._ranks, notes)
            )
        info = CheckpointInfo.from_manifest(entry.path, manifest)
        self._phases = list(info.phases_done)
        self._schedule.resumed(info.step, info.save_seconds)
        missing = tuple(name for name in objects if name not in loaded)
        unclaimed = sorted(
            name.removesuffix(".pt")
            for name in manifest["files"]
            if not name.startswith("_") and name.removesuffix(".pt") not in objects
        )
        if unclaimed:
            notes.append(
                f"the checkpoint also holds {', '.join(repr(n) for n in unclaimed)}, not passed to restore(): "
                "they stay as built; pass them too for an exact resume."
            )
        self.resumed = RestoreInfo(
            info.step,
            info.phase,
            entry.path,
            info.phases_done,
            tuple(skipped),
            tuple(loaded),
            missing,
            values,
            tuple(notes),
        )
        store.check_room(self.directory, info.bytes, "the next checkpoint")
        self._log_restore()
        self._schedule.last_exit = time.monotonic()  # the first step is timed from here, not from __init__
        return info.step

    def close(self) -> SaveInfo | None:
        """Write the last ``save()`` call if it was skipped, and give the signal handlers back."""
        written = None
        self._coordination()  # (the ranks agreed on every save, so they agree on this one too)
        if self._pending is not None and self._stop_reason is None:
            step, objects = self._pending
            if self.last_save is None or step > self.last_save.step:
                written = self._write(step, None, objects, "close")
        self._pending = None
        if self._signals is not None:
            self._signals.uninstall()
        return written

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        elif self._signals is not None:
            # After an exception the objects may be mid-step: never write them as a finished step.
            self._signals.uninstall()

    # -- questions -------------------------------------------------------------------------

    def done(self, phase: str) -> bool:
        """Whether phase ``phase`` was finished (saved with ``phase=``, here or before a resume)."""
        return phase in self._phases

    @property
    def phases_done(self) -> tuple[str, ...]:
        return tuple(self._phases)

    @property
    def stopping(self) -> bool:
        """The save a signal or the deadline asked for is written: the loop should end now.

        Not already when the signal arrives: one that lands between a skipped ``save()`` and the
        loop's check would end the run without saving the step it had just finished.
        """
        return self._stop_reason is not None

    @property
    def seconds_left(self) -> float | None:
        """Seconds until the deadline, or None without one."""
        return self._schedule.seconds_left(time.monotonic())

    def latest(self) -> CheckpointInfo | None:
        """The newest checkpoint whose files match their manifest and checksums, or None."""
        for entry in store.list_entries(self.directory):
            manifest, _ = store.verify(entry.path)
            if manifest is not None:
                return CheckpointInfo.from_manifest(entry.path, manifest)
        return None

    # -- inside ----------------------------------------------------------------------------

    def _write(self, step: int, phase: str | None, objects: dict[str, Any], reason: str) -> SaveInfo:
        started = time.perf_counter()
        step = _whole_step(step)
        if phase is not None and (not isinstance(phase, str) or not _NAME.fullmatch(phase)):
            # The phase names the checkpoint's directory: two names that only differ in characters a
            # file name cannot hold would share one, and retention would take one phase for the other.
            raise CheckpointError(
                f"phase={phase!r}: name the phase this save closes with letters, digits, '_', '-' or '.' "
                "(at most 100 characters), e.g. phase='pool'."
            )
        self._check_names(objects)
        phases = self._phases + ([phase] if phase is not None and phase not in self._phases else [])
        streams = rng.capture() if self.capture_rng else None
        ranks = self._ranks
        if ranks is None:
            info = self._write_here(step, phase, objects, reason, streams, phases, started)
            self._late_signal = self._received_here()
            return info
        if streams is not None:
            streams = ranks.gather_streams(streams)  # each rank's own dropout masks resume too
        info, error, self._late_signal = ranks.write_once(
            lambda: self._write_here(step, phase, objects, reason, streams, phases, started),
            self._received_here,
        )
        if error is not None:
            raise CheckpointError(
                f"rank 0 could not save step {step} to {self.directory}: {error}. This rank stops with it; the previous "
                "checkpoints are intact (rank 0's log has the details)."
            )
        if ranks.rank != 0:
            self._phases = phases
            self._schedule.wrote(step, info.seconds, reason)
            self._pending = None
            self.last_save = info
            logger.debug("trainmedic: rank 0 wrote %s (%s)", info, reason)
        return info

    def _write_here(
        self,
        step: int,
        phase: str | None,
        objects: dict[str, Any],
        reason: str,
        streams: Any,
        phases: list[str],
        started: float,
    ) -> SaveInfo:
        captured = {name: state.capture(obj) for name, obj in objects.items()}
        payloads: dict[str, Any] = {name: saved.state for name, saved in captured.items()}
        if streams is not None:
            payloads[_RNG] = streams
        if self.last_save is None:
            store.check_room(
                self.directory,
                sum(state.nbytes(p) for p in payloads.values()),
                f"the checkpoint of step {step}",
            )
        now = time.time()
        header = {
            "phase": phase,
            "phases_done": phases,
            "time": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"),
            "unix_time": now,
            "objects": {name: saved.kind for name, saved in captured.items()},
            "types": {name: state.type_name(obj) for name, obj in objects.items()},
            "trainmedic": __version__,
            "world_size": ranks_mod.world_size(self._ranks),
            # What cannot resume at another world size (ranks.py); empty in a 1-process run.
            "sharded": sorted(name for name, obj in objects.items() if ranks_mod.sharded(obj)),
        }
        # A process killed between publishing a checkpoint and deleting the oldest left one too
        # many: trimmed to keep_last first, so that a directory never holds more than keep_last + 1
        # complete checkpoints, however often saves are killed at that point.
        entries = store.list_entries(self.directory)
        store.remove(
            e.path
            for e in entries
            if e.path not in store.to_keep([e for e in entries if e.path not in self._bad], self.keep_last)
        )
        written = store.write_checkpoint(self.directory, self._seq, step, payloads, header)
        self._seq = written.manifest["seq"] + 1
        self._phases = phases
        self._schedule.wrote(step, written.seconds, reason)
        self._pending = None
        entries = store.list_entries(self.directory)
        healthy = [e for e in entries if e.path not in self._bad]
        keep = store.to_keep(healthy, self.keep_last) | {written.path}
        store.remove(e.path for e in entries if e.path not in keep)
        self._bad.clear()
        self.last_save = SaveInfo(step, phase, written.path, written.seconds, written.bytes, reason)
        logger.info("trainmedic: %s (%s)", self.last_save, reason)
        if self._preflight:
            digests = {name: state.digest(p) for name, p in payloads.items()}
            self._preflight.saved(
                step,
                phase=phase,
                path=str(written.path),
                seconds=written.seconds,
                bytes=written.bytes,
                digests=digests,
                started=started,
                ended=time.perf_counter(),
            )
        return self.last_save

    def _exit(self) -> None:
        saved = self.last_save
        assert saved is not None
        if self._stop_reason == "signal":
            number = self._stop_signal or self._received_here() or int(signal.SIGTERM)
            here = self._stop_here
            why, code = (
                f"{signal.Signals(number).name} received{'' if here else ' by another rank'}",
                128 + number,
            )
        else:
            deadline_in = self._schedule.seconds_left(time.monotonic()) or 0.0
            why, code = f"the deadline is {format_duration(max(deadline_in, 0.0))} away", DEADLINE_EXIT_CODE
        # The handlers stay until close() or the with block's end: under torchrun the launcher
        # SIGTERMs this rank as soon as another one exits, and that signal belongs to this stop.
        message = (
            f"trainmedic: {why}: saved step {saved.step} to {saved.path} in {format_seconds(saved.seconds)} and stopped. "
            f"Run the same command again to resume: Checkpointer.restore() continues from step {saved.step}."
        )
        logger.warning(message)
        raise Preempted(code, message, saved.step, str(saved.path))

    def _received_here(self) -> int | None:
        return self._signals.received if self._signals is not None else None

    def _coordination(self) -> ranks_mod.Ranks | None:
        # Looked for again until found: init_process_group may come after the first restore().
        if self._ranks is None:
            self._ranks = ranks_mod.Ranks.detect()
        return self._ranks

    def _room_for(self, objects: dict[str, Any]) -> None:
        # Only what holds tensors is asked for its state: a StatefulDataLoader would start its
        # workers for a state of a few bytes.
        heavy = [
            obj
            for obj in objects.values()
            if state.kind_of(obj) in (state.MODULE, state.STATE_DICT, state.VALUE)
            and not state.is_torch_loader(obj)
        ]
        needed = sum(state.nbytes(state.capture(obj).state) for obj in heavy)
        store.check_room(self.directory, needed, "a checkpoint of these objects")

    def _log_restore(self) -> None:
        info = self.resumed
        assert info is not None
        for path, reason in info.skipped:
            logger.warning("trainmedic: skipped checkpoint %s: %s", path, reason)
        for note in info.notes:
            logger.warning("trainmedic: %s", note)
        if info.path is not None:
            phases = f"; phases done: {', '.join(info.phases_done)}" if info.phases_done else ""
            logger.info("trainmedic: resuming at step %d from %s%s", info.step, info.path, phases)
            if info.missing:
                logger.info("trainmedic: not in the checkpoint, left as built: %s", ", ".join(info.missing))
        if self._preflight:
            self._preflight.emit(
                "restore",
                step=info.step,
                path=str(info.path) if info.path else None,
                skipped=[[str(p), r] for p, r in info.skipped],
            )

    @staticmethod
    def _check_names(objects: dict[str, Any]) -> None:
        bad = [name for name in objects if name.startswith("_")]
        if bad:
            raise CheckpointError(
                f"object names {bad} start with '_', which the Checkpointer keeps for its own files: rename them, e.g. "
                f"{bad[0].lstrip('_') or 'state'}=..."
            )
        odd = [name for name in objects if not _NAME.fullmatch(name)]
        if odd:
            raise CheckpointError(
                f"object names {odd} cannot name files: use letters, digits, '_', '-' or '.', at most 100 characters, "
                "e.g. save(step, model=model)."
            )


def _whole_step(step: Any) -> int:
    """Steps are whole numbers (NumPy and 0-d integer tensors included); anything else is refused."""
    try:
        value = operator.index(step)
    except TypeError:
        raise CheckpointError(
            f"step={step!r} ({type(step).__name__}): give the number of finished steps as an int, e.g. save(step + 1, ...)."
        ) from None
    if value < 0:
        raise CheckpointError(
            f"step={value}: steps count from 0; give the number of finished steps, e.g. save(step + 1, ...)."
        )
    return value
