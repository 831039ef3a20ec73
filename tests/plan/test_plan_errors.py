"""Bad input to ``plan_memory`` and ``load_build``: a PlanError (or DeviceError) that names the bad
value and the user's line, never a traceback from deep inside torch; and ops fake tensors cannot
run: a plan that says it is a lower bound, with the parts it can still count exactly counted.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from trainmedic.devices import known_devices
from trainmedic.errors import DeviceError, PlanError
from trainmedic.plan import load_build, plan_memory
from trainmedic.plan.spec import exit_at_import

#: A file of build functions over a tiny MLP; ``# <name>`` marks a line a test expects named.
HEADER = """\
import torch
from torch import nn


def tiny():
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)
"""


def _write(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def _line(path: Path, marker: str) -> str:
    """``path:line`` of the line carrying ``# marker``."""
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# {marker}"):
            return f"{path.resolve()}:{number}"
    raise AssertionError(f"no line marked {marker!r} in {path}")


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def _build_ok(batch_size):
    return {
        "model": _tiny(),
        "inputs": torch.randn(batch_size, 4),
        "optimizer": lambda p: torch.optim.Adam(p),
    }


# -- what build() gives back ----------------------------------------------------------------------


def test_build_that_raises_names_the_exception_and_the_users_line(tmp_path):
    path = _write(
        tmp_path,
        """
        def build(batch_size):
            model = tiny()
            raise ValueError(f"no data for batch {batch_size}")  # RAISE
        """,
    )
    with pytest.raises(PlanError) as info:
        plan_memory(load_build(f"{path}:build"), 4)
    message = str(info.value)
    assert "ValueError" in message
    assert "no data for batch 4" in message
    assert _line(path, "RAISE") in message
    assert isinstance(info.value.__cause__, ValueError)


def test_build_that_fails_inside_torch_names_the_users_line_not_torchs(tmp_path):
    path = _write(
        tmp_path,
        """
        def make_inputs(batch_size):
            return torch.randn(batch_size, -4)  # NEGATIVE


        def build(batch_size):
            return dict(model=tiny(), inputs=make_inputs(batch_size))
        """,
    )
    with pytest.raises(PlanError) as info:
        plan_memory(load_build(str(path)), 4)
    message = str(info.value)
    assert "RuntimeError" in message
    assert _line(path, "NEGATIVE") in message  # the innermost line of the user's, not build's call
    assert "site-packages" not in message and "/torch/" not in message


def _returns_list(batch_size):
    return [_tiny(), torch.randn(batch_size, 4)]


def _no_inputs(batch_size):
    return {"model": _tiny()}


def _unknown_key(batch_size):
    return {"model": _tiny(), "inputs": torch.randn(batch_size, 4), "learning_rate": 1e-3}


def _model_not_module(batch_size):
    return {"model": lambda x: x, "inputs": torch.randn(batch_size, 4)}


def _inputs_without_tensor(batch_size):
    return {"model": _tiny(), "inputs": [batch_size, "x"]}


def _loss_not_scalar(batch_size):
    return {"model": _tiny(), "inputs": torch.randn(batch_size, 4), "loss_fn": lambda out: out * 2}


def _loss_without_grad(batch_size):
    return {"model": _tiny(), "inputs": torch.randn(batch_size, 4), "loss_fn": lambda out: out.detach().sum()}


def _loss_fn_not_callable(batch_size):
    return {"model": _tiny(), "inputs": torch.randn(batch_size, 4), "loss_fn": "mse"}


def _optimizer_raises(batch_size):
    def make(params):
        raise RuntimeError("lr is required here")

    return {"model": _tiny(), "inputs": torch.randn(batch_size, 4), "optimizer": make}


