"""Optional dependencies: a missing one names its extra; a check alone does not import it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainmedic.errors import MissingExtraError, require, require_installed


def test_a_missing_package_names_the_extra_to_install():
    for check in (require, require_installed):
        with pytest.raises(MissingExtraError, match=r"pip install 'trainmedic\[widgets\]'") as caught:
            check("no_such_package_for_trainmedic", "widgets", "Drawing widgets")
        assert caught.value.extra == "widgets" and "Drawing widgets" in str(caught.value)


def test_checking_that_a_package_is_installed_does_not_import_it():
    # In a fresh interpreter: `trainmedic run --nproc` starts ranks that import torch (3 s); the
    # process that only starts them must not pay for it too.
    code = (
        "import sys; from trainmedic.errors import require_installed; "
        "require_installed('torch', 'torch', 'x'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
