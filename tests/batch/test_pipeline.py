"""generate()'s pipeline: sizing from real calls (no fake-tensor trace, no heavy imports), shards
written by a background thread while the next one is made, its errors raised in the caller,
the stages' times, and output byte-identical to the job before the pipeline."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from generators import params, tone, tone_global

from trainmedic import batch
from trainmedic.batch.generate import _run_shard
from trainmedic.batch.host import CpuShards, HostShard
from trainmedic.batch.measure import LiveBytes, peak_bytes
from trainmedic.batch.params import as_params
from trainmedic.batch.shards import ShardStore
from trainmedic.batch.sizing import choose_batch_size, cost_per_sample
from trainmedic.batch.stages import Stages, bottleneck, describe
from trainmedic.batch.writer import ShardWriter
from trainmedic.errors import BatchError

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
MiB = 1 << 20
#: Imports a generate() call must not add: building a FakeTensorMode pulled all of them in, 2 s
#: on the dev VM and most of a 6.2 s job on an H200 (gpu-truth/h200-2026-11-26/generate_profile.txt).
HEAVY = (
    "torch._dynamo",
    "torch.fx.experimental.symbolic_shapes",
    "sympy",
    "torch.distributed.fsdp",
    "torch._inductor",
)
WAIT = 60  # seconds an ordering handshake may take before the test calls the overlap absent


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("fn", [tone, tone_global], ids=["tone", "global"])
def test_the_same_job_writes_the_same_bytes(tmp_path, fn):
    # Compared within this run: generated floats differ in their last bits between CPUs (vector
    # instruction sets, libm), so a digest pinned on one machine fails on the next. What matters
    # is that the same job, run again here, writes what it wrote before: a resume never mixes
    # shards of two different outputs.
    for name in ("first", "again"):
        batch.generate(
            fn, params(300), out=tmp_path / name, batch_size=20, shard_size=40, seed=4, progress=False
        )
    assert digest(tmp_path / "first") == digest(tmp_path / "again")
    assert len([p for p in (tmp_path / "first").rglob("*") if p.is_file()]) > 300 // 40


@pytest.mark.slow
def test_a_generate_call_imports_nothing_heavy(tmp_path):
    script = f"""