def _optimizer_not_an_optimizer(batch_size):
    return {"model": _tiny(), "inputs": torch.randn(batch_size, 4), "optimizer": 0.001}


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (_returns_list, ("_returns_list", "returned list", "dict")),
        (_no_inputs, ("missing", "'inputs'")),
        (_unknown_key, ("unknown", "'learning_rate'")),
        (_model_not_module, ("'model' is a function", "torch.nn.Module")),
        (_inputs_without_tensor, ("'inputs' is list with no tensor",)),
        (_loss_not_scalar, ("(4, 2)", "scalar")),
        (_loss_without_grad, ("does not require grad",)),
        (_loss_fn_not_callable, ("'loss_fn' is a str",)),
        (_optimizer_raises, ("RuntimeError", "lr is required here")),
        (_optimizer_not_an_optimizer, ("'optimizer' is a float", "torch.optim.Optimizer")),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_bad_build_result_is_a_plan_error_naming_the_problem(build, expected):
    with pytest.raises(PlanError) as info:
        plan_memory(build, 4)
    for text in expected:
        assert text in str(info.value)


def test_a_good_build_plans():
    # The control for the cases above: the same tiny MLP, given right, plans exactly.
    plan = plan_memory(_build_ok, 4)
    assert plan.exact and plan.warnings == []
    assert plan.breakdown.parameters == (12 + 3 + 6 + 2) * 4


# -- the arguments of plan_memory -----------------------------------------------------------------


class _Recorder:
    """A build that remembers it was called: bad arguments must fail before any tracing."""

    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, batch_size):
        self.calls.append(batch_size)
        return _build_ok(batch_size)


@pytest.mark.parametrize("batch", [0, -1, True, 1.5, "8"], ids=repr)
def test_bad_batch_size_is_named(batch):
    build = _Recorder()
    with pytest.raises(PlanError) as info:
        plan_memory(build, batch)
    assert f"batch size {batch!r}" in str(info.value)
    assert build.calls == []


def test_bad_batch_size_is_refused_with_max_batch_too():
    build = _Recorder()
    with pytest.raises(PlanError, match="batch size 0 "):
        plan_memory(build, 0, max_batch=True, capacity="1GiB")
    assert build.calls == []


def test_neither_batch_nor_max_batch():
    build = _Recorder()
    with pytest.raises(PlanError) as info:
        plan_memory(build)
    assert "--batch" in str(info.value) and "--max-batch" in str(info.value)
    assert build.calls == []


@pytest.mark.parametrize("precision", ["fp8", "BF16x", ""])
def test_bad_precision_is_named_with_the_choices(precision):
    build = _Recorder()
    with pytest.raises(PlanError) as info:
        plan_memory(build, 4, precision=precision)
    message = str(info.value)
    assert f"precision={precision!r}" in message
    assert all(choice in message for choice in ("fp32", "tf32", "bf16", "fp16"))
    assert build.calls == []


@pytest.mark.parametrize("headroom", [1.0, -0.1, 1.5, True, "0.1"], ids=repr)
def test_bad_headroom_is_named(headroom):
    build = _Recorder()
    with pytest.raises(PlanError) as info:
        plan_memory(build, 4, headroom=headroom)
    assert f"headroom={headroom!r}" in str(info.value)
    assert build.calls == []


def test_headroom_is_the_share_of_the_card_kept_free():
    plan = plan_memory(_build_ok, 4, device="t4", headroom=0.5)
    assert plan.usable_bytes == plan.capacity_bytes // 2


@pytest.mark.parametrize("capacity", ["lots", "48 parsecs", "-4GiB", "1.5"], ids=repr)
def test_bad_capacity_string_is_named(capacity):
    build = _Recorder()
    with pytest.raises(PlanError) as info:
        plan_memory(build, 4, device="t4", capacity=capacity)
    assert f"capacity {capacity!r}" in str(info.value)
    assert build.calls == []


@pytest.mark.parametrize("capacity", [0, -5, True, 2.5], ids=repr)
def test_capacity_that_is_not_a_positive_size_is_named(capacity):
    with pytest.raises(PlanError) as info:
        plan_memory(_Recorder(), 4, device="t4", capacity=capacity)
    assert f"capacity={capacity!r}" in str(info.value)


