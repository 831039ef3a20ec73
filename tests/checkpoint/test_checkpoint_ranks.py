"""The Checkpointer and trainmedic.data across 2 real torchrun ranks (gloo, CPU).

One training script (DDP, dropout seeded per rank, a sharded disk-tier loader) runs three
times: uninterrupted; stopped by a SIGTERM that reaches rank 1 only, mid-epoch; and resumed with
2 ranks. Every rank's batches and final weights must equal the uninterrupted run's; the ranks'
shards are disjoint and complete per epoch; the disk cache was built once for both ranks; only
rank 0 wrote. Restoring that checkpoint in a 1-process run is refused, naming both world sizes.
"""

import json
import os
import signal
import textwrap

import numpy as np
import pytest
from warm_kit import run_python

from trainmedic import data
from trainmedic.checkpoint import Checkpointer
from trainmedic.errors import CheckpointError

pytestmark = [pytest.mark.torchrun]

N, BATCH, EPOCHS, STOP_AT = 203, 16, 3, 10  # 102 samples a rank (1 padded), 7 batches an epoch

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, os, signal, sys
    import numpy as np
    import torch
    import torch.distributed as dist
    from trainmedic import data
    from trainmedic.checkpoint import Checkpointer
    from trainmedic.checkpoint import ranks

    out, ckpt_dir, cache, stop_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if stop_at:
        ranks.SYNC_S = 0.0  # agree at every call, so the stop lands on step stop_at exactly (spaced: below)
    N, BATCH, EPOCHS = 203, 16, 3
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(100 + rank)  # each rank its own dropout masks: the checkpoint must keep both streams

    class Counted(torch.utils.data.Dataset):
        def __len__(self):
            return N
        def __getitem__(self, i):
            return self.__getitems__([i])[0]
        def __getitems__(self, idx):  # rows read per process: a build reads all N
            with open(os.path.join(out, f"reads-{os.getpid()}"), "a") as f:
                f.write(f"{len(idx)}\\n")
            return [(np.full(4, i / N, np.float32), i) for i in idx]

    def log(name, text):
        with open(os.path.join(out, f"{name}-rank{rank}"), "a") as f:
            f.write(text + "\\n")

    loader = data.load(Counted(), batch_size=BATCH, seed=3, tier="disk", cache_dir=cache, progress=False)
    log("explain", loader.explain())
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with Checkpointer(ckpt_dir, every=4, keep_last=2) as ckpt:
            step = ckpt.restore(model=model, optimizer=opt, loader=loader)
            log("restored", str(step))
            for epoch in range(loader.epoch, EPOCHS):
                loader.set_epoch(epoch)
                for x, i in loader:
                    opt.zero_grad()
                    model(x).pow(2).mean().backward()
                    opt.step()
                    step += 1
                    log("batches", f"{step} {epoch} " + ",".join(str(v) for v in i.tolist()))
                    if rank == 1 and step == stop_at:
                        os.kill(os.getpid(), signal.SIGTERM)  # only rank 1 hears it, at step 10
                    ckpt.save(step, model=model, optimizer=opt, loader=loader)
    except SystemExit as stop:
        log("exit", f"{stop.code} {stop}")
        raise
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    log("final", digest)
    if not stop_at:
        # Agreements spaced SYNC_S apart (thousands of calls here): a signal on rank 1 still stops
        # both ranks at one and the same call, a little later.
        with Checkpointer(os.path.join(out, "spaced"), every=None, exit_on_stop=False) as spaced:
            call = 0
            while not spaced.stopping and call < 10**7:
                call += 1
                if rank == 1 and call == 1000:
                    os.kill(os.getpid(), signal.SIGTERM)
                spaced.save(call, value=call)
        log("spaced", f"{call} {spaced.last_save.step}")
    dist.destroy_process_group()
    # Every result above is on disk. torch 2.13's gloo teardown at interpreter exit now and then
    # aborts ("terminate called without an active exception", about 1 run in 5 on a 2-vCPU VM,
    # with or without a Checkpointer group) after all the work is done: end here instead.
    sys.stdout.flush()
    os._exit(0)
    """
)


# --standalone: torchrun binds its rendezvous store to a port the OS picks, where a port found free
# beforehand could be taken by another process before torchrun binds it. The launcher is forked warm
# (tests/warm_kit.py); the ranks it starts are new interpreters, as under any torchrun.
TORCHRUN = [
    "-m",
    "torch.distributed.run",
    "--standalone",
    "--nproc-per-node",
    "2",
    "--local-addr",
    "127.0.0.1",
]


def torchrun(tmp_path, tag, stop_at=0):
    out = tmp_path / tag
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    # OMP_NUM_THREADS: torchrun sets 1 for its ranks where it is unset; set here, it would also
    # need a warm interpreter of its own.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [*TORCHRUN, str(script), str(out), str(tmp_path / "ckpt"), str(tmp_path / "cache"), str(stop_at)]
    result = run_python(cmd, cwd=tmp_path, env=env, timeout=120)
    return out, result


def lines(out, name, rank):
    path = out / f"{name}-rank{rank}"
    return path.read_text().splitlines() if path.exists() else []


def batches(out, rank):
    return [line.split(" ") for line in lines(out, "batches", rank)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    (tmp / "a").mkdir()
    full, done = torchrun(tmp / "a", "full")
    assert done.returncode == 0, done.stderr[-3000:]
    base = tmp / "b"
    base.mkdir()
    stopped, result = torchrun(base, "stopped", stop_at=STOP_AT)
    assert result.returncode != 0  # the ranks exit with 128 + SIGTERM, as a preempted job does
    manifests = sorted((base / "ckpt").glob("*/manifest.json"))
    saved_at_stop = json.loads(manifests[-1].read_text())
    resumed, result = torchrun(base, "resumed")
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        "full": full,
        "stopped": stopped,
        "resumed": resumed,
        "base": base,
        "manifest": saved_at_stop,
        "full_dir": tmp / "a",
    }


def test_a_two_rank_run_stopped_by_a_signal_on_one_rank_resumes_exactly_on_both(runs):
    full, stopped, resumed = runs["full"], runs["stopped"], runs["resumed"]
    for rank in range(2):
        # Both ranks stopped after the save of step 10: the one that got SIGTERM and the one that did not.
        code, *message = lines(stopped, "exit", rank)[0].split(" ", 1)
        assert code == str(128 + signal.SIGTERM)
        assert ("SIGTERM received by another rank" in message[0]) == (rank == 0)
        assert "saved step 10" in message[0]
        assert lines(resumed, "restored", rank) == ["10"]
        before = [b for b in batches(stopped, rank) if int(b[0]) <= STOP_AT]
        assert len(before) == len(batches(stopped, rank)) == STOP_AT
        assert before + batches(resumed, rank) == batches(full, rank)
        assert lines(resumed, "final", rank) == lines(
            full, "final", rank
        )  # dropout streams of each rank restored
    assert lines(full, "final", 0) == lines(full, "final", 1)  # DDP kept the replicas equal
    assert runs["manifest"]["step"] == STOP_AT and runs["manifest"]["world_size"] == 2
    assert runs["manifest"]["sharded"] == ["loader"]


def test_the_shards_of_two_real_ranks_are_disjoint_and_complete_each_epoch(runs):
    full = runs["full"]
    per_rank = [batches(full, r) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == EPOCHS * 7
    for epoch in range(EPOCHS):
        served = [
            [int(v) for b in per_rank[r] if b[1] == str(epoch) for v in b[2].split(",")] for r in range(2)
        ]
        assert len(served[0]) == len(served[1]) == 102
        assert set(served[0]) | set(served[1]) == set(range(N))
        assert len(set(served[0]) & set(served[1])) == 1  # the one padded sample (203 over 2 ranks)
    assert "rank 1 of 2: 102 of 203 samples per epoch" in (full / "explain-rank1").read_text()


def test_spaced_agreements_stop_both_ranks_at_the_same_call(runs):
    stops = [lines(runs["full"], "spaced", r) for r in range(2)]
    assert stops[0] == stops[1] and len(stops[0]) == 1
    call, saved = (int(v) for v in stops[0][0].split())
    assert 1000 <= call < 10**7 and saved == call


def test_the_disk_cache_was_built_once_for_both_ranks(runs):
    full_dir = runs["full_dir"]
    reads = [sum(int(x) for x in p.read_text().split()) for p in (full_dir / "full").glob("reads-*")]
    assert max(reads) >= N and sum(r >= N for r in reads) == 1  # one build; the other rank only fingerprinted
    names = [p.name for p in (full_dir / "cache").iterdir()]
    assert len(names) == 1 and not names[0].startswith(".") and not names[0].endswith(".lock")
    explains = [(runs["full"] / f"explain-rank{r}").read_text() for r in range(2)]
    assert sum("built the cache" in e for e in explains) == 1
    assert sum("reused the cache" in e for e in explains) == 1


def test_only_rank_0_wrote_and_every_rank_stream_is_in_the_checkpoint(runs):
    import torch

    ckpt = runs["base"] / "ckpt"
    entries = sorted(p for p in ckpt.iterdir() if not p.name.startswith("."))
    # One writer: saves at steps 1, 5, 9, 10 (the stop), then 14, 18 and 21 (close) numbered 1 to 7.
    assert [p.name for p in entries] == ["000006-step-18", "000007-step-21"]
    streams = torch.load(entries[-1] / "_rng.pt", weights_only=False)
    assert len(streams["per_rank"]) == 2
    assert not torch.equal(streams["per_rank"][0]["torch"], streams["per_rank"][1]["torch"])


def test_resuming_with_another_world_size_names_both_sizes(runs):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))
    loader = data.load(
        {"x": np.zeros((N, 4), np.float32), "i": np.arange(N)}, batch_size=BATCH, seed=3, progress=False
    )
    directory = runs["base"] / "ckpt"
    with pytest.raises(
        CheckpointError,
        match=r"saved by a run of 2 process\(es\) and this run has 1: 'loader'.*"
        r"Resume with 2 process\(es\) \(torchrun --nproc-per-node 2",
    ):
        Checkpointer(directory, signals=()).restore(model=model, loader=loader)
    # Without the sharded loader the weights load at any world size, with a note.
    ckpt = Checkpointer(directory, signals=())
    assert ckpt.restore(model=model) > STOP_AT
    assert any("saved by 2 process(es) and this run has 1" in note for note in ckpt.resumed.notes)


ALONE = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from trainmedic.checkpoint import Checkpointer
    from trainmedic.checkpoint import ranks

    ranks.JOIN_TIMEOUT_S = 3.0
    dist.init_process_group("gloo")
    model = torch.nn.Linear(2, 2)
    if dist.get_rank() == 0:  # the old rank-0-only pattern
        ckpt = Checkpointer(sys.argv[1], every=1)
        ckpt.save(1, model=model)
    else:
        import time
        time.sleep(600)  # never ends by itself: torchrun stops this rank as soon as rank 0 fails
    """
)


def test_a_checkpointer_used_on_rank_0_only_is_a_clear_error_not_a_hang(tmp_path):
    script = tmp_path / "alone.py"
    script.write_text(ALONE)
    cmd = [*TORCHRUN, str(script), str(tmp_path / "ckpt")]
    result = run_python(cmd, cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert result.returncode != 0
    assert "CheckpointError: the Checkpointer on rank 0 of 2 waited 3 s for the other ranks" in result.stderr
    assert "not inside `if rank == 0:`" in result.stderr
