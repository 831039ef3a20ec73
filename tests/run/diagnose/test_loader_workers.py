"""A DataLoader whose workers cannot keep up: the finding names the code the workers run.

pytorch/examples' MNIST on the H200 with its GPU setting (``num_workers=1``) and a heavy NumPy
transform: 96 % of a 74.7 ms step waiting in the loader (the transform removed: 2.9 ms, ×26).
The report said "data at main.py:39", the loop's ``for`` line, and promised ×3.6.
"""

import dataclasses

from trainmedic.run.diagnose import diagnose
from trainmedic.run.probe.worker_items import ItemProfile

ms = 1e-3
STEPS = 50


def _mnist_transform(measure, cores, items=True):
    step = 74.7 * ms
    lines = {
        ("data", "loader", "main.py:39", "main.py:36:train"): 0.96 * step * STEPS,
        ("compute", "backward", "main.py:45", "main.py:36:train"): 0.04 * step * STEPS,
    }
    m = measure(lines, [step] * STEPS)
    # one item of the transform, as fetched in the training process after the run (assumed 2.2 ms:
    # 32 items a batch, one worker, 70 ms a batch)
    profile = ItemProfile(
        1,
        32,
        items=16,
        seconds_per_item=2.2 * ms,
        where="main.py:24",
        function="heavy_augment",
        share=0.97,
        cores=cores,
    )
    return dataclasses.replace(m, worker_items=profile if items else None)


def test_the_workers_code_is_the_finding_line_and_more_workers_the_fix(completed, measure):
    report = diagnose(_mnist_transform(measure, cores=16), ["main.py"], completed)
    top = report.findings[0]
    assert (top.category, top.kind) == ("data", "loader")
    assert top.where == "main.py:24"  # heavy_augment, not the for line
    assert top.title == "The DataLoader's 1 worker cannot keep up at main.py:24"
    assert (
        "one item took 2.2 ms fetched in this process after the run (16 items), 97% of it in heavy_augment()"
        in top.evidence
    )
    # 70.4 ms a batch against 3 ms of the rest of the step: 24 workers would hide it, 15 are there
    assert (
        "Raise `num_workers` from 1 to 15 (about 24 would hide it; this process may use 16 cores)" in top.fix
    )
    assert top.expected_speedup > 8  # 15 workers: 4.7 ms a batch, the wait from 71.7 ms to 1.7 ms


def test_with_no_core_to_spare_the_fix_is_a_cheaper_transform(completed, measure):
    top = diagnose(_mnist_transform(measure, cores=2), ["main.py"], completed).findings[0]
    assert top.where == "main.py:24"
    assert "More workers cannot help here (this process may use 2 cores" in top.fix
    assert "make heavy_augment() at main.py:24 cheaper" in top.fix
    assert 2 < top.expected_speedup < 4


def test_without_the_items_profile_the_loop_line_stays(completed, measure):
    top = diagnose(_mnist_transform(measure, cores=16, items=False), ["main.py"], completed).findings[0]
    assert top.where == "main.py:39" and "worker" not in top.title