def test_capacity_alone_stands_for_a_card_not_in_the_catalog():
    plan = plan_memory(_build_ok, 4, device=None, capacity="48GiB")
    assert (plan.device, plan.capacity_bytes) == ("custom", 48 << 30)


def test_no_device_and_no_capacity_plans_the_cpu_and_capacity_alone_a_gpu():
    assert plan_memory(_build_ok, 4, device=None).device == "cpu"
    plan = plan_memory(_build_ok, 4, capacity="24GiB")
    assert plan.device == "custom" and plan.capacity_bytes == 24 << 30 and plan.breakdown.cuda_context > 0


def test_unknown_device_lists_every_known_key():
    build = _Recorder()
    with pytest.raises(DeviceError) as info:
        plan_memory(build, 4, device="tpu-v9")
    message = str(info.value)
    assert "'tpu-v9'" in message
    for key in known_devices():
        assert key in message
    assert "--capacity" in message
    assert build.calls == []


def test_ambiguous_device_names_the_cards_it_could_be():
    with pytest.raises(DeviceError) as info:
        plan_memory(_Recorder(), 4, device="a100")
    assert "'a100'" in str(info.value)
    assert "a100-40gb" in str(info.value) and "a100-80gb" in str(info.value)


# -- load_build -----------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.py"
    with pytest.raises(PlanError) as info:
        load_build(f"{path}:build")
    assert str(path) in str(info.value) and "does not exist" in str(info.value)


def test_file_without_the_function_lists_the_functions_it_defines(tmp_path):
    path = _write(
        tmp_path,
        """
        from math import sqrt

        VALUE = 3


        def make_model(width):
            return nn.Linear(width, width)


        class Net(nn.Module):
            pass
        """,
    )
    with pytest.raises(PlanError) as info:
        load_build(str(path))  # no colon: the function is `build`
    message = str(info.value)
    assert "no function 'build'" in message
    assert "adam, make_model, tiny" in message  # what it defines itself, sorted
    assert "sqrt" not in message  # imported, not defined there
    assert "VALUE" not in message


def test_named_function_missing(tmp_path):
    path = _write(tmp_path, "")
    with pytest.raises(PlanError) as info:
        load_build(f"{path}:train_step")
    assert "'train_step'" in str(info.value) and str(path) in str(info.value)


def test_named_attribute_that_is_not_a_function(tmp_path):
    path = _write(tmp_path, "BATCH = 32\n")
    with pytest.raises(PlanError) as info:
        load_build(f"{path}:BATCH")
    assert "BATCH" in str(info.value) and "int" in str(info.value)


def test_default_function_is_build(tmp_path):
    path = _write(
        tmp_path,
        """
        def build(batch_size):
            return dict(model=tiny(), inputs=torch.randn(batch_size, 4), optimizer=adam)
        """,
    )
    for spec in (str(path), f"{path}:"):
        build = load_build(spec)
        assert build.__name__ == "build"
    assert plan_memory(build, 2).exact


def test_import_error_in_the_file_names_the_line(tmp_path):
    path = _write(tmp_path, "\n\nimport trainmedic_no_such_dependency  # IMPORT\n")
    with pytest.raises(PlanError) as info:
        load_build(str(path))
    message = str(info.value)
    assert "ModuleNotFoundError" in message
    assert "trainmedic_no_such_dependency" in message
    assert _line(path, "IMPORT") in message


def test_error_raised_at_import_names_the_line(tmp_path):
    path = _write(tmp_path, "\nSIZES = {'a': 1}\nWIDTH = SIZES['b']  # KEY\n")
    with pytest.raises(PlanError) as info:
        load_build(str(path))
    assert "KeyError" in str(info.value) and _line(path, "KEY") in str(info.value)


