"""The edges of a generation job: what counts as the same job, signals repeated, NumPy
functions, loop sizing, leftovers of a killed first write, bad outputs and names."""

from __future__ import annotations

import functools
import signal
import time

import numpy as np
import pytest
import torch
from generators import params, tone

from trainmedic import _os, batch
from trainmedic.batch.generate import _catch_stop_signals
from trainmedic.batch.identity import function_digest
from trainmedic.batch.shards import MANIFEST
from trainmedic.errors import BatchError


def make_shift(offset):
    def shifted(freq, snr_db):
        return freq + offset

    return shifted


class Scaled:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, freq, snr_db):
        return freq * self.factor


def test_the_job_identity_sees_closures_partials_objects_and_defaults():
    assert function_digest(make_shift(0)) == function_digest(make_shift(0))
    assert function_digest(make_shift(0)) != function_digest(make_shift(1000))
    assert function_digest(functools.partial(tone, length=16)) == function_digest(
        functools.partial(tone, length=16)
    )
    assert function_digest(functools.partial(tone, length=16)) != function_digest(
        functools.partial(tone, length=32)
    )
    assert function_digest(Scaled(2.0)) == function_digest(Scaled(2.0))
    assert function_digest(Scaled(2.0)) != function_digest(Scaled(3.0))
    assert function_digest(Scaled(np.ones(3))) != function_digest(Scaled(np.zeros(3)))
    f = eval("lambda freq, snr_db: freq * 2.0")  # no source to read: the bytecode's constants count
    g = eval("lambda freq, snr_db: freq * 1000.0")
    assert function_digest(f) != function_digest(g)


def test_a_closure_with_another_value_is_another_job(tmp_path):
    batch.generate(make_shift(0), params(20), out=tmp_path, batch_size=5, shard_size=10, progress=False)
    with pytest.raises(BatchError, match="the function's source changed"):
        batch.generate(
            make_shift(1000), params(20), out=tmp_path, batch_size=5, shard_size=10, progress=False
        )


def test_a_partial_job_reruns_and_resumes(tmp_path):
    fn = functools.partial(tone, length=16)
    batch.generate(fn, params(20), out=tmp_path, batch_size=5, shard_size=10, progress=False)
    again = batch.generate(functools.partial(tone, length=16), params(20), out=tmp_path, progress=False)
    assert again.shards_written == 0 and again.resumed


def test_a_second_ctrl_c_a_second_later_acts_at_once():
    heard = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: heard.append(number))
    try:
        catcher = _catch_stop_signals()
        signal.raise_signal(signal.SIGINT)
        assert catcher.received == signal.SIGINT and heard == []  # the first asks for a clean stop
        signal.raise_signal(signal.SIGINT)
        assert heard == []  # a repeat within the window is the same request
        catcher._first_at = time.monotonic() - 1.5  # as if pressed again 1.5 s later
        signal.raise_signal(signal.SIGINT)
        assert heard == [signal.SIGINT]  # handed to the handler there was before: acts at once
        catcher.uninstall()
    finally:
        signal.signal(signal.SIGINT, previous)


def numpy_tone(freq, snr_db):
    t = np.arange(32) / 32
    return (np.sin(2 * np.pi * freq * t) * (1 + snr_db)).astype(np.float32)


def test_numpy_functions_generate_through_the_loop(tmp_path):
    p = params(40)
    with pytest.warns(batch.FallbackWarning, match="NumPy code"):
        result = batch.generate(numpy_tone, p, out=tmp_path, progress=False)
    assert result.mode == "loop" and result.batch_size == 40
    out = np.load(tmp_path / "shard-000000" / "output.npy")
    np.testing.assert_array_equal(out[7], numpy_tone(p["freq"][7], p["snr_db"][7]))


def doubled_by_item(freq, snr_db):
    return freq * 2 if float(freq.item()) > 0 else freq


def test_loop_calls_are_capped_so_a_job_still_has_many_shards(tmp_path):
    p = {"freq": np.linspace(1, 2, 5000).astype(np.float32), "snr_db": np.zeros(5000, dtype=np.float32)}
    with pytest.warns(batch.FallbackWarning):
        result = batch.generate(doubled_by_item, p, out=tmp_path, progress=False)
    assert result.batch_size == 1024 and result.shards >= 1
    assert result.shard_size <= 64 * 1024


def test_numpy_integer_seeds_are_ints():
    vf = batch.vectorize(tone)
    cols = {k: torch.as_tensor(v) for k, v in params(6).items()}
    assert torch.equal(vf(**cols, seed=np.int64(7))["iq"], vf(**cols, seed=7)["iq"]) and vf.mode == "vmap"
    with pytest.raises(BatchError, match=r"seed=1.5 is a float"):
        vf(**cols, seed=1.5)


def takes_start(freq, start):
    return freq + start


def test_names_a_batched_call_keeps_for_itself_are_refused(tmp_path):
    with pytest.raises(BatchError, match="argument named 'start'.*rename that argument"):
        batch.vectorize(takes_start)
    with pytest.raises(BatchError, match=r"params name \['seed'\]"):
        batch.generate(lambda freq, **kw: freq, {"freq": [1.0], "seed": [2.0]}, out=tmp_path, progress=False)


def test_a_first_manifest_write_killed_midway_leaves_a_folder_that_can_be_used(tmp_path):
    (tmp_path / f".tmp-{MANIFEST}.{_os.HOST}.999999999").write_text("{")
    result = batch.generate(tone, params(10), out=tmp_path, progress=False)
    assert result.shards_written == 1 and not list(tmp_path.glob(".tmp-*"))


def nested(freq, snr_db):
    return {"a": {"b": freq}}


def test_nested_outputs_are_named(tmp_path):
    with pytest.raises(BatchError, match="output 'a' is nested"):
        batch.generate(nested, params(4), out=tmp_path / "n", progress=False)


def positional_only(freq, /, snr_db):
    return freq


def test_positional_only_arguments_and_odd_devices_are_named(tmp_path):
    with pytest.raises(BatchError, match=r"takes \['freq'\] by position only"):
        batch.generate(positional_only, params(4), out=tmp_path / "a", progress=False)
    with pytest.raises(BatchError, match="device='meta'"):
        batch.generate(tone, params(4), out=tmp_path / "b", device="meta", progress=False)
