"""The disk tier's cache: reused across runs, rebuilt when the source changes or the cache is damaged,
and never trusted after a build that was killed."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from trainmedic import data


def write_npy(folder, seed):
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((500, 8)).astype(np.float32)
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", np.arange(500) + seed)
    return x


def cache_files(cache):
    return sorted(p for p in cache.rglob("*.bin"))


def served_x(loader):
    loader.set_epoch(0)
    return np.concatenate([x.numpy() for x, _ in loader])


def test_built_once_then_reused(tmp_path):
    x = write_npy(tmp_path / "src", 0)
    first = data.load(
        tmp_path / "src", batch_size=50, shuffle=False, tier="disk", cache_dir=tmp_path / "cache"
    )
    assert "built the cache" in first.explain() and "no cache yet" in first.explain()
    second = data.load(
        tmp_path / "src", batch_size=50, shuffle=False, tier="disk", cache_dir=tmp_path / "cache"
    )
    assert "reused the cache" in second.explain()
    assert np.array_equal(served_x(second), x)
    assert len(cache_files(tmp_path / "cache")) == 2


def test_source_changed_under_its_cache_is_rebuilt(tmp_path):
    write_npy(tmp_path / "src", 0)
    data.load(tmp_path / "src", shuffle=False, tier="disk", cache_dir=tmp_path / "cache")
    x = write_npy(tmp_path / "src", 1)
    os.utime(tmp_path / "src" / "x.npy", ns=(1, 10**18))  # a distinct mtime even on coarse clocks
    loader = data.load(
        tmp_path / "src", batch_size=50, shuffle=False, tier="disk", cache_dir=tmp_path / "cache"
    )
    assert np.array_equal(served_x(loader), x)
    assert "built the cache" in loader.explain()


@pytest.mark.parametrize("damage, reason", [("truncate", "truncated"), ("flip", "corrupted")])
def test_damaged_cache_is_detected_and_rebuilt(tmp_path, damage, reason):
    x = write_npy(tmp_path / "src", 0)
    data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache")
    target = next(p for p in cache_files(tmp_path / "cache") if p.name.startswith("x-"))
    if damage == "truncate":
        os.truncate(target, target.stat().st_size - 100)
    else:
        with open(target, "r+b") as f:
            f.seek(target.stat().st_size // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
    loader = data.load(
        tmp_path / "src", batch_size=50, shuffle=False, tier="disk", cache_dir=tmp_path / "cache"
    )
    assert reason in loader.explain()
    assert np.array_equal(served_x(loader), x)


BUILD_AND_DIE = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import trainmedic.data.sources.base as base
    from trainmedic import data

    base.DEFAULT_CHUNK_BYTES = 4096  # many small chunks, so the build is half written when killed

    class Dying:
        def __len__(self):
            return 2000
        def __getitem__(self, i):
            if i == 1500:
                os.kill(os.getpid(), signal.SIGKILL)
            return np.full(16, i, dtype=np.float32), i

    data.load(Dying(), tier="disk", cache_dir=sys.argv[1], progress=False)
    """
)


class Whole:
    def __len__(self):
        return 2000

    def __getitem__(self, i):
        return np.full(16, i, dtype=np.float32), i


@pytest.mark.slow
def test_a_build_killed_midway_is_never_trusted(tmp_path):
    cache = tmp_path / "cache"
    script = tmp_path / "die.py"
    script.write_text(BUILD_AND_DIE)
    result = subprocess.run([sys.executable, str(script), str(cache)], capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL, result.stderr
    leftovers = [p for p in cache.iterdir() if not p.name.endswith(".lock")]  # its build lock stays too
    assert leftovers and all(p.name.startswith(".tmp-") for p in leftovers)  # half-written, never published
    assert any(p.stat().st_size > 0 for p in cache.rglob("*.bin"))

    # A fresh process (a rerun) with the same dataset: the partial build is swept, a full one used.
    loader = data.load(Whole(), batch_size=500, shuffle=False, tier="disk", cache_dir=cache)
    assert "built the cache" in loader.explain()
    x = np.concatenate([x.numpy() for x, _ in loader])
    assert np.array_equal(x[:, 0], np.arange(2000, dtype=np.float32))
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-") or p.name.endswith(".lock")]


def test_block_crcs_do_not_depend_on_how_the_stream_was_cut():
    from trainmedic.data.cache import BLOCK_BYTES, BlockCrc

    payload = np.random.default_rng(0).integers(0, 255, 2 * BLOCK_BYTES + 123, dtype=np.uint8).tobytes()
    whole, pieces = BlockCrc(), BlockCrc()
    whole.update(memoryview(payload))
    for start in range(0, len(payload), 777_777):
        pieces.update(memoryview(payload)[start : start + 777_777])
    assert whole.finish() == pieces.finish() and len(whole.finish()) == 3


def test_a_large_cache_is_sampled_and_still_catches_a_torn_first_block(tmp_path, monkeypatch):
    import trainmedic.data.cache as cache_module

    write_npy(tmp_path / "src", 0)
    data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(cache_module, "FULL_VERIFY_BYTES", 0)  # pretend it is bigger than 1 GiB
    reused = data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache")
    assert "blocks, sampled" in reused.explain()
    target = next(p for p in cache_files(tmp_path / "cache") if p.name.startswith("y-"))
    with open(target, "r+b") as f:
        f.write(b"\xff")
    assert "corrupted" in data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache").explain()


def test_a_changed_source_is_rebuilt_in_place_leaving_no_old_cache(tmp_path):
    write_npy(tmp_path / "src", 0)
    data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache")
    write_npy(tmp_path / "src", 1)
    os.utime(tmp_path / "src" / "x.npy", ns=(1, 10**18))
    data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache")
    assert len([p for p in (tmp_path / "cache").iterdir()]) == 1


def test_a_dict_changed_anywhere_gets_a_fresh_cache(tmp_path):
    x = np.zeros((300_000, 2), dtype=np.float32)
    data.load({"x": x}, tier="disk", cache_dir=tmp_path)
    x[150_001, 1] = 7.0
    loader = data.load({"x": x}, batch_size=300_000, shuffle=False, tier="disk", cache_dir=tmp_path)
    assert "built the cache" in loader.explain()
    assert next(iter(loader))[0][150_001, 1].item() == 7.0


def test_a_malformed_manifest_means_a_rebuild(tmp_path):
    x = write_npy(tmp_path / "src", 0)
    data.load(tmp_path / "src", tier="disk", cache_dir=tmp_path / "cache")
    manifest = next((tmp_path / "cache").rglob("manifest.json"))
    content = json.loads(manifest.read_text())
    del content["fields"]
    manifest.write_text(json.dumps(content))
    loader = data.load(
        tmp_path / "src", batch_size=50, shuffle=False, tier="disk", cache_dir=tmp_path / "cache"
    )
    assert "malformed" in loader.explain()
    assert np.array_equal(served_x(loader), x)


def test_a_dataset_cache_says_changes_inside_are_not_seen(tmp_path):
    loader = data.load(Whole(), tier="disk", cache_dir=tmp_path)
    assert "is not detected" in loader.explain()
