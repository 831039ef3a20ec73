"""Stacks read from outside, rebuilt as frame-like chains: module names from paths, first lines
from source, and run's own classifier deciding what they are.

The library frames point at the installed torch's real files and functions, so the chains are
the ones py-spy reads from a real training job on this interpreter.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

from trainmedic.categories import COMPUTE, DATA, HOST_OTHER
from trainmedic.run.probe.foreign import FrameBuilder, first_line
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.pyspy import PyFrame

#: The installed torch, found without importing it.
TORCH = Path(importlib.util.find_spec("torch").origin).parent
H5PY = "/opt/venv/lib/python3.11/site-packages/h5py/_hl/dataset.py"


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "torch.nn.modules.linear"),
        ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", "numpy.core.numeric"),
        ("/usr/lib/python3.11/json/decoder.py", "json.decoder"),
        ("/usr/lib/python3.11/json/__init__.py", "json"),
        ("/opt/venv/lib/python3.11/site-packages/torch/__init__.py", "torch"),
        ("/usr/lib/python3.11/logging/handlers.py", "logging.handlers"),
        # A free-threaded build's library folder is python3.13t.
        ("/usr/lib/python3.13t/json/decoder.py", "json.decoder"),
        # A venv inside a project still names its packages from site-packages on.
        ("/home/u/lib/python3.11/site-packages/h5py/_hl/dataset.py", "h5py._hl.dataset"),
        # Python 3.11+ runs its import machinery from frozen modules: py-spy names them so.
        ("<frozen importlib._bootstrap>", "importlib._bootstrap"),
        ("<string>", ""),
        ("", ""),
    ],
)
def test_module_of_names_a_file_as_python_imports_it(path, module):
    assert FrameBuilder().module_of(path) == module


def test_a_script_is_no_module_but_a_package_under_a_search_folder_is(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "data.py").write_text("pass\n")
    builder = FrameBuilder((str(tmp_path),))
    # A script's name says nothing about what it does: '' as for __main__, never "train".
    assert builder.module_of(str(tmp_path / "train.py")) == ""
    assert builder.module_of(str(tmp_path / "pkg" / "data.py")) == "pkg.data"
    assert builder.module_of(str(tmp_path / "pkg" / "__init__.py")) == "pkg"
    assert FrameBuilder().module_of(str(tmp_path / "pkg" / "data.py")) == ""  # not on a search path


SOURCE = """
import functools


def plain(x):
    y = x + 1
    return y


@functools.lru_cache(maxsize=None)
@staticmethod
def decorated(x):
    return x * 2


def outer(xs):
    def inner(v):
        return v - 1

    ys = [inner(y) for y in xs]
    total = sum(y for y in ys)
    return ys, total
"""


def _lines(source: str) -> dict[str, int]:
    """Each marker's line number in ``source``."""
    lines = source.splitlines()
    return {
        "plain": lines.index("def plain(x):") + 1,
        "decorated": lines.index("@functools.lru_cache(maxsize=None)") + 1,
        "decorated_body": lines.index("    return x * 2") + 1,
        "outer": lines.index("def outer(xs):") + 1,
        "inner": lines.index("    def inner(v):") + 1,
        "listcomp": lines.index("    ys = [inner(y) for y in xs]") + 1,
        "genexpr": lines.index("    total = sum(y for y in ys)") + 1,
    }


def _first_lines(code, found=None) -> dict[str, int]:
    """co_firstlineno of every code object compiled from a source, by name."""
    found = {} if found is None else found
    found[code.co_name] = code.co_firstlineno
    for const in code.co_consts:
        if inspect.iscode(const):
            _first_lines(const, found)
    return found


def test_first_line_is_the_code_objects_own(tmp_path):
    path = tmp_path / "shapes.py"
    path.write_text(SOURCE)
    at = _lines(SOURCE)
    compiled = _first_lines(compile(SOURCE, str(path), "exec"))
    name = str(path)
    assert first_line(name, "plain", at["plain"] + 1) == compiled["plain"] == at["plain"]
    # A decorated function's code starts at its first decorator, as the loop finder keys it.
    assert first_line(name, "decorated", at["decorated_body"]) == compiled["decorated"] == at["decorated"]
    assert first_line(name, "inner", at["inner"] + 1) == compiled["inner"] == at["inner"]
    assert first_line(name, "<genexpr>", at["genexpr"]) == compiled["<genexpr>"] == at["genexpr"]
    # 3.11 compiles a list comprehension to a code of its own, <listcomp>, as py-spy names it;
    # 3.12 runs it inline: checked against its line alone.
    assert first_line(name, "<listcomp>", at["listcomp"]) == at["listcomp"]
    assert first_line(name, "<module>", at["genexpr"]) == compiled["<module>"] == 1


def test_first_line_of_what_cannot_be_read_is_zero(tmp_path):
    path = tmp_path / "shapes.py"
    path.write_text(SOURCE)
    broken = tmp_path / "broken.py"
    broken.write_text("def plain(x:\n    return x\n")
    assert first_line(str(tmp_path / "gone.py"), "plain", 5) == 0
    assert first_line(str(broken), "plain", 2) == 0
    assert first_line("<string>", "wait_here", 4) == 0
    assert first_line(str(path), "no_such_function", 5) == 0
    assert first_line(str(path), "plain", 1) == 0  # a line outside the function


