"""data.build_cache with no Ray running: it starts a local Ray itself and shuts it down after.

Its own module, so that test_ray_build.py's module-wide Ray is shut down before this one starts a
second local cluster: two at once on a 2-vCPU machine risk Ray's startup timeouts.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = [pytest.mark.ray]

pytest.importorskip("ray")


def test_a_ray_it_started_itself_is_shut_down(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(1000.0))
    code = textwrap.dedent(f"""
        import ray
        from trainmedic import data
        built = data.build_cache({str(tmp_path / "x.npy")!r}, cache_dir={str(tmp_path / "c")!r}, workers=1)
        assert built.workers == 1 and built.partitions == 4 and not ray.is_initialized()
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
