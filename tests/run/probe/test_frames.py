"""The frame classifier on real stacks captured inside real library calls."""

from __future__ import annotations

import json
import logging
import sqlite3
import sys

import torch

from trainmedic.categories import COMPUTE, DATA, HOST_OTHER, SYNC, TRANSFER
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.userfiles import is_user_file, shown_path


def _here(offset: int = 0) -> str:
    frame = sys._getframe(1)
    return f"{shown_path(__file__)}:{frame.f_lineno + offset}"


def test_json_encoding_is_host_other_at_the_users_line():
    # Frames are live: classify inside the callback, as the sampler does while it holds the GIL.
    classifier, captured = FrameClassifier(), []

    def default(obj):
        captured.append(classifier.classify(sys._getframe()))
        return str(obj)

    json.dumps({"x": object()}, default=default)
    result = captured[0]
    assert (result.category, result.kind) == (HOST_OTHER, "logging")
    assert result.where.startswith(shown_path(__file__))


def test_logging_handler_runs_under_logging():
    classifier, captured = FrameClassifier(), []

    class Capture(logging.Handler):
        def emit(self, record):
            captured.append(classifier.classify(sys._getframe(1)))  # the logging machinery's frame

    logger = logging.getLogger("trainmedic-test-frames")
    logger.addHandler(Capture())
    logger.propagate = False
    where = _here(1)
    logger.warning("step %d", 1)
    result = captured[0]
    assert (result.category, result.kind) == (HOST_OTHER, "logging")
    assert result.where == where


def test_module_forward_is_compute():
    classifier, captured = FrameClassifier(), []

    class Net(torch.nn.Module):
        def forward(self, x):
            captured.append(classifier.classify(sys._getframe()))
            return x

    Net()(torch.ones(1))
    result = captured[0]
    assert (result.category, result.kind) == (COMPUTE, "forward")


def test_clipping_that_walks_the_models_parameters_is_the_optimizers():
    # clip_grad_norm_(model.parameters()) walks the model in torch.nn's Module methods: a sample
    # there is the clipping's (the update), not a forward pass. The walk is caught where it
    # reads each module's parameters.
    classifier, captured = FrameClassifier(), []

    class Walked(dict):
        def items(self):
            captured.append(classifier.classify(sys._getframe(1)))  # the Module method reading it
            return super().items()

    net = torch.nn.Linear(2, 1)
    net(torch.ones(1, 2)).sum().backward()
    object.__setattr__(net, "_parameters", Walked(net._parameters))
    where = _here(1)
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    assert captured, "the walk over the parameters was not caught"
    assert {(c.category, c.kind) for c in captured} == {(COMPUTE, "optimizer")}
    assert {c.where for c in captured} == {where}
    # The same walk from the user's own code is the user's, settled by position.
    captured.clear()
    list(net.parameters())
    assert {(c.category, c.kind) for c in captured} == {(None, "")}


def test_dataset_getitem_under_dataloader_is_data():
    classifier, captured = FrameClassifier(), []

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            captured.append(classifier.classify(sys._getframe()))
            return torch.tensor([i])

    list(torch.utils.data.DataLoader(Rows(), batch_size=2))
    result = captured[0]
    assert result.category == DATA
    assert result.kind == "transform"  # user code inside the loader


def test_sqlite_query_line_is_a_database_wait():
    classifier, captured = FrameClassifier(), []
    conn = sqlite3.connect(":memory:")
    conn.create_function("probe", 0, lambda: captured.append(classifier.classify(sys._getframe(1))) or 1)
    where = _here(1)
    conn.execute("SELECT probe()").fetchall()
    result = captured[0]
    assert (result.category, result.kind, result.where) == (DATA, "database", where)


def test_plain_user_code_is_left_for_position_to_decide():
    result = FrameClassifier().classify(sys._getframe())
    assert result.category is None
    assert result.where.startswith(shown_path(__file__))


def test_print_line_is_host_other():
    print_line = _line_containing('print("", end="")  # print-probe')
    assert FrameClassifier().line_family(__file__, print_line) == (HOST_OTHER, "print")


def test_sync_and_transfer_lines_only_count_on_cuda():
    filename = __file__
    item_line = _line_containing(".item()  # sync-probe")
    to_line = _line_containing('.to("cpu")  # transfer-probe')
    assert FrameClassifier(cuda=False).line_family(filename, item_line) is None
    assert FrameClassifier(cuda=True).line_family(filename, item_line) == (SYNC, "host read")
    assert FrameClassifier(cuda=True).line_family(filename, to_line) == (TRANSFER, "copy")


def _probe_lines():
    x = torch.ones(1)
    x.item()  # sync-probe
    x.to("cpu")  # transfer-probe
    print("", end="")  # print-probe


def _line_containing(text: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if text in line and "_line_containing" not in line:
                return number
    raise AssertionError(text)


def test_user_files_exclude_libraries_and_trainmedic():
    assert is_user_file(__file__)
    assert not is_user_file(json.__file__)
    assert not is_user_file(torch.__file__)
    import trainmedic.run.probe.frames as frames

    assert not is_user_file(frames.__file__)
    assert not is_user_file("<string>")


def _frames_inside_trainmedic_data(classifiers):
    """Classify the stack at trainmedic.data's copy module, while the test iterates a loader.

    A profile hook sees the first C call (the gather, whatever does it) made from a frame of
    ``trainmedic.data.transfer``; that frame is live, so it is classified right there.
    """
    import numpy as np

    from trainmedic import data

    captured = {}

    def profile(frame, event, arg):
        if (
            event == "c_call"
            and not captured
            and frame.f_globals.get("__name__") == "trainmedic.data.transfer"
        ):
            captured.update({name: c.classify(frame) for name, c in classifiers.items()})

    loader = data.load({"x": np.zeros((8, 2), np.float32)}, batch_size=4, progress=False)
    where = _here(3)
    sys.setprofile(profile)
    try:
        for _ in loader:
            pass
    finally:
        sys.setprofile(None)
    return captured, where


def test_time_inside_trainmedic_data_is_a_data_wait_at_the_users_for_line():
    captured, where = _frames_inside_trainmedic_data({"cpu": FrameClassifier(cuda=False)})
    result = captured["cpu"]
    # On a CPU there is no copy: trainmedic.data.transfer only gathers the batch.
    assert (result.category, result.kind, result.where) == (DATA, "loader", where)


def test_trainmedic_datas_copy_module_is_transfer_on_cuda_even_inside_the_loader():
    captured, where = _frames_inside_trainmedic_data({"cuda": FrameClassifier(cuda=True)})
    result = captured["cuda"]
    assert (result.category, result.kind, result.where) == (TRANSFER, "copy", where)
