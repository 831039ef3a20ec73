"""Time spent importing a module is the import's, whatever the module's body calls."""

from __future__ import annotations

import importlib

BODY = """
import sys
import torch.nn
from trainmedic.run.probe.frames import FrameClassifier

CLASSIFIED = FrameClassifier(cwd={cwd!r}).classify(sys._getframe())  # the sampler's view, mid-import
LAYER = torch.nn.Linear(2, 2)
"""


def test_a_module_body_run_by_an_import_is_import_time_not_a_forward_pass(tmp_path, monkeypatch):
    # Like `import torch` at a script's first line: torch.nn builds its classes while importing.
    (tmp_path / "heavy_module_under_test.py").write_text(BODY.format(cwd=str(tmp_path)), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    classified = importlib.import_module("heavy_module_under_test").CLASSIFIED
    assert (classified.category, classified.kind) == ("host_other", "import")
    assert classified.where == "heavy_module_under_test.py:6"
