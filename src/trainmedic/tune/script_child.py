"""The child process of ``trainmedic tune --script``: one watched run of the script, and its real batch.

Run as ``python -m trainmedic.tune.script_child OUT STEPS WARMUP INTERVAL_MS -- SCRIPT ARGS``.
It watches the script as ``trainmedic run --steps STEPS`` does (the same WatchSession and
runner) and writes to OUT what tune measures: the steady steps' durations, the start-up, how the
run ended, and the batch the model was really called with (the first axis of the root model's
input, ``probe/hooks.py``). The run report has no field for that batch, and tune needs it:
samples/s counted from a ``--set`` value multiplied steps/s by a number the script may never
have used (a script without the option "gained" 1.84x from batch_size=128 over 64 at equal
steps/s). Nothing is diagnosed: the report's verdicts are not what tune compares, and a short
run's report may leave its step times out.

The exit code is the script's, as ``trainmedic run``'s is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

SCHEMA = "trainmedic.tune.run/1"


def main(argv: Sequence[str]) -> int:
    """Run and record; the script's exit code. ``argv`` is tune's own (script.py), never a user's."""
    if len(argv) < 6 or argv[4] != "--":
        raise ValueError(f"expected OUT STEPS WARMUP INTERVAL_MS -- SCRIPT [ARGS...], got {list(argv)!r}")
    report_path, steps, warmup, interval_ms = Path(argv[0]), int(argv[1]), int(argv[2]), float(argv[3])
    script, args = argv[5], list(argv[6:])

    from trainmedic._os import write_text_atomically
    from trainmedic.run.probe import runner
    from trainmedic.run.probe.session import WatchSession

    session = WatchSession(warmup=warmup, max_steps=steps, interval=interval_ms / 1000)
    session.start()
    try:
        outcome = runner.run(script, args)
    finally:
        m = session.stop()
    if outcome.traceback:
        sys.stderr.write(outcome.traceback)
        sys.stderr.flush()
    counts = session.hooks.batch_sizes
    data = {
        "schema": SCHEMA,
        "exit_code": outcome.exit_code,
        "outcome": outcome.outcome,
        "message": outcome.message,
        "setup_s": m.setup_s,
        #: Steady-state steps counted; ``step_seconds`` may hold every k-th of a long run.
        "steady_steps": m.steady_steps,
        "step_seconds": [seconds for _, seconds in m.durations],
        "batch_size": session.hooks.batch_size(),
        "batch_sizes": {str(size): n for size, n in sorted(counts.items())},
    }
    write_text_atomically(report_path, json.dumps(data))
    sys.stdout.flush()
    return outcome.exit_code


if __name__ == "__main__":  # the child's program boundary: its exit code is the script's
    sys.exit(main(sys.argv[1:]))
