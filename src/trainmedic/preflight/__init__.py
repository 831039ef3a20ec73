"""trainmedic preflight: run every experiment tiny on the CPU before spending GPU hours.

``load_settings(Overrides(...))`` reads ``[tool.trainmedic.preflight]`` from pyproject.toml and
the command line; ``run_preflight(settings)`` runs each experiment in a child process with a
budget and returns a PreflightReport: passed, failed (the error and the user's line), stuck
(where, and the config override that explains it), the save -> kill -> resume check for scripts
that use checkpoint.Checkpointer, and the memory plan / session estimate for the target GPU.

Nothing here prints or exits; ``console`` renders the report and ``trainmedic.cli.preflight`` prints it.
"""

from trainmedic.preflight.declarations import Experiment, Overrides, Settings, load_settings
from trainmedic.preflight.model import SCHEMA, ExperimentResult, PreflightReport
from trainmedic.preflight.runner import run_preflight

__all__ = [
    "SCHEMA",
    "Experiment",
    "ExperimentResult",
    "Overrides",
    "PreflightReport",
    "Settings",
    "load_settings",
    "run_preflight",
]