import sys, json
import torch
before = set(sys.modules)
sys.path.insert(0, {str(HERE)!r})
from generators import params, tone
from trainmedic import batch
result = batch.generate(tone, params(300), out={str(tmp_path / "job")!r}, progress=False)
print(json.dumps({{"new": sorted(set(sys.modules) - before), "sizing": result.sizing}}))
"""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    heavy = [m for m in report["new"] if m.startswith(HEAVY)]
    assert heavy == [], heavy[:10]
    assert report["sizing"] == "300 samples per call: all 300"  # auto sizing ran: it measured the calls


CALLS: list[list[str]] = []


def counted(freq, snr_db, rng):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    CALLS.append([type(mode).__name__ for mode in _get_current_dispatch_mode_stack()])
    return rng.normal((4,)) * freq + snr_db


def test_auto_sizing_costs_two_small_real_calls_and_no_trace(tmp_path):
    CALLS.clear()
    result = batch.generate(counted, params(300), out=tmp_path, progress=False)
    # vmap runs the Python function once per batched call: the probe, the calls of 8 and 64
    # samples whose peaks size the call, and the job's one call of all 300.
    assert (result.batch_size, result.shards_written) == (300, 1)
    assert CALLS == [[], ["LiveBytes"], ["LiveBytes"], []]  # real tensors throughout: no FakeTensorMode


def wide(freq, snr_db):
    x = torch.arange(65536, dtype=torch.float32) * freq
    return (torch.sin(x) * torch.cos(x) + snr_db)[:16]


def test_live_bytes_measure_what_a_real_call_holds():
    meter = LiveBytes()
    with meter:
        a = torch.empty(1000, dtype=torch.float32)
        b = a[10:]  # a view: the same storage, not counted twice
        del a, b
        c = torch.empty(250, dtype=torch.float64)
    assert (meter.peak, meter.live) == (4000, 2000) and c.numel() == 250
    vf = batch.vectorize(wide)
    cols = {k: torch.as_tensor(v) for k, v in params(64).items()}
    peaks = {
        n: peak_bytes(lambda n=n: vf(**{k: v[:n] for k, v in cols.items()}), torch.device("cpu"))
        for n in (8, 64)
    }
    per_sample, _fixed = cost_per_sample(peaks)
    assert 1.0 * MiB < per_sample < 4 * MiB  # a few float32 temporaries of 64k elements a sample


def test_the_gpu_rule_is_arithmetic_on_measured_peaks():
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    peaks = {8: 100 * MiB + 8 * MiB, 64: 100 * MiB + 64 * MiB}  # 1 MiB a sample, 100 MiB fixed
    assert cost_per_sample(peaks) == (MiB, 100 * MiB)
    sizing = choose_batch_size(peaks, 1024, 1_000_000, cuda, free_bytes=10 * 1024 * MiB)
    # half of 10 GiB, less the fixed 100 MiB, at 1 MiB a sample: 5020, down to a multiple of 64
    assert sizing.batch_size == 4992 and "1.0 MiB a sample in half the free GPU memory" in sizing.why
    outputs = choose_batch_size(peaks, 1 * MiB, 1_000_000, cuda, free_bytes=10 * 1024 * MiB)
    assert outputs.batch_size == 64 and "its outputs in one shard" in outputs.why  # 64 MiB of outputs a shard
    unmeasured = choose_batch_size(None, 1 * MiB, 1_000_000, cuda, free_bytes=1024 * MiB)
    assert unmeasured.batch_size == 64 and unmeasured.why.endswith("(its outputs in one shard)")
    small = choose_batch_size(None, 4096, 1_000_000, cuda, free_bytes=64 * MiB)
    assert small.batch_size == 1024 and "8x its output a sample (unmeasured)" in small.why
    cpu = choose_batch_size(
        peaks, 1024, 1_000_000, torch.device("cpu"), free_bytes=10 * 1024 * MiB, working_set=48 * MiB
    )
    assert cpu.batch_size == 48 and "48.0 MiB CPU working set" in cpu.why


def job_store(out: Path, samples: int = 120) -> tuple[ShardStore, object, dict]:
    job = {"function": "test", "samples": samples}
    return ShardStore(out, job, samples, lambda: (40, 20), "npy"), batch.vectorize(tone), params(samples)


class Ordered:
    """Records what happened in which order, from both threads."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, event: str) -> None:
        with self._lock:
            self.events.append(event)


def test_the_writer_writes_shard_k_while_shard_k_plus_1_is_generated(tmp_path):
    store, vf, p = job_store(tmp_path / "job")
    columns, stages, log = as_params(p), Stages(), Ordered()
    writing_0, generating_1 = threading.Event(), threading.Event()

    def write(index, arrays):
        log(f"write {index} begins")
        if index == 0:
            writing_0.set()
            assert generating_1.wait(WAIT)  # shard 0 stays in the writer until shard 1 is being made
        store.write(index, arrays)
        log(f"write {index} ends")

    writer = ShardWriter(write, stages)
    for index in range(store.shard_count):
        if index == 1:
            assert writing_0.wait(WAIT)
            log("generate 1 begins")
            generating_1.set()
        start, stop = store.bounds(index)
        shard = _run_shard(
            vf, columns, start, stop, 20, 4, torch.device("cpu"), index, True, _Quiet(), CpuShards(), stages
        )
        log(f"generate {index} ends")
        writer.put(shard)
    writer.close()
    events = log.events
    # Shard 0 was inside the writer when shard 1 began, and left it only after: the two overlapped.
    assert events.index("write 0 begins") < events.index("generate 1 begins") < events.index("write 0 ends")
    assert writer.written == 3 and [e["index"] for e in store.manifest["shards"]] == [0, 1, 2]
    batch.generate(tone, p, out=tmp_path / "plain", batch_size=20, shard_size=40, seed=4, progress=False)
    for i in range(3):
        for name in ("iq", "delay", "freq"):
            np.testing.assert_array_equal(
                np.load(tmp_path / f"job/shard-{i:06d}/{name}.npy"),
                np.load(tmp_path / f"plain/shard-{i:06d}/{name}.npy"),
            )


