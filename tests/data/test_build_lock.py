"""The disk cache's build lock: one process builds, another waits for it and maps the same files; a
lock whose holder was killed, or whose heartbeat is old, is taken over and its half-built folder
swept; a live holder on another host makes a waiter wait, and give up with a clear error.

Real processes throughout, synchronised by files they write (never by sleeping): the holder
writes ``building`` and blocks until the test writes ``go``; the waiter writes ``waiting`` when it
gives its wait note. The 2-rank torchrun build is in tests/checkpoint/test_checkpoint_ranks.py.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from proc_kit import wait_for

from trainmedic import data
from trainmedic._os import HOST
from trainmedic.data import build_lock as bl
from trainmedic.data.cache import DiskCache
from trainmedic.errors import DataError

N = 300

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    import numpy as np
    from trainmedic import data

    mode, cache, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])

    class Gated:
        def __len__(self):
            return 300
        def __getitem__(self, i):
            return self.__getitems__([i])[0]
        def __getitems__(self, idx):
            if len(idx) > 2:  # the build's reads (the fingerprint reads rows 0 and 299)
                with open(work / f"reads-{os.getpid()}", "a") as f:
                    f.write(f"{len(idx)}\\n")
                if mode == "hold":
                    (work / "building").write_text(str(os.getpid()))
                    while not (work / "go").exists():
                        time.sleep(0.01)  # polls for the test's go file
            return [(np.full(4, i, np.float32), i) for i in idx]

    class Note:
        def start(self, description, total):
            if description.startswith("waiting for"):
                # Written aside, then renamed: the test reads it as soon as it exists.
                (work / "waiting.tmp").write_text(description)
                os.replace(work / "waiting.tmp", work / "waiting")
        def advance(self, rows):
            pass
        def stop(self):
            pass

    loader = data.load(Gated(), batch_size=50, shuffle=False, tier="disk", cache_dir=cache, progress=Note())
    served = np.concatenate([i.numpy() for _, i in loader]).tolist()
    (work / f"done-{mode}").write_text(json.dumps({"explain": loader.explain(), "right": served == list(range(300))}))
    """
)


def start(tmp_path, mode):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with open(tmp_path / f"{mode}.stderr", "wb") as err:  # the child keeps its own copy of the handle
        return subprocess.Popen(
            [sys.executable, str(script), mode, str(tmp_path / "cache"), str(tmp_path)], stderr=err, env=env
        )


def finished(tmp_path, proc, mode):
    assert proc.wait(timeout=60) == 0, (tmp_path / f"{mode}.stderr").read_text()
    return json.loads((tmp_path / f"done-{mode}").read_text())


def builds(tmp_path):
    """Processes that read the whole source: one per build."""
    return {p.name: sum(int(x) for x in p.read_text().split()) for p in tmp_path.glob("reads-*")}


def assert_one_clean_cache(cache):
    names = sorted(p.name for p in cache.iterdir())
    assert len(names) == 1 and not names[0].startswith(".") and not names[0].endswith(".lock"), names


@pytest.mark.slow
def test_a_waiter_waits_for_the_live_builder_then_maps_its_cache(tmp_path):
    holder = start(tmp_path, "hold")
    wait_for(lambda: (tmp_path / "building").exists() or holder.poll() is not None)
    lock = next((tmp_path / "cache").glob("*.lock"))
    assert json.loads(lock.read_text())["pid"] == holder.pid

    waiter = start(tmp_path, "wait")
    wait_for(lambda: (tmp_path / "waiting").exists() or waiter.poll() is not None)
    note = (tmp_path / "waiting").read_text()
    assert f"pid {holder.pid} on host {HOST}" in note and "to build the disk cache" in note
    assert waiter.poll() is None and not (tmp_path / "done-wait").exists()  # still waiting, not building

    (tmp_path / "go").write_text("")
    held, waited = finished(tmp_path, holder, "hold"), finished(tmp_path, waiter, "wait")
    assert held["right"] and waited["right"]
    assert "built the cache" in held["explain"]
    assert "reused the cache" in waited["explain"] and f"for pid {holder.pid} on host" in waited["explain"]
    assert list(builds(tmp_path).values()) == [N]  # one build: the holder's
    assert_one_clean_cache(tmp_path / "cache")


