"""A whole generation job: batched calls, progress, a clean stop, resumable shards.

A hand-written batched generator needs all of it: 256 samples per GPU call and one copy back,
cancellation checked between batches, progress every second, incremental saves. ``generate``
does that for any per-sample function::

    from trainmedic import batch
    result = batch.generate(iq_sample, {"freq": freqs, "snr_db": snrs}, out="iq/", seed=0)
    loader = trainmedic.data.load("iq/", batch_size=256)   # the shards, as one dataset

The job is a pipeline: the caller's thread makes a shard's calls (on CUDA their outputs go to
pinned host buffers on a side stream, ``host.py``) while one background thread writes the
previous shard (``writer.py``); ``stages.py`` says where the time went and whether the disk
held the job back. Sizing runs the function on 8 and 64 real samples (``measure.py``): no
fake-tensor trace, so a small job no longer pays seconds of imports (torch._dynamo, sympy).

Ctrl+C or SIGTERM lets the call in flight finish, writes its shard, and ends the process with
:class:`~trainmedic.errors.Preempted` (exit code 128 + the signal); running the same call again
resumes at the first missing shard, and the folder ends byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from trainmedic.batch.host import CpuShards, CudaShards, HostShard
from trainmedic.batch.identity import function_digest
from trainmedic.batch.measure import call_peaks
from trainmedic.batch.params import Params, as_params
from trainmedic.batch.shards import ShardStore
from trainmedic.batch.sizing import Sizing, choose_batch_size, free_bytes, shard_size_for
from trainmedic.batch.stages import Stages, bottleneck
from trainmedic.batch.vectorize import VMAP, Vectorized, vectorize, whole_number
from trainmedic.batch.writer import ShardWriter
from trainmedic.data.materialize import progress_for
from trainmedic.data.sources.arrays import to_numpy
from trainmedic.errors import BatchError, Preempted

__all__ = ["Generated", "generate"]

#: A stop is told here (WARNING): the library never prints, and a SystemExit carries no text.
logger = logging.getLogger("trainmedic.batch")

_PROBE_SAMPLES = 8
#: Shards waiting for the writer: one is enough to keep it busy while the next is made.
_WRITER_DEPTH = 1
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass
class Generated:
    """What a generation job did; ``out`` is ready for ``trainmedic.data.load``."""

    out: Path
    samples: int
    fields: list[str]
    #: Samples per batched call.
    batch_size: int
    #: Samples per shard file (whole calls).
    shard_size: int
    #: "vmap" (one call per batch) or "loop" (sample by sample; ``reason`` says why).
    mode: str
    reason: str | None
    shards: int
    shards_written: int
    #: True when earlier shards were found in ``out`` and kept.
    resumed: bool
    seconds: float
    sizing: str
    notes: list[str] = field(default_factory=list)
    #: Seconds per stage (generate, copy, write, waited; see ``batch/stages.py``): generating
    #: and writing overlap, so they need not add up to ``seconds``.
    stages: dict[str, float] = field(default_factory=dict)
    #: "generate" or "write": the stage that set the job's pace.
    bottleneck: str = "generate"

    @property
    def samples_per_second(self) -> float:
        written = min(self.samples, self.shards_written * self.shard_size)
        return written / self.seconds if self.seconds > 0 else 0.0


def generate(
    fn: Callable[..., Any],
    params: Any,
    out: str | Path,
    *,
    batch_size: int | Literal["auto"] = "auto",
    shard_size: int | Literal["auto"] = "auto",
    seed: int = 0,
    format: str = "npy",
    device: Any = "auto",
    keep_params: bool = True,
    progress: Any = None,
) -> Generated:
    """Run ``fn`` over every sample of ``params`` in batched calls, into shards under ``out``.

    ``fn``: a per-sample function whose arguments are named like the params (plus ``rng``, a
    :class:`~trainmedic.batch.Rng`, when it draws random numbers); it returns a tensor, a tuple or
    a dict of tensors. ``params``: a dict of one value per sample per name, or a list of
    per-sample dicts. ``batch_size``: samples per call, or "auto" (from the memory one sample
    needs and what is free). ``shard_size``: samples per shard file, or "auto" (whole calls,
    about 64 MiB of output); a stop signal waits for the shard in progress. Both are fixed when
    the job begins and kept by a resumed run. ``format``: "npy", "hdf5" or "zarr".
    ``keep_params``: store the params beside the outputs (the labels of a synthetic dataset).
    ``progress``: None draws a bar on a terminal; False never; or an object with
    ``start(description, total)``, ``advance(n)``, ``stop()``, and optionally ``describe(text)``,
    which gets the rate and the stages' seconds after every shard (``Generated.stages``).
    """
    started = time.perf_counter()
    columns = as_params(params)
    seed = whole_number("seed", seed)
    for name, value in (("batch_size", batch_size), ("shard_size", shard_size)):
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise BatchError(f"{name}={value!r}; expected a positive int or 'auto'.")
    vf = vectorize(fn)
    _check_arguments(vf, columns)
    target = _device(device)
    job = _job(vf, columns, seed, keep_params, target)
    chosen: dict[str, Sizing] = {}

    def layout() -> tuple[int, int]:
        sizing = _size(vf, columns, batch_size, target, seed)
        chosen["sizing"] = sizing
        if shard_size == "auto":
            return sizing.shard_size, sizing.batch_size
        return min(shard_size, columns.length), sizing.batch_size

    store = ShardStore(out, job, columns.length, layout, format)
    sizing_line = (
        chosen["sizing"].why
        if "sizing" in chosen
        else f"{store.batch_size} samples per call, {store.shard_size} per shard, as when the job began"
    )
    todo = store.missing()
    if todo and vf.mode is None:
        # A resumed job skipped the sizing probe: vmap or loop is settled here, outside the
        # shards' seeded generator, so a shard's global draws match the uninterrupted run's.
        _probe(vf, columns, target, seed)
    bar = progress_for(progress, unit="samples")
    stages = Stages()
    host = CudaShards(target, store.shard_size, _WRITER_DEPTH) if target.type == "cuda" else CpuShards()
    writer = ShardWriter(store.write, stages, _WRITER_DEPTH)
    describe = getattr(bar, "describe", None)  # optional: a progress object that shows a status line
    catcher = _catch_stop_signals()
    try:
        bar.start(f"{vf.name}, {store.batch_size} per call", columns.length)
        bar.advance(columns.length - sum(_rows_in(store, i) for i in todo))
        for index in todo:
            start, stop = store.bounds(index)
            shard = _run_shard(
                vf,
                columns,
                start,
                stop,
                store.batch_size,
                seed,
                target,
                index,
                keep_params,
                bar,
                host,
                stages,
            )
            writer.put(shard)  # written in the background while the next shard is made
            if callable(describe):
                describe(stages.short())
            if catcher is not None and catcher.received is not None and index != todo[-1]:
                catcher.saving = True  # the watchdog waits: the last shards are being written
                writer.close()
                _stop(
                    catcher,
                    store,
                    stop,
                    f"stopped after shard {index} ({stop} of {columns.length} samples in "
                    f"{store.out}); run the same generate() call again to resume at the next shard.",
                )
        writer.close()
        store.finish()
        if catcher is not None and catcher.received is not None:
            # Asked to stop during the last shard: the job is whole, and the process still stops
            # rather than going on (into training, say) as if nothing had been asked.
            _stop(catcher, store, columns.length, f"the job in {store.out} is complete; stopping as asked.")
    except Exception as exc:
        # The shards handed over are whole and good: written, a resume starts after them.
        failed = writer.shut()
        # add_note is 3.11's: on 3.10 the job's own error goes up without the note.
        if failed is not None and failed not in (exc, exc.__cause__) and sys.version_info >= (3, 11):
            exc.add_note(f"the background writer had failed too: {failed}")
        raise
    except BaseException:
        writer.shut(drop_waiting=True)  # a second Ctrl+C, say: now, but no shard left half-written
        raise
    finally:
        bar.stop()
        if catcher is not None:
            catcher.uninstall()
    seconds = stages.snapshot()
    line = stages.line()
    logger.info("%s: %d samples, %s", vf.name, stages.samples, line)
    notes = list(vf.notes)
    if bottleneck(seconds) == "write" and writer.written > 1:
        notes.append(line)
    if store.resumed:
        notes.append(
            f"resumed: {store.shard_count - len(todo)} of {store.shard_count} shards were already in {store.out}"
        )
    return Generated(
        out=store.out,
        samples=columns.length,
        fields=list(store.manifest["fields"] or {}),
        batch_size=store.batch_size,
        shard_size=store.shard_size,
        mode=vf.mode or "not run (every shard was already written)",
        reason=vf.reason,
        shards=store.shard_count,
        shards_written=writer.written,
        resumed=store.resumed,
        seconds=time.perf_counter() - started,
        sizing=sizing_line,
        notes=notes,
        stages=seconds,
        bottleneck=bottleneck(seconds),
    )


# -- one shard --------------------------------------------------------------------------------


def _run_shard(
    vf: Vectorized,
    columns: Params,
    start: int,
    stop: int,
    batch_size: int,
    seed: int,
    device: torch.device,
    index: int,
    keep_params: bool,
    bar: Any,
    host: CpuShards | CudaShards,
    stages: Stages,
) -> HostShard:
    shard = host.begin(index, stop - start)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        # A function that draws from torch's global generator still gets the same numbers for
        # this shard on every run (shard and call sizes are fixed by the job), so resumes stay exact.
        torch.manual_seed(_shard_seed(seed, index))
        for first in range(start, stop, batch_size):
            last = min(first + batch_size, stop)
            began = time.perf_counter()
            shard.call_started()
            inputs = {
                name: _to_device(value, device, vf) for name, value in columns.rows(first, last).items()
            }
            named = _named_leaves(vf(**inputs, seed=seed, start=first), vf.name)
            made = time.perf_counter()
            shard.add(first - start, named)
            if host.host_timed:
                stages.add("generate", made - began)
                stages.add("copy", time.perf_counter() - made)
            stages.samples += last - first
            bar.advance(last - first)
    done, copy_seconds = shard.finish()
    stages.add("copy", copy_seconds)
    if keep_params:
        for name, value in columns.rows(start, stop).items():
            if name in done.arrays:
                done.release()
                raise BatchError(
                    f"{vf.name} returns an output named {name!r}, which is also a param; rename the output, "
                    f"or pass keep_params=False."
                )
            done.arrays[name] = to_numpy(value)
    return done


def _named_leaves(output: Any, name: str) -> dict[str, Any]:
    """One tensor (or array) per named output, checked: flat, with names like identifiers."""
    if isinstance(output, dict):
        named = dict(output)
    elif isinstance(output, (tuple, list)):
        named = {f"output_{i}": value for i, value in enumerate(output)}
    else:
        named = {"output": output}
    leaves_by_name = {}
    for key, value in named.items():
        key = str(key)
        if not _FIELD_NAME.match(key):
            raise BatchError(
                f"{name} returns an output named {key!r}; output names must be like identifiers (letters, digits, _)."
            )
        leaves, _ = tree_flatten(value)
        if len(leaves) != 1 or isinstance(value, (dict, list, tuple)):
            raise BatchError(
                f"{name}'s output {key!r} is nested; return a tensor, a tuple or a flat dict of tensors."
            )
        leaves_by_name[key] = leaves[0]
    return leaves_by_name


def _named_outputs(output: Any, name: str) -> dict[str, np.ndarray]:
    """The outputs as host arrays (the probe's view of them)."""
    return {key: to_numpy(value) for key, value in _named_leaves(output, name).items()}


def _to_device(value: Any, device: torch.device, vf: Vectorized) -> Any:
    if vf.numpy and not isinstance(value, torch.Tensor):
        return value  # a NumPy function gets NumPy rows
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    return tensor.to(device, non_blocking=False)


def _shard_seed(seed: int, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


# -- set-up -----------------------------------------------------------------------------------


def _size(
    vf: Vectorized, columns: Params, batch_size: int | Literal["auto"], device: torch.device, seed: int
) -> Sizing:
    """Run the first few samples for real (this settles vmap or loop and the outputs' sizes),
    then size the call: an int as given, or "auto" from the peaks of two more real calls."""
    arrays = _probe(vf, columns, device, seed)
    output_bytes = sum(a.nbytes for a in arrays.values()) // min(_PROBE_SAMPLES, columns.length)
    if batch_size != "auto":
        size = min(batch_size, columns.length)
        return Sizing(
            size, shard_size_for(size, output_bytes, columns.length), f"{size} samples per call, as asked"
        )
    looped = vf.mode != VMAP
    peaks = None if looped else call_peaks(vf, columns, device, seed)
    return choose_batch_size(peaks, output_bytes, columns.length, device, free_bytes(device), looped=looped)


def _probe(vf: Vectorized, columns: Params, device: torch.device, seed: int) -> dict[str, np.ndarray]:
    """The first few samples for real, outside any shard's seeded generator: settles vmap or loop
    and shows the outputs' names, dtypes and sizes."""
    rows = columns.rows(0, min(_PROBE_SAMPLES, columns.length))
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        output = vf(**{k: _to_device(v, device, vf) for k, v in rows.items()}, seed=seed, start=0)
    return _named_outputs(output, vf.name)


def _check_arguments(vf: Vectorized, columns: Params) -> None:
    reserved = [name for name in columns.columns if name in ("seed", "start", "rng")]
    if reserved:
        raise BatchError(
            f"params name {reserved}, which a batched call keeps for itself (the job's seed, the first sample's "
            f"index, the per-sample random stream); rename them."
        )
    try:
        signature = inspect.signature(vf.fn)
    except (TypeError, ValueError):
        return
    positional = [n for n, p in signature.parameters.items() if p.kind == p.POSITIONAL_ONLY]
    if positional:
        raise BatchError(
            f"{vf.name} takes {positional} by position only, but generate() passes each param by its name; "
            f"make them ordinary arguments (drop the '/')."
        )
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    names = set(signature.parameters)
    unknown = [n for n in columns.columns if n not in names and not accepts_any]
    if unknown:
        raise BatchError(
            f"params name {unknown} but {vf.name}{signature} has no such argument; name the params like "
            f"the function's arguments."
        )
    missing = [
        n
        for n, p in signature.parameters.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and n not in columns.columns
        and n != "rng"
    ]
    if missing:
        raise BatchError(
            f"{vf.name} needs {missing}, which params does not give; add them, or bind them with functools.partial."
        )


def _job(vf: Vectorized, columns: Params, seed: int, keep_params: bool, device: torch.device) -> dict:
    """What makes two runs the same job: a re-run with any of it changed must not reuse shards."""
    fn = vf.fn
    return {
        "function": f"{getattr(fn, '__module__', None) or type(fn).__module__}.{vf.name}",
        "source_sha256": function_digest(fn),
        "params_sha256": columns.digest(),
        "params": columns.describe(),
        "samples": columns.length,
        "seed": seed,
        "keep_params": keep_params,
        # The same code rounds differently on a GPU: a job begun on one is finished on one.
        "device": device.type,
    }


def _device(device: Any) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise BatchError(
            f"device={device!r} is not a device; use 'auto', 'cpu', 'cuda' or 'cuda:N'."
        ) from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise BatchError(
            f"device={device!r} but this machine has no CUDA device; use device='auto' or 'cpu'."
        )
    if resolved.type not in ("cpu", "cuda"):
        raise BatchError(f"device={device!r}: generate() runs on 'cpu' or 'cuda'.")
    return resolved


def _stop(catcher: Any, store: ShardStore, step: int, what: str) -> None:
    """End the process as the signal asked, once what was asked is saved (checkpoint.Preempted)."""
    catcher.saving = True
    message = f"trainmedic: {catcher.name}: {what}"
    logger.warning(message)
    raise Preempted(128 + catcher.received, message, step=step, path=str(store.out))


def _rows_in(store: ShardStore, index: int) -> int:
    start, stop = store.bounds(index)
    return stop - start


def _catch_stop_signals():
    from trainmedic.checkpoint.schedule import SignalCatcher

    # SIGINT as well as SIGTERM: Ctrl+C at a terminal is how a user cancels. A
    # second signal a second or more after the first acts at once, as it would without trainmedic;
    # the watchdog does the same if a shard takes ten minutes after the first.
    catcher = SignalCatcher(("SIGINT", "SIGTERM"), grace=lambda: 600.0, repeat_window=1.0)
    return catcher if catcher.installed else None
