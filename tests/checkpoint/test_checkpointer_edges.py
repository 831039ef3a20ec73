"""Edge cases of the Checkpointer found in review: signals repeated or arriving after the loop,
the deadline on forced saves, objects left out of restore, arrays in place, swapped classes,
bad arguments."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from proc_kit import wait_for

from trainmedic.checkpoint import Checkpointer, Preempted
from trainmedic.checkpoint.preflight_log import ENV as PREFLIGHT_ENV
from trainmedic.errors import CheckpointError, CheckpointMismatchError


def _child(tmp_path: Path, body: str) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_repeated_sigterm_still_saves_at_the_next_step(tmp_path):
    child = _child(
        tmp_path,
        """
        import os, signal, time
        from pathlib import Path
        from trainmedic.checkpoint import Checkpointer, Preempted
        ckpt = Checkpointer("ck", every=10**6)
        state = {"n": 0}
        for step in range(10**6):
            state["n"] += 1
            if step == 20:
                Path("ready").write_text("")
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)  # a launcher forwarding it, and the scheduler
            time.sleep(0.001)
            ckpt.save(step + 1, state=state)
    """,
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 128 + 15, err
    assert "saved step 21" in err
    assert Checkpointer(tmp_path / "ck").restore(state={}) == 21


@pytest.mark.slow
def test_a_signal_after_the_loop_ends_the_process_after_the_grace(tmp_path):
    child = _child(
        tmp_path,
        """
        import time
        from pathlib import Path
        from trainmedic.checkpoint import Checkpointer, Preempted
        ckpt = Checkpointer("ck", every=1)
        for step in range(3):
            ckpt.save(step + 1, state={"n": step})
        Path("ready").write_text("")
        time.sleep(120)  # evaluation after the loop: no more save() calls
    """,
    )
    wait_for((tmp_path / "ready").exists, timeout=30)
    started = time.monotonic()
    child.terminate()
    child.communicate(timeout=60)
    assert child.returncode == -15  # ended by SIGTERM as it would have been without trainmedic
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_a_forced_save_past_the_deadline_ends_the_run(tmp_path):
    child = _child(
        tmp_path,
        """
        import time
        from trainmedic.checkpoint import Checkpointer, Preempted
        ckpt = Checkpointer("ck", every=10**6, deadline="2s")
        for epoch in range(100):
            time.sleep(0.3)  # one epoch
            ckpt.save(epoch + 1, force=True, state={"epoch": epoch})
    """,
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 75, err
    assert "deadline" in err and "saved step" in err


def test_objects_left_out_of_restore_are_named(tmp_path, caplog):
    model = torch.nn.Linear(2, 2)
    ckpt = Checkpointer(tmp_path, every=1)
    ckpt.save(1, model=model, stats={"best": 1.0})
    with caplog.at_level(logging.INFO, logger="trainmedic.checkpoint"):
        fresh = Checkpointer(tmp_path)
        assert fresh.restore(model=torch.nn.Linear(2, 2), scaler=torch.amp.GradScaler("cpu")) == 1
    assert "'stats', not passed to restore()" in caplog.text
    assert fresh.resumed.missing == ("scaler",) and "left as built: scaler" in caplog.text


def test_arrays_and_tensors_are_filled_in_place(tmp_path):
    pool, ema = np.arange(5.0), torch.arange(3.0)
    Checkpointer(tmp_path, every=1).save(1, pool=pool, ema=ema)
    pool2, ema2 = np.zeros(5), torch.zeros(3)
    Checkpointer(tmp_path).restore(pool=pool2, ema=ema2)
    assert pool2.tolist() == [0, 1, 2, 3, 4] and ema2.tolist() == [0, 1, 2]
    other = np.zeros(4)
    ckpt = Checkpointer(tmp_path)
    ckpt.restore(pool=other, ema=torch.zeros(3))
    assert other.tolist() == [0, 0, 0, 0] and ckpt.resumed.values["pool"].tolist() == [0, 1, 2, 3, 4]
    assert "'pool' was saved as an array of shape (5,) and dtype float64 and the one given has (4,)" in str(
        ckpt.resumed
    )


def test_an_optimizer_of_another_class_is_named_before_anything_loads(tmp_path):
    model = torch.nn.Linear(2, 2)
    Checkpointer(tmp_path, every=1).save(
        1, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1)
    )
    other = torch.nn.Linear(2, 2)
    before = other.weight.clone()
    with pytest.raises(
        CheckpointMismatchError, match="torch.optim.sgd.SGD and the object given is torch.optim.adam.Adam"
    ):
        Checkpointer(tmp_path).restore(model=other, optimizer=torch.optim.Adam(other.parameters()))
    assert torch.equal(other.weight, before)
    with pytest.raises(CheckpointMismatchError, match="'model' .*torch.nn.modules.linear.Linear.*NoneType"):
        Checkpointer(tmp_path).restore(model=None)


def test_a_class_that_cannot_be_unpickled_is_named(tmp_path):
    (tmp_path / "save.py").write_text(
        textwrap.dedent("""
        from trainmedic.checkpoint import Checkpointer, Preempted
        class Stats:
            def __init__(self): self.best = 1.0
        Checkpointer("ck", every=1).save(1, stats=Stats())
    """)
    )
    (tmp_path / "load.py").write_text(
        textwrap.dedent("""
        from trainmedic.checkpoint import Checkpointer, Preempted
        from trainmedic.errors import CheckpointMismatchError
        try:
            Checkpointer("ck").restore(stats=None)
        except CheckpointMismatchError as exc:
            print(exc)
    """)
    )
    subprocess.run([sys.executable, "save.py"], cwd=tmp_path, check=True)
    out = subprocess.run(
        [sys.executable, "load.py"], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout
    assert "'stats'" in out and "__main__.Stats" in out and "cannot be read back" in out


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda d: Checkpointer(None), "directory=None"),
        (lambda d: Checkpointer(d, keep_last=0), "keep_last=0"),
        (lambda d: Checkpointer(d, signals=("SIGKILL",)), "cannot be caught"),
        (lambda d: Checkpointer(d, deadline=float("nan")), "deadline=nan"),
        (lambda d: Checkpointer(d).save(1, phase=3, model=1), "phase=3"),
        (lambda d: Checkpointer(d).save(1, phase="warm up", model=1), "phase='warm up'"),
        (lambda d: Checkpointer(d).save(1, phase="p" * 300, model=1), "at most 100 characters"),
        (lambda d: Checkpointer(d, every="10 minutes please"), "every='10 minutes please'"),
        (lambda d: Checkpointer(d).save(1, **{"a/b": 1}), "cannot name files"),
        (lambda d: Checkpointer(d).save(1.5, state=1), "step=1.5"),
        (lambda d: Checkpointer(d).save(1, _rng=1), "start with '_'"),
    ],
)
def test_bad_arguments_are_named(tmp_path, call, message):
    with pytest.raises(CheckpointError, match=message.replace("(", "\\(").replace(")", "\\)")):
        call(tmp_path / "ck")


def test_under_preflight_a_bad_every_is_still_refused(tmp_path, monkeypatch):
    # Preflight writes every call, but the value the real run will parse must be checked too.
    monkeypatch.setenv(PREFLIGHT_ENV, str(tmp_path / "preflight"))
    (tmp_path / "preflight").mkdir()
    with pytest.raises(CheckpointError, match="every='10 minutes please'"):
        Checkpointer(tmp_path / "ck", every="10 minutes please")
    ckpt = Checkpointer(tmp_path / "ck", every="10m")
    try:
        ckpt.restore(state={})
        assert ckpt.save(1, state={}) and ckpt.save(2, state={})  # every call writes under preflight
    finally:
        ckpt.close()


def test_phases_that_differ_only_by_dash_or_underscore_keep_their_own_checkpoints(tmp_path):
    ckpt = Checkpointer(tmp_path / "ck", keep_last=1, every=None, signals=())
    ckpt.save(1, phase="warm-up", state={"a": 1})
    ckpt.save(2, phase="warm_up", state={"a": 2})
    ckpt.save(3, force=True, state={"a": 3})
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["000001-step-1-warm-up", "000002-step-2-warm_up", "000003-step-3"]
    assert ckpt.phases_done == ("warm-up", "warm_up")


def test_a_fresh_restore_leaves_a_stateful_loader_and_the_random_stream_alone(tmp_path):
    from torch.utils.data import TensorDataset
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(TensorDataset(torch.arange(40.0)), batch_size=4, shuffle=True)
    model = torch.nn.Linear(2, 2)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    ckpt = Checkpointer(tmp_path / "ck", signals=())
    assert ckpt.restore(loader=loader, model=model) == 0
    assert torch.equal(torch.rand(3), expected)  # no iterator was built: no seed drawn
    ckpt.close()


def test_the_first_step_is_timed_from_restore_not_from_the_constructor(tmp_path):
    # Set-up between Checkpointer() and restore() (building the model, reading data) is not a
    # step: counted as one, it would move every deadline save earlier for an hour.
    ckpt = Checkpointer(tmp_path / "ck", signals=())
    before_restore = time.monotonic()
    ckpt.restore(state={})
    assert ckpt._schedule.last_exit >= before_restore
    ckpt.close()


def test_stopping_waits_for_the_save_the_signal_asked_for(tmp_path):
    # A signal landing between a skipped save() and the loop's `if ckpt.stopping: break` must
    # not end the loop before the step is saved.
    ckpt = Checkpointer(tmp_path / "ck", every=1000, signals=("SIGUSR1",), exit_on_stop=False)
    try:
        ckpt.restore(state={})
        assert ckpt.save(1, state={"step": 1})  # the first call writes
        assert not ckpt.save(2, state={"step": 2})
        os.kill(os.getpid(), signal.SIGUSR1)
        assert not ckpt.stopping
        assert ckpt.save(3, state={"step": 3}) and ckpt.stopping
        assert ckpt.latest().step == 3
    finally:
        ckpt.close()


def test_the_same_signal_again_right_after_the_stop_belongs_to_that_stop(tmp_path):
    # torchrun SIGTERMs every rank once one has exited: a rank still unwinding from its own stop
    # must not be ended by that signal (the handler from before) before its loop reports the stop.
    before_us = []
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: before_us.append(number))
    try:
        ckpt = Checkpointer(tmp_path / "ck", every=1000, signals=("SIGUSR1",))
        ckpt.restore(state={})
        os.kill(os.getpid(), signal.SIGUSR1)
        with pytest.raises(Preempted) as stopped:
            ckpt.save(1, state={"step": 1})
        os.kill(os.getpid(), signal.SIGUSR1)
        assert before_us == []
        assert "SIGUSR1 received: saved step 1" in str(stopped.value)
        ckpt.close()
        os.kill(os.getpid(), signal.SIGUSR1)  # close() gave the handler back
        assert before_us == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_checkpointer_dropped_without_close_gives_its_signal_handlers_back(tmp_path):
    before = signal.getsignal(signal.SIGUSR1)
    Checkpointer(tmp_path / "ck", signals=("SIGUSR1",)).restore(state={})
    assert signal.getsignal(signal.SIGUSR1) == before