def test_a_chain_links_callers_with_their_code(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    at = _lines(SOURCE)
    stack = (
        PyFrame("inner", str(script), at["inner"] + 1),
        PyFrame("<listcomp>", str(script), at["listcomp"]),
        PyFrame("outer", str(script), at["listcomp"]),
        PyFrame("<module>", str(script), len(SOURCE.splitlines())),
    )
    frame = FrameBuilder().chain(stack)
    seen = []
    while frame is not None:
        seen.append(
            (frame.f_code.co_name, frame.f_code.co_firstlineno, frame.f_lineno, frame.f_globals["__name__"])
        )
        frame = frame.f_back
    assert seen == [
        ("inner", at["inner"], at["inner"] + 1, ""),
        ("<listcomp>", at["listcomp"], at["listcomp"], ""),
        ("outer", at["outer"], at["listcomp"], ""),
        ("<module>", 1, len(SOURCE.splitlines()), ""),
    ]
    assert FrameBuilder().chain(()) is None


TRAIN = """
import torch


def main(model, opt, data):
    for step in range(100):
        batch = data["x"][step]
        loss = model(batch).sum()
        loss.backward()
        opt.step()


main(None, None, None)
"""


def _torch(relative: str, function: str, text: str = "") -> PyFrame:
    """A frame in the installed torch's ``function`` as py-spy reads it, at the first line of
    its body that holds ``text``. Read from the source: importing torch takes seconds."""
    path = TORCH / relative
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for line in range(node.body[0].lineno, node.end_lineno + 1):
                if text in lines[line - 1]:
                    return PyFrame(function, str(path), line)
    raise AssertionError(f"no {function} holding {text!r} in {path}")


@pytest.fixture
def train(tmp_path):
    """The training script's folder, and a function building a stack at one of its lines (the
    line starting with a word) under ``main`` under the module, with library frames inside."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    lines = TRAIN.splitlines()

    def line_of(word: str) -> int:
        return next(i + 1 for i, text in enumerate(lines) if text.strip().startswith(word))

    def at(word: str, *inner: PyFrame) -> tuple[PyFrame, ...]:
        return (
            *inner,
            PyFrame("main", str(script), line_of(word)),
            PyFrame("<module>", str(script), line_of("main(None")),
        )

    return tmp_path, at


@pytest.mark.parametrize(
    ("word", "inner", "expected"),
    [
        pytest.param(
            "loss =",
            (
                _torch("nn/modules/linear.py", "forward"),
                _torch("nn/modules/module.py", "_call_impl"),
                _torch("nn/modules/module.py", "_wrapped_call_impl"),
            ),
            (COMPUTE, "forward"),
            id="forward",
        ),
        pytest.param(
            "loss.backward",
            (_torch("autograd/__init__.py", "backward"), _torch("_tensor.py", "backward")),
            (COMPUTE, "backward"),
            id="backward",
        ),
        pytest.param(
            "opt.step",
            (
                _torch("optim/sgd.py", "step"),
                _torch("optim/optimizer.py", "wrapper", "out = func("),
            ),
            (COMPUTE, "optimizer"),
            id="optimizer",
        ),
        pytest.param(
            "batch",
            (PyFrame("__getitem__", H5PY, 781),),
            (DATA, "hdf5"),
            id="hdf5",
        ),
        pytest.param(
            "batch",
            # The target's own stdlib, not this interpreter's: named by its path alone.
            (PyFrame("dumps", "/usr/lib/python3.11/json/__init__.py", 231),),
            (HOST_OTHER, "logging"),
            id="stdlib-json",
        ),
    ],
)
def test_runs_classifier_reads_a_chain_as_it_reads_live_frames(train, word, inner, expected):
    folder, at = train
    stack = at(word, *inner)
    classified = FrameClassifier(cwd=str(folder)).classify(FrameBuilder().chain(stack))
    assert (classified.category, classified.kind) == expected
    assert classified.where == f"train.py:{stack[len(inner)].line}"
    assert classified.user_code.co_name == "main"


def test_a_stack_of_only_the_users_frames_is_left_to_the_diagnosis(train):
    folder, at = train
    classified = FrameClassifier(cwd=str(folder)).classify(FrameBuilder().chain(at("batch")))
    assert (classified.category, classified.kind) == (None, "")
    assert classified.where == f"train.py:{at('batch')[0].line}"


def test_time_under_an_import_is_the_imports_whatever_the_module_runs(tmp_path):
    # nanoGPT's first AdamW imports torch._dynamo (seconds): read from outside, that import's
    # frames are <frozen importlib._bootstrap> ones, and the time is set-up, not a forward pass.
    train = tmp_path / "train.py"
    train.write_text("import torch\nopt = make_optimizer()\n")
    stack = (
        PyFrame("<module>", str(TORCH / "_dynamo" / "__init__.py"), 1),
        PyFrame("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241),
        PyFrame("_load_unlocked", "<frozen importlib._bootstrap>", 690),
        PyFrame("<module>", str(train), 2),
    )
    sample = FrameClassifier(cwd=str(tmp_path)).classify(FrameBuilder().chain(stack))
    assert (sample.category, sample.kind, sample.where) == (HOST_OTHER, "import", "train.py:2")