def test_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def build(batch_size):\n    return dict(\n")
    with pytest.raises(PlanError) as info:
        load_build(str(path))
    assert "SyntaxError" in str(info.value) and "line 2" in str(info.value)


def test_empty_spec():
    with pytest.raises(PlanError, match="model.py:build"):
        load_build("  ")


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An importable package ``<name>`` in tmp_path; its modules leave sys.modules afterwards."""
    name = f"tm_plan_pkg_{abs(hash(str(tmp_path))):x}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, root
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_module_spec_of_a_missing_module(package):
    name, _ = package
    with pytest.raises(PlanError) as info:
        load_build(f"{name}.absent:build")
    assert f"no module named '{name}.absent'" in str(info.value)
    with pytest.raises(PlanError) as info:
        load_build("trainmedic_no_such_package.models:build")
    assert "'trainmedic_no_such_package.models'" in str(info.value)


def test_module_spec_default_and_named_function(package):
    name, root = package
    (root / "models.py").write_text(
        HEADER
        + "\n\ndef build(batch_size):\n    return dict(model=tiny(), inputs=torch.randn(batch_size, 4))\n"
        "\n\ndef build_small(batch_size):\n    return build(1)\n"
    )
    assert load_build(f"{name}.models").__name__ == "build"
    assert load_build(f"{name}.models:build_small").__name__ == "build_small"
    with pytest.raises(PlanError) as info:
        load_build(f"{name}.models:build_large")
    assert "'build_large'" in str(info.value) and "build, build_small" in str(info.value)


def test_module_that_exists_but_imports_a_missing_dependency_says_which(package):
    name, root = package
    (root / "needs_dep.py").write_text("import trainmedic_no_such_dep\n")
    with pytest.raises(PlanError) as info:
        load_build(f"{name}.needs_dep:build")
    assert "trainmedic_no_such_dep" in str(info.value)
    assert f"no module named '{name}.needs_dep'" not in str(info.value)


def test_module_whose_missing_dependency_is_a_prefix_of_its_name_is_not_called_missing(package):
    # The module exists; what is missing is the module it imports, whose name happens to be a
    # prefix of the module's own dotted name.
    name, root = package
    (root / "models.py").write_text(f"import {name[:-2]}\n")
    with pytest.raises(PlanError) as info:
        load_build(f"{name}.models:build")
    assert f"no module named '{name}.models'" not in str(info.value)
    assert f"'{name[:-2]}'" in str(info.value)


# -- ops fake tensors cannot run ------------------------------------------------------------------

UNTRACEABLE = """
class Net(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.op = op

    def forward(self, x):
        h = self.fc(x)
        if self.op == "mask":
            h = h[h > 0]  # MASK
        elif self.op == "nonzero":
            h = h * torch.nonzero(h).shape[0]  # NONZERO
        return h.sum()


def build(batch_size):
    return dict(model=Net("mask"), inputs=torch.randn(batch_size, 16), optimizer=adam)


def build_nonzero(batch_size):
    return dict(model=Net("nonzero"), inputs=torch.randn(batch_size, 16), optimizer=adam)


def build_exact(batch_size):
    return dict(model=Net(None), inputs=torch.randn(batch_size, 16), optimizer=adam)
"""
#: Linear(16, 8): a 512 B weight and a 32 B bias.
PARAM_BYTES = 16 * 8 * 4 + 8 * 4


@pytest.mark.parametrize(("function", "marker"), [("build", "MASK"), ("build_nonzero", "NONZERO")])
def test_untraceable_op_gives_a_lower_bound_naming_the_users_line(tmp_path, function, marker):
    path = _write(tmp_path, UNTRACEABLE)
    plan = plan_memory(load_build(f"{path}:{function}"), 8)
    assert plan.exact is False
    assert plan.to_dict()["exact"] is False
    [warning] = [w for w in plan.warnings if "lower bound" in w]
    assert _line(path, marker) in warning
    assert "nonzero" in warning  # the op that could not run
    # What does not depend on the failed op is counted exactly: Adam keeps two parameter-sized
    # moments and a 4-byte step counter per parameter tensor on the host.
    assert plan.breakdown.parameters == PARAM_BYTES
    assert plan.breakdown.gradients == PARAM_BYTES
    assert plan.breakdown.optimizer_state == 2 * PARAM_BYTES + 2 * 4
    assert plan.peak_bytes >= 4 * PARAM_BYTES + 8
    assert plan.peak_bytes == plan.breakdown.allocated


@pytest.mark.parametrize("device", ["cpu", "t4", "h100"])
def test_untraceable_op_counts_gradients_and_state_as_the_exact_trace_does(tmp_path, device):
    # The floor for gradients and optimizer state must be what a full trace of the same model
    # gives on that device: on a GPU that is the allocator's blocks, as for the parameters.
    path = _write(tmp_path, UNTRACEABLE)
    partial = plan_memory(load_build(f"{path}:build"), 8, device=device)
    exact = plan_memory(load_build(f"{path}:build_exact"), 8, device=device)
    assert exact.exact and not partial.exact
    assert partial.breakdown.parameters == exact.breakdown.parameters
    assert partial.breakdown.gradients == exact.breakdown.gradients == exact.breakdown.parameters
    assert partial.breakdown.optimizer_state == exact.breakdown.optimizer_state


ITEM = """
class Net(nn.Module):
    def __init__(self, item):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.item = item

    def forward(self, x):
        h = self.fc(x)
        if self.item:
            scale = h.abs().max().item()  # ITEM
        else:
            h.abs().max()
            scale = 1.0
        return h / scale


def build(batch_size):
    return dict(model=Net(True), inputs=torch.randn(batch_size, 16), optimizer=adam)


def build_twin(batch_size):
    return dict(model=Net(False), inputs=torch.randn(batch_size, 16), optimizer=adam)
"""


@pytest.mark.parametrize("device", ["cpu", "t4"])
def test_item_in_forward_warns_with_the_line_and_the_plan_stays_exact(tmp_path, device):
    path = _write(tmp_path, ITEM)
    plan = plan_memory(load_build(f"{path}:build"), 8, device=device)
    twin = plan_memory(load_build(f"{path}:build_twin"), 8, device=device)
    assert plan.exact
    [warning] = plan.warnings  # Adam's own step-counter reads are torch's, not the user's
    assert ".item()" in warning and _line(path, "ITEM") in warning
    assert twin.warnings == []
    # The stand-in value changes nothing about shapes: the same memory as without .item().
    assert (plan.peak_bytes, plan.reserved_bytes, plan.breakdown) == (
        twin.peak_bytes,
        twin.reserved_bytes,
        twin.breakdown,
    )


# -- a model made outside build() -----------------------------------------------------------------

PREBUILT = """
MODEL = nn.Linear(16, 8)  # made at import: real memory, before any planning


def build(batch_size):
    return dict(model=MODEL, inputs=torch.randn(batch_size, 16), optimizer=adam)


def build_inside(batch_size):
    return dict(model=nn.Linear(16, 8), inputs=torch.randn(batch_size, 16), optimizer=adam)
"""


def _is_real(module: nn.Module) -> bool:
    return not any(
        isinstance(t, FakeTensor) for t in (*module.parameters(), *(p.data for p in module.parameters()))
    )


def test_model_made_at_import_plans_and_warns(tmp_path):
    path = _write(tmp_path, PREBUILT)
    plan = plan_memory(load_build(f"{path}:build"), 8)
    inside = plan_memory(load_build(f"{path}:build_inside"), 8)
    assert plan.exact
    assert any("before build()" in w for w in plan.warnings)
    assert inside.warnings == []
    assert (plan.peak_bytes, plan.breakdown) == (inside.peak_bytes, inside.breakdown)


def test_planning_leaves_a_model_made_at_import_real(tmp_path):
    # plan_memory is a library call: a script may plan, then train the very same model.
    path = _write(tmp_path, PREBUILT)
    build = load_build(f"{path}:build")
    model = sys.modules[build.__module__].MODEL
    weight = model.weight.detach().clone()
    plan_memory(build, 8)
    assert _is_real(model)
    assert torch.equal(model.weight.detach(), weight)
    assert model(torch.ones(2, 16)).shape == (2, 8)


@pytest.mark.slow
def test_model_made_at_import_warns_on_every_plan(tmp_path):
    path = _write(tmp_path, PREBUILT)
    build = load_build(f"{path}:build")
    first = plan_memory(build, 8)
    second = plan_memory(build, 8, device="t4")
    solved = plan_memory(build, device="t4", max_batch=True)
    for plan in (first, second, solved):
        assert any("before build()" in w for w in plan.warnings), plan.warnings


def test_an_optimizer_made_before_build_is_planned_as_a_twin_and_left_untouched():
    model = torch.nn.Linear(16, 8)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    plan = plan_memory(
        lambda b: {"model": model, "inputs": torch.randn(b, 16), "optimizer": optimizer}, 4, device="t4"
    )
    assert plan.breakdown.optimizer_state == 2 * plan.breakdown.parameters
    assert optimizer.param_groups[0]["foreach"] is None and not optimizer.state
    assert not isinstance(model.weight, torch._subclasses.fake_tensor.FakeTensor)


def test_tied_weights_of_a_model_made_before_build_stay_tied():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 64)
            self.out = torch.nn.Linear(64, 1000, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, idx):
            return self.out(self.emb(idx))

    outside = Tied()
    before = plan_memory(
        lambda b: {"model": outside, "inputs": torch.randint(0, 1000, (b, 4)), "optimizer": torch.optim.Adam},
        2,
        device="cpu",
    )
    inside = plan_memory(
        lambda b: {"model": Tied(), "inputs": torch.randint(0, 1000, (b, 4)), "optimizer": torch.optim.Adam},
        2,
        device="cpu",
    )
    assert before.breakdown.parameters == inside.breakdown.parameters == 1000 * 64 * 4
    assert before.breakdown.optimizer_state == inside.breakdown.optimizer_state
    assert outside.out.weight is outside.emb.weight


#: nanoGPT's pattern: its configurator reads every argument without `=` as a config file to
#: exec and every `--key=value` as an override, at import.
CONFIGURED = """
import sys

width = 8
for arg in sys.argv[1:]:
    if "=" not in arg:
        exec(open(arg).read())  # CONFIG LINE
    else:
        key, value = arg.removeprefix("--").split("=")
        globals()[key] = int(value)


def build(batch_size):
    return dict(model=nn.Linear(4, width), inputs=torch.randn(batch_size, 4), optimizer=adam)
"""


def test_a_module_reading_its_command_line_at_import_sees_its_own_not_trainmedics(tmp_path, monkeypatch):
    path = _write(tmp_path, CONFIGURED)
    # What `trainmedic plan model.py:build --device t4` leaves in sys.argv; before, the import
    # exec'd a file named "plan".
    monkeypatch.setattr(sys, "argv", ["trainmedic", "plan", f"{path}:build", "--device", "t4"])
    assert load_build(f"{path}:build")(2)["model"].out_features == 8
    assert load_build(f"{path}:build", ["--width=64"])(2)["model"].out_features == 64
    assert sys.argv[:2] == ["trainmedic", "plan"]  # trainmedic's own, back after the import


def test_a_module_exiting_at_import_exits_as_under_python_and_the_command_names_its_line(tmp_path):
    path = _write(tmp_path, CONFIGURED.replace("import sys\n", "import sys\n\nsys.exit(2)  # EXIT LINE\n", 1))
    with pytest.raises(SystemExit) as exited:
        load_build(f"{path}:build", ["--width=64"])
    assert not any(getattr(m, "__file__", None) == str(path.resolve()) for m in list(sys.modules.values()))
    message = str(exit_at_import(f"{path}:build", exited.value, ["--width=64"], "plan"))
    assert message.startswith(
        f"importing {path} called sys.exit(2) (at {path.resolve()}:{_marked(path, 'EXIT LINE')}): "
    )
    assert f"got `{path} --width=64`" in message
    assert message.endswith(f"trainmedic plan {path}:build ... -- --config=small.py")


def _marked(path: Path, marker: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.endswith(marker))