class _Quiet:
    def start(self, description, total):
        pass

    def advance(self, n):
        pass

    def stop(self):
        pass


class HandOff(_Quiet):
    """After the first call of shard 1 (sample 40 made), waits until the writer is inside writing
    shard 0, and lets it finish only then: both threads at once, or the test fails."""

    def __init__(self) -> None:
        self.done = 0
        self.generating_1 = threading.Event()
        self.writing_0 = threading.Event()
        self.descriptions: list[str] = []

    def advance(self, n):
        self.done += n
        if self.done == 60:  # calls of 20, shards of 40: the first call of shard 1
            self.generating_1.set()
            assert self.writing_0.wait(WAIT), "shard 0 was not being written while shard 1 was generated"

    def describe(self, text):
        self.descriptions.append(text)


def test_generate_writes_in_the_background_while_the_next_shard_is_made(tmp_path):
    """End to end: a profile hook (real code, nothing replaced) holds the writer inside
    ShardStore.write of shard 0 until the caller's thread has made a call of shard 1."""
    progress = HandOff()
    threads = {}

    def hook(frame, event, arg):
        if event == "call" and frame.f_code is ShardStore.write.__code__:
            index = frame.f_locals["index"]
            threads[index] = threading.current_thread().name
            if index == 0:
                progress.writing_0.set()
                if not progress.generating_1.wait(WAIT):
                    raise AssertionError("shard 1 was not generated while shard 0 was being written")

    threading.setprofile(hook)
    try:
        result = batch.generate(
            tone, params(120), out=tmp_path, batch_size=20, shard_size=40, seed=4, progress=progress
        )
    finally:
        threading.setprofile(None)
    assert threads == dict.fromkeys(range(3), "trainmedic-batch-writer") and result.shards_written == 3
    assert set(result.stages) == {"generate", "copy", "write", "waited"} and result.stages["write"] > 0
    assert result.bottleneck in ("generate", "write")
    assert len(progress.descriptions) == 3 and all(
        d.startswith("gen ") and ", write " in d for d in progress.descriptions
    )


def test_a_failed_background_write_is_raised_in_the_caller_and_nothing_after_it_is_written(tmp_path):
    store, _vf, _p = job_store(tmp_path / "job")
    writer = ShardWriter(store.write, Stages())
    ok = {"x": np.zeros((40, 2), dtype=np.float32)}
    writer.put(HostShard(0, ok))
    writer.put(
        HostShard(1, {"x": np.zeros((40, 3), dtype=np.float32)})
    )  # another shape: the store refuses it
    with pytest.raises(
        BatchError, match=r"shard 1 \(samples 40..79\) has fields x: float32 \(3,\) but the earlier"
    ):
        writer.put(HostShard(2, ok))  # raised here if shard 1 has failed by now...
        writer.close()  # ...else here
    writer.shut()
    assert [e["index"] for e in store.manifest["shards"]] == [0] and not (
        tmp_path / "job/shard-000002"
    ).exists()


def test_an_unexpected_writer_error_is_named_with_its_shard(tmp_path):
    store, _vf, _p = job_store(tmp_path / "job")
    writer = ShardWriter(store.write, Stages())
    objects = np.empty((40,), dtype=object)  # np.save refuses object arrays without pickle
    writer.put(HostShard(0, {"x": objects}))
    with pytest.raises(
        BatchError, match=r"writing shard 0 failed in the background writer \(ValueError: .*pickle"
    ) as info:
        writer.close()
    assert isinstance(info.value.__cause__, ValueError)
    assert store.missing() == [0, 1, 2] and not list((tmp_path / "job").glob("shard-*"))


