"""The output folder of batch.generate as a source: rows across shard boundaries, every tier, bad folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainmedic import batch, data
from trainmedic.data.sources import open_source
from trainmedic.data.sources.base import read_rows
from trainmedic.data.sources.shards import ShardedSource
from trainmedic.errors import SourceError


def sample(k, rng):
    return {
        "x": torch.arange(6, dtype=torch.float32) * k + rng.normal((6,)),
        "label": (k * 3).to(torch.int64),
    }


@pytest.fixture(params=["npy", "hdf5", "zarr"])
def job(request, tmp_path):
    ks = np.arange(103, dtype=np.float32)
    batch.generate(
        sample,
        {"k": ks},
        out=tmp_path / "job",
        batch_size=10,
        shard_size=20,
        format=request.param,
        progress=False,
    )
    expected = batch.vectorize(sample)(k=torch.from_numpy(ks), seed=0)
    return tmp_path / "job", {"x": expected["x"].numpy(), "label": expected["label"].numpy(), "k": ks}


def test_rows_anywhere_are_read_across_shard_boundaries(job):
    path, expected = job
    source = open_source(path)
    assert isinstance(source, ShardedSource) and source.length == 103
    assert sorted(source.fields) == ["k", "label", "x"]
    picks = np.array([102, 0, 19, 20, 21, 59, 60, 7, 7, 99])
    for field in ("x", "label", "k"):
        spec = next(s for s in source.specs if s.name == field)
        out = np.empty((len(picks),) + spec.shape, dtype=spec.dtype)
        read_rows(source, field, picks, out)
        np.testing.assert_array_equal(out, expected[field][picks])
    chunks = list(source.iter_chunks(7))
    np.testing.assert_array_equal(np.concatenate([c["x"] for c in chunks]), expected["x"])


@pytest.mark.parametrize("tier", ["ram", "disk", "stream"])
def test_every_tier_serves_the_job(job, tier, tmp_path):
    path, expected = job
    loader = data.load(
        path,
        fields=["x", "k"],
        batch_size=103,
        shuffle=False,
        tier=tier,
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    x, k = next(iter(loader))
    np.testing.assert_array_equal(x.numpy(), expected["x"])
    np.testing.assert_array_equal(k.numpy(), expected["k"])


def test_a_shard_that_disagrees_with_the_manifest_is_named(tmp_path):
    batch.generate(
        sample,
        {"k": np.arange(30, dtype=np.float32)},
        out=tmp_path,
        batch_size=10,
        shard_size=10,
        progress=False,
    )
    manifest = json.loads((tmp_path / "trainmedic-batch.json").read_text())
    manifest["shards"][1]["stop"] = 25
    (tmp_path / "trainmedic-batch.json").write_text(json.dumps(manifest))
    with pytest.raises(SourceError, match="shard 'shard-000001' .* does not match its manifest entry"):
        data.load(tmp_path, progress=False)


def test_a_manifest_that_is_not_json_is_named(tmp_path):
    (tmp_path / "trainmedic-batch.json").write_text("{half")
    with pytest.raises(SourceError, match="cannot be read as a trainmedic.batch manifest"):
        data.load(tmp_path, progress=False)


def test_a_manifest_gone_between_the_check_and_the_open_is_named(tmp_path):
    # open_source found the manifest; it was removed before ShardedSource read it (another
    # process deleting the job): a SourceError, not an AttributeError on None.
    with pytest.raises(SourceError, match="not a trainmedic.batch folder"):
        ShardedSource(tmp_path)


@pytest.mark.slow
def test_a_job_of_more_shards_than_file_descriptors_reads(tmp_path):
    import subprocess
    import sys

    batch.generate(
        sample,
        {"k": np.arange(300, dtype=np.float32)},
        out=tmp_path / "job",
        batch_size=2,
        shard_size=2,
        progress=False,
    )
    # 150 shards x 3 fields = 450 memory-mapped files, against a limit of 256 descriptors.
    code = (
        "import resource, sys, numpy as np; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
        "from trainmedic import data; "
        "loader = data.load(sys.argv[1], fields=['x'], batch_size=300, shuffle=True, tier='stream', progress=False); "
        "(x,) = next(iter(loader)); print(tuple(x.shape))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "job")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(300, 6)"
