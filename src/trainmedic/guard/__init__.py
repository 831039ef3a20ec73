"""guard: keep long runs alive and catch their pitfalls before they run.

``Checkpointer`` writes atomic, verified checkpoints of any objects, resumes them exactly (RNG
streams and data position included), saves before a deadline or on SIGTERM/SIGUSR1 and ends the
run cleanly. ``trainmedic.guard.lint`` reads training code and names the seeds' pitfalls (TM1xx)
at their line; it never imports or runs the code it reads. ``trainmedic.guard.preflight`` runs
every declared experiment for a few tiny steps before GPU hours are spent.
"""

from trainmedic.errors import CheckpointError, CheckpointMismatchError, Preempted
from trainmedic.guard.checkpoint import Checkpointer
from trainmedic.guard.records import CheckpointInfo, RestoreInfo, SaveInfo

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointMismatchError",
    "Checkpointer",
    "Preempted",
    "RestoreInfo",
    "SaveInfo",
]