def test_the_verdict_names_the_disk_when_writing_sets_the_pace():
    slow_disk = {"generate": 1.0, "copy": 0.1, "write": 3.0, "waited": 1.9}
    assert bottleneck(slow_disk) == "write"
    line = describe(slow_disk, 10_000, 4.0)
    assert line.startswith("2,500 samples/s; generate 1.00 s, copy 0.10 s, write 3.00 s in the background")
    assert "writing shards is the bottleneck (the generator waited 1.90 s for it)" in line
    fast_disk = {"generate": 3.0, "copy": 0.1, "write": 1.0, "waited": 0.0}
    assert bottleneck(fast_disk) == "generate" and describe(fast_disk, 10_000, 3.2).endswith(
        "generating is the bottleneck, writing keeps up"
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_shards_come_through_pinned_buffers_and_match_the_per_sample_calls(tmp_path):
    p = params(300)
    result = batch.generate(
        tone, p, out=tmp_path, batch_size=20, shard_size=40, seed=4, device="cuda", progress=False
    )
    assert result.shards_written == 8 and result.stages["copy"] > 0
    vf = batch.vectorize(tone)
    for i in (0, 41, 299):
        shard, row = divmod(i, 40)
        iq = np.load(tmp_path / f"shard-{shard:06d}/iq.npy")[row]
        one = vf.one(
            i, torch.tensor(p["freq"][i], device="cuda"), torch.tensor(p["snr_db"][i], device="cuda"), seed=4
        )
        np.testing.assert_allclose(iq, one["iq"].cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_the_bar_shows_where_the_time_goes(tmp_path, monkeypatch):
    import io

    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: rich cuts columns to fit 80

    from trainmedic.progress import ProgressBar

    out = io.StringIO()
    batch.generate(
        tone,
        params(300),
        out=tmp_path / "job",
        batch_size=20,
        shard_size=40,
        seed=4,
        progress=ProgressBar(stream=out, unit="samples"),
    )
    drawn = out.getvalue()
    assert "300/300" in drawn
    assert re.search(r"gen \d+\.\d s, copy \d+\.\d s, write \d+\.\d s", drawn), drawn


class _StopAtShard1(_Quiet):
    """Raises ``error`` at the first call of shard 1, once the writer has failed on shard 0."""

    def __init__(self, error: BaseException, write_failed: threading.Event) -> None:
        self.done, self.error, self.write_failed = 0, error, write_failed

    def advance(self, n):
        self.done += n
        if self.done == 60:  # calls of 20, shards of 40
            assert self.write_failed.wait(WAIT), "the write of shard 0 did not fail"
            raise self.error


def _fail_the_write_of_shard_0(monkeypatch) -> threading.Event:
    failed = threading.Event()

    def write(self, index, arrays):
        failed.set()
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(ShardStore, "write", write)
    return failed


class _Stopped(Exception):
    pass


def test_the_callers_error_notes_a_writer_that_failed_too(tmp_path, monkeypatch):
    error = _Stopped("stopped by the progress object")
    progress = _StopAtShard1(error, _fail_the_write_of_shard_0(monkeypatch))
    with pytest.raises(_Stopped) as info:
        batch.generate(
            tone, params(120), out=tmp_path, batch_size=20, shard_size=40, seed=4, progress=progress
        )
    assert info.value is error
    assert getattr(error, "__notes__", None) == ["the background writer had failed too: the disk went away"]


class _NoNotes(Exception):
    """An exception as Python 3.10 makes them: without add_note (3.11's)."""

    @property
    def add_note(self):
        raise AttributeError(f"{type(self).__name__!r} object has no attribute 'add_note'")


def test_on_python_310_the_callers_error_goes_up_without_the_note(tmp_path, monkeypatch):
    # generate() called exc.add_note unguarded: on 3.10 the caller's error turned into an
    # AttributeError raised while handling it.
    python_310 = types.SimpleNamespace(version_info=(3, 10, 13, "final", 0))
    # The module, not the function trainmedic.batch re-exports under its name.
    monkeypatch.setattr(
        importlib.import_module("trainmedic.batch.generate"), "sys", python_310, raising=False
    )
    error = _NoNotes("stopped by the progress object")
    progress = _StopAtShard1(error, _fail_the_write_of_shard_0(monkeypatch))
    with pytest.raises(_NoNotes) as info:
        batch.generate(
            tone, params(120), out=tmp_path, batch_size=20, shard_size=40, seed=4, progress=progress
        )
    assert info.value is error
