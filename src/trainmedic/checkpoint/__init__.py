"""checkpoint: keep long runs alive.

``Checkpointer`` writes atomic, verified checkpoints of any objects, resumes them exactly (RNG
streams and data position included), saves before a deadline or on SIGTERM/SIGUSR1 and ends the
run cleanly. Its pieces: ``store`` (atomic directories, manifest, retention), ``serialize``,
``state`` (what each object saves), ``rng``, ``schedule`` (when a save writes, signals),
``ranks`` (torchrun), ``readback`` (verification), ``preflight_log`` (what a preflight run reads
back from the Checkpointer in its child).
"""

from trainmedic.checkpoint.checkpointer import Checkpointer
from trainmedic.checkpoint.records import CheckpointInfo, RestoreInfo, SaveInfo
from trainmedic.errors import CheckpointError, CheckpointMismatchError, Preempted

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointMismatchError",
    "Checkpointer",
    "Preempted",
    "RestoreInfo",
    "SaveInfo",
]
