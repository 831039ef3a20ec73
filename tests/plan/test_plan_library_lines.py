"""A hotspot inside an installed library (transformers, timm...) is charged to the user's line
that uses the library, never to a line in the library's own files: a model class from a package
under site-packages is no code of the user's.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from trainmedic.errors import PlanError
from trainmedic.plan import load_build, plan_memory

PACKAGE = "trainmedic_fake_zoo"

LIBRARY = """\
import torch
from torch import nn


class PairwiseNet(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim))

    def forward(self, x):
        h = x @ self.weight
        cost = ((h[:, :, None] - h[:, None]) ** 2).sum(-1)  # B·N·N·D: the step's largest tensor
        return cost.mean()


class GatedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        if x.abs().max().item() > 100:  # a value steering control flow: a stand-in under planning
            x = x / 100
        return x @ self.weight


def load_weights(path):
    raise FileNotFoundError(f"no checkpoint at {path}")
"""

BUILD = f"""\
import torch
from {PACKAGE} import GatedNet, PairwiseNet, load_weights


def build(batch_size):
    model = PairwiseNet(64)  # MODEL
    x = torch.randn(batch_size, 128, 64)
    return dict(model=model, inputs=x, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))


def build_gated(batch_size):
    model = GatedNet()  # GATED
    return dict(model=model, inputs=torch.randn(batch_size, 8))


def build_loading(batch_size):
    load_weights("weights.pt")  # LOAD
    return build(batch_size)
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A build file in a project folder, and the library it imports installed under site-packages."""
    package = tmp_path / "venv" / "lib" / "site-packages" / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delitem(sys.modules, PACKAGE, raising=False)
    source = tmp_path / "project" / "model.py"
    source.parent.mkdir()
    source.write_text(textwrap.dedent(BUILD))
    yield source, package / "__init__.py"
    sys.modules.pop(PACKAGE, None)


def _line(path: Path, marker: str) -> str:
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# {marker}"):
            return f"{path.resolve()}:{number}"
    raise AssertionError(f"no line marked {marker!r} in {path}")


def test_a_library_models_hotspot_is_at_the_users_line(project):
    source, library = project
    plan = plan_memory(load_build(f"{source}:build"), 4, device="t4")
    top = plan.hotspots[0]
    assert top.where == _line(source, "MODEL"), plan.hotspots
    assert "in PairwiseNet" in top.op  # the library's ops, named by its module, charged to the user's line
    assert not any(str(library.resolve()) in h.where for h in plan.hotspots)


def test_a_build_that_raises_inside_a_library_names_the_users_line(project):
    source, library = project
    with pytest.raises(PlanError) as caught:
        plan_memory(load_build(f"{source}:build_loading"), 4, device="t4")
    message = str(caught.value)
    assert f" at {_line(source, 'LOAD')}" in message
    assert str(library.resolve()) not in message


def test_an_item_inside_a_librarys_forward_is_warned_at_the_users_line(project):
    source, library = project
    plan = plan_memory(load_build(f"{source}:build_gated"), 4, device="t4")
    assert plan.warnings == [
        f".item() at {_line(source, 'GATED')} has no value under planning; a stand-in value let the step go on"
    ]
