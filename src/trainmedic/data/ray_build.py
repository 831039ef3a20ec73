"""``data.build_cache``: the disk tier's cache of a big source, built by Ray tasks over its partitions.

The serial build (``data.load(..., tier="disk")``) decodes a source front to back in one process;
for a source whose decoding takes hours (gzip'd HDF5, a big query) that one core is the limit.
Here Ray runs one task per partition (``partitions.py`` decides the split); each task opens the
source itself and ``pwrite``s its rows straight into field files preallocated in a ``.tmp-``
folder (``partition_write.py``), so no rows travel through Ray's object store. The driver then
completes the block CRCs, writes the manifest and renames the folder into place only when every
partition succeeded — the same folder, files and manifest the serial build writes, so a later
``data.load(..., tier="disk")`` maps it without building again. A failed partition removes the
folder and raises an error naming the partition: nothing half-built is ever published.

Ray schedules; this module only partitions, bounds the tasks in flight to ``workers`` and
collects CRCs. A Ray the caller started (``ray.init`` before the call) is used and left running;
otherwise one is started — connected to ``address=`` or ``RAY_ADDRESS`` when given, local with
``workers`` CPUs when not — and shut down at the end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.data.build_lock import build_lock
from trainmedic.data.cache import DiskCache, build_manifest, default_cache_root, field_file
from trainmedic.data.materialize import Progress, progress_for
from trainmedic.data.partition_model import Partition, Recipe, Split
from trainmedic.data.partition_write import FieldFile, block_crcs, write_partition
from trainmedic.data.partitions import recipe_for, split
from trainmedic.data.sources import open_source
from trainmedic.data.sources.base import Source
from trainmedic.errors import DataError, SourceError, TierError, require
from trainmedic.units import format_bytes

#: Partitions per worker when ``partitions=`` is not given: enough that a slow partition (a
#: skewed key range, a busy node) does not leave the other workers idle at the end.
PARTITIONS_PER_WORKER = 4

#: Seconds to wait for cancelled tasks to stop before the build folder is removed.
CANCEL_WAIT_S = 10.0

_PURPOSE = "Building a disk cache with Ray tasks (trainmedic.data.build_cache)"


@dataclass(frozen=True)
class CacheBuild:
    """What ``build_cache`` did: where the cache is, its size, and how it was built (or reused)."""

    folder: Path
    rows: int
    bytes: int
    #: Partitions and workers of the build; 0 when an existing cache was reused.
    partitions: int
    workers: int
    #: Wall time of the build, Ray's start included; 0 when reused.
    seconds: float
    reused: bool
    #: Why it was built ("no cache yet", "the source changed since ..."), or "reused".
    reason: str


def build_cache(
    source: Any,
    fields: list[str] | None = None,
    *,
    query: str | None = None,
    schema: dict | None = None,
    partition_by: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    workers: int | None = None,
    partitions: int | None = None,
    address: str | None = None,
    progress: bool | Progress | None = None,
) -> CacheBuild:
    """Build (or reuse) the disk cache of ``source`` that ``data.load(source, fields, tier="disk")`` serves.

    ``source``, ``fields``, ``query``, ``schema`` and ``cache_dir`` are as for ``data.load``: an
    HDF5 file, a Zarr store, a ``.npy`` file or folder, a ``trainmedic.batch`` output folder, or
    an SQLAlchemy URL with ``query=`` — which also needs ``partition_by=``, an integer column that
    is unique, never NULL and the query's ``ORDER BY``. ``workers``: tasks in flight (default: the
    cluster's CPUs, or this machine's for a local Ray). ``partitions``: default 4 per worker.
    ``address``: a Ray cluster to connect to (default ``RAY_ADDRESS``, else a local Ray); a Ray
    already initialised in this process is used as it is and left running. On several machines
    ``cache_dir`` must be a shared filesystem at the same path on every node, and trainmedic with
    the source's extras installed on each. ``progress``: as for ``data.load``, in rows written.
    Returns a :class:`CacheBuild`; raises ``trainmedic.errors`` naming the partition that failed.
    """
    ray = require("ray", "ray", _PURPOSE)
    workers = _optional_positive("workers", workers)
    partitions = _optional_positive("partitions", partitions)
    if isinstance(fields, str):
        fields = [fields]
    root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    opened = open_source(source, fields, query=query, schema=schema)
    recipe = recipe_for(source, opened, fields, query, schema, partition_by)
    # Named before anything is read: a query's folder is keyed without its (yet unknown) specs,
    # exactly as data.load's disk tier names it.
    cache = DiskCache(root, opened)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(
            f"cannot create the cache folder {str(root)!r} ({exc}); pass cache_dir= a writable folder."
        ) from None
    # The private checks of DiskCache are the format's own: a cache this call would rebuild is
    # exactly one load() would rebuild, and vice versa.
    reason = cache.problem()
    if reason is None:
        return _reused(cache)
    bar = progress_for(progress)
    # The lock data.load's builders take: a rank loading the same source meanwhile waits for this
    # build instead of sweeping its .tmp- folder away (see build_lock.py), and vice versa.
    try:
        with build_lock(cache.folder):  # a wait is logged by build_lock
            reason = cache.problem()
            if reason is None:  # the holder we waited for built it
                return _reused(cache)
            return _build(ray, cache, opened, recipe, reason, address, workers, partitions, bar)
    finally:
        opened.close()


def _build(
    ray: Any,
    cache: DiskCache,
    opened: Source,
    recipe: Recipe,
    reason: str,
    address: str | None,
    workers: int | None,
    partitions: int | None,
    bar: Progress,
) -> CacheBuild:
    started = time.perf_counter()
    fingerprint = opened.fingerprint()
    with _connected(ray, address, workers) as slots:
        plan = split(opened, recipe, partitions or PARTITIONS_PER_WORKER * slots)
        opened.specs = plan.specs  # a query's specs, known from its first rows
        _check_space(cache.root, opened, plan)
        cache.sweep_abandoned()
        tmp = cache.root / f".tmp-{cache.folder.name}-{os.getpid()}-{os.urandom(3).hex()}"
        tmp.mkdir()
        try:
            layout = _preallocate(tmp, plan)
            owned = _run(ray, recipe, plan, layout, tmp, fingerprint, slots, bar, opened)
            crcs = {f.spec.name: block_crcs(tmp / f.file, f.total_bytes, owned[f.spec.name]) for f in layout}
            if opened.fingerprint() != fingerprint:
                raise SourceError(
                    f"{opened.description} changed while its cache was built; nothing was published. "
                    f"Build again once it is stable."
                )
            seconds = time.perf_counter() - started
            manifest = build_manifest(opened, plan.length, crcs, seconds)
            _write_manifest(tmp, manifest)
            cache.publish(tmp, manifest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    size = sum(f.total_bytes for f in layout)
    return CacheBuild(cache.folder, plan.length, size, len(plan.partitions), slots, seconds, False, reason)


def _reused(cache: DiskCache) -> CacheBuild:
    manifest = cache.manifest
    size = sum(entry["bytes"] for entry in manifest["fields"])
    return CacheBuild(cache.folder, int(manifest["length"]), size, 0, 0, 0.0, True, "reused")


@contextlib.contextmanager
def _connected(ray: Any, address: str | None, workers: int | None) -> Iterator[int]:
    """Ray, connected for the build; yields the number of tasks to keep in flight."""
    if ray.is_initialized():
        # The caller's Ray (and its cluster): used as it is, never shut down here.
        yield workers or _cluster_cpus(ray)
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    try:
        # Quiet: worker output and Ray's INFO lines would reach the caller's terminal; a failed
        # task's error comes back as an exception anyway.
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if address:
            ray.init(address=address, **quiet)
        else:
            # Without workers=, Ray counts the CPUs this process may use (cgroup limits included).
            ray.init(num_cpus=workers, include_dashboard=False, **quiet)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError or its own errors
        where = f"the Ray cluster at {address!r}" if address else "a local Ray"
        raise DataError(
            f"build_cache could not start {where} ({type(exc).__name__}: {exc}); check the address "
            f"(ray status on the head node prints it) or call ray.init() yourself before build_cache."
        ) from exc
    try:
        yield workers or _cluster_cpus(ray)
    finally:
        ray.shutdown()


def _cluster_cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _run(
    ray: Any,
    recipe: Recipe,
    plan: Split,
    layout: list[FieldFile],
    tmp: Path,
    fingerprint: str,
    slots: int,
    progress: Progress,
    source: Source,
) -> dict[str, dict[int, int]]:
    """Every partition written by a Ray task, at most ``slots`` at a time; the blocks they own."""
    # max_retries: a task whose worker process died is run again; it rewrites the same bytes.
    task = ray.remote(num_cpus=1, max_retries=3)(write_partition)
    checked = None if recipe.kind == "sql" else fingerprint
    folder = str(tmp.resolve())  # a worker's working directory is not the caller's
    owned: dict[str, dict[int, int]] = {f.spec.name: {} for f in layout}
    queue = list(plan.partitions)
    pending: dict[Any, Partition] = {}
    progress.start(f"building disk cache with Ray ({len(queue)} partitions)", plan.length)
    try:
        while queue or pending:
            while queue and len(pending) < slots:
                part = queue.pop(0)
                pending[task.remote(recipe, part, layout, folder, checked)] = part
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                part = pending.pop(ref)
                try:
                    blocks = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise _failed(exc, part, plan, recipe, source) from None
                for name, crcs in blocks.items():
                    owned[name].update(crcs)
                progress.advance(part.rows)
    except BaseException:
        # A failed partition or Ctrl-C: no task may go on writing once the folder is removed.
        _cancel(ray, pending)
        raise
    finally:
        progress.stop()
    return owned


def _cancel(ray: Any, pending: dict[Any, Partition]) -> None:
    """Stop the other tasks and wait for them, so none writes into a folder being removed."""
    refs = list(pending)
    for ref in refs:
        ray.cancel(ref)
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)


def _failed(exc: Exception, part: Partition, plan: Split, recipe: Recipe, source: Source) -> DataError:
    cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries the task's own exception
    node = getattr(exc, "ip", None)
    message = (
        f"{part.describe(len(plan.partitions), recipe.key)} of {source.description} failed"
        f"{f' on {node}' if node else ''}: {type(cause).__name__}: {cause}\n"
    )
    if recipe.kind == "sql":
        message += f"(Row numbers in that message count from the partition's first row, row {part.start} of the result.)\n"
    message += (
        "Nothing was published (the build folder was removed); fix the cause and call build_cache again."
    )
    return type(cause)(message) if isinstance(cause, DataError) else SourceError(message)


def _preallocate(tmp: Path, plan: Split) -> list[FieldFile]:
    layout = []
    for spec in plan.specs:
        f = FieldFile(spec, field_file(spec.name), plan.length * spec.sample_bytes)
        with open(tmp / f.file, "wb") as out:
            out.truncate(f.total_bytes)  # sparse: each worker fills its own range
        layout.append(f)
    return layout


def _check_space(root: Path, source: Source, plan: Split) -> None:
    needed = plan.length * sum(s.sample_bytes for s in plan.specs)
    free = shutil.disk_usage(root).free
    if needed > free:
        raise TierError(
            f"the cache of {source.description} needs {format_bytes(needed)} but {str(root)!r} has "
            f"{format_bytes(free)} free; pass cache_dir= a folder with room, or free space there."
        )


def _write_manifest(tmp: Path, manifest: dict) -> None:
    with open(tmp / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _optional_positive(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DataError(f"{name}={value!r} is not allowed; expected a positive int, or None for the default.")
    return value