@pytest.mark.slow
def test_the_lock_of_a_killed_builder_is_taken_over_and_its_half_build_swept(tmp_path):
    holder = start(tmp_path, "hold")
    wait_for(lambda: (tmp_path / "building").exists() or holder.poll() is not None)
    holder.send_signal(signal.SIGKILL)
    assert holder.wait(timeout=30) == -signal.SIGKILL  # reaped: its pid is really gone
    cache = tmp_path / "cache"
    assert any(p.name.endswith(".lock") for p in cache.iterdir())
    assert any(p.name.startswith(".tmp-") for p in cache.iterdir())

    (tmp_path / "go").write_text("")
    waiter = start(tmp_path, "wait")
    done = finished(tmp_path, waiter, "wait")
    assert done["right"] and "built the cache" in done["explain"]
    assert "took over the stale build lock" in done["explain"]
    assert f"pid {holder.pid} is no longer running on this host" in done["explain"]
    assert_one_clean_cache(cache)


class Rows:
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full(2, i, np.float32), i


def lock_of(root):
    from trainmedic.data.sources import open_source

    folder = DiskCache(root, open_source(Rows(), None)).folder
    return folder, bl.lock_path(folder)


def plant_lock(path, host="node7", pid=4242, age=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"host": host, "pid": pid, "started": "2026-11-20T10:00:00+0000", "token": "feed"})
    )
    if age:
        os.utime(path, (time.time() - age, time.time() - age))


def test_an_old_heartbeat_from_another_host_is_taken_over(tmp_path):
    folder, lock = lock_of(tmp_path)
    plant_lock(lock, age=bl.STALE_S + 30)
    half = (
        tmp_path / f".tmp-{folder.name}-4242-abcdef"
    )  # its half build; pid 4242 may live here: another host's
    half.mkdir()
    loader = data.load(Rows(), batch_size=64, shuffle=False, tier="disk", cache_dir=tmp_path, progress=False)
    assert np.array_equal(next(iter(loader))[1].numpy(), np.arange(64))
    assert "took over the stale build lock" in loader.explain() and "no heartbeat for" in loader.explain()
    assert_one_clean_cache(tmp_path)


def test_a_live_lock_of_another_host_is_waited_for_until_the_limit_with_a_clear_error(tmp_path):
    folder, lock = lock_of(tmp_path)
    plant_lock(lock)  # fresh heartbeat: judged alive, whatever pid 4242 is here
    started = time.monotonic()
    with pytest.raises(DataError) as raised, bl.build_lock(folder, timeout=0.3):
        pass
    message = str(raised.value)
    assert str(lock) in message and "pid 4242 on host node7" in message
    assert f"delete {lock}" in message and "cache_dir=" in message
    assert time.monotonic() - started >= 0.3
    assert lock.exists()  # a live holder's lock is never removed


def test_the_lock_is_exclusive_and_heartbeats_while_held(tmp_path, monkeypatch):
    monkeypatch.setattr(bl, "HEARTBEAT_S", 0.01)
    folder = tmp_path / "c"
    with bl.build_lock(folder) as lock:
        assert lock.held and bl.lock_path(folder).exists()
        os.utime(lock.path, (1, 1))
        wait_for(lambda: time.time() - lock.path.stat().st_mtime < 60)  # the heartbeat touched it
        holder = bl.read_holder(lock.path)
        assert holder.pid == os.getpid() and bl.why_stale(holder) is None
        # Another taker in this process (a second thread, say) sees a live holder and would wait.
        with pytest.raises(DataError, match=f"pid {os.getpid()}"), bl.build_lock(folder, timeout=0.05):
            pass
        with bl.build_lock(folder, ready=lambda: True) as other:  # ...unless what it waits for is ready
            assert not other.held
        assert lock.path.exists()
    assert not bl.lock_path(folder).exists()


def test_staleness_rules():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert "no longer running" in bl.why_stale(bl.Holder(HOST, dead.pid, "", "t", 0.0))
    assert bl.why_stale(bl.Holder(HOST, os.getpid(), "", "t", 0.0)) is None
    # Another host's pid means nothing here: only the heartbeat counts.
    assert bl.why_stale(bl.Holder("elsewhere", dead.pid, "", "t", 1.0)) is None
    assert "no heartbeat" in bl.why_stale(bl.Holder("elsewhere", dead.pid, "", "t", bl.STALE_S + 1))
    # Even here, a live pid whose heartbeat stopped (a stopped or hung process) is stale.
    assert "no heartbeat" in bl.why_stale(bl.Holder(HOST, os.getpid(), "", "t", bl.STALE_S + 1))
