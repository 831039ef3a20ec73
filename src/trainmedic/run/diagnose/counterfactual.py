"""Which fix a confirmation tries: the top finding's counterfactual, or why there is none.

Only fixes that cannot change what the run computes beyond its data are tried: batches replayed
from memory (a DataLoader's, the user's batch-making function's, an inline reader's at its
line), and a per-step write, save or log call skipped at its line. Anything else (the model,
tiny ops, syncs, copies, a growing pool, a loop-counted step) keeps its estimate, and the report
says why.
"""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

from trainmedic.categories import DATA, HOST_OTHER
from trainmedic.run.diagnose.build import diagnose
from trainmedic.run.probe import counterfactuals
from trainmedic.run.probe.clock import LOADER, LOOP
from trainmedic.run.probe.confirm import Confirmation, Experiment, plan_quads
from trainmedic.run.probe.counterfactuals import Arm, Counterfactual, Site
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.probe.session import Confirmer, Measurements
from trainmedic.run.report.model import Finding

#: Where a DataLoader's per-item work runs: replayed at the loader, whatever the method.
_ITEM_METHODS = ("__getitem__", "__getitems__", "collate_fn", "__call__")
#: Calls whose skipping changes nothing the step computes: writing, saving, logging. Anything
#: else that returns nothing may still synchronise (a thread's join, a queue's put), so it is
#: never skipped.
SKIPPABLE = frozenset(
    {
        "print", "write", "writelines", "flush", "dump", "save", "savez", "savez_compressed",
        "save_image", "imsave", "imwrite", "savefig", "save_pretrained", "save_checkpoint",
        "debug", "info", "warning", "warn", "error", "log", "log_metrics", "log_dict",
        "add_scalar", "add_scalars", "add_image", "add_images", "add_histogram", "add_figure", "add_text",
    }
)  # fmt: skip
#: Kinds whose time is the DataLoader's own machinery, not a function of the user's.
_LOADER_KINDS = ("loader", "collate", "transform")


def confirmer(command: list[str]) -> Confirmer:
    """The session's ``confirm`` callback: diagnose the window, plan the top finding's experiment."""

    def choose(m: Measurements) -> Experiment | Confirmation | None:
        report = diagnose(m, command, RunOutcome(0, "step_limit"))
        if not report.findings:
            return None
        top = report.findings[0]
        planned = counterfactual_for(top, m)
        if isinstance(planned, str):
            return Confirmation(category=top.category, where=top.where, problem=planned)
        quads = plan_quads(
            window_s=sum(d for _, d in m.durations),
            step_s=report.steps.median_s,
            expected=top.expected_speedup,
        )
        return Experiment(planned, category=top.category, where=top.where, quads=quads)

    return choose


def counterfactual_for(finding: Finding, m: Measurements) -> Counterfactual | str:
    """The installed counterfactual of ``finding``, or why none can be tried (in the report's words)."""
    if m.step_source == LOOP:
        # A loop's iterations, counted by tracing its line, time a per-iteration fix unreliably
        # (iterations that read a 16 MB file every time timed at 2 ms): no measurement is better.
        return "the steps were a loop's iterations, whose times are too coarse to measure a fix against"
    if finding.kind == "pool" or "grew" in finding.evidence:
        return "a step that grows is evidenced by the run's own trend (in the finding's evidence), not by a fix tried"
    if finding.category == DATA:
        return _data(finding, m)
    if finding.category == HOST_OTHER:
        return _host_call(finding)
    return f"a {finding.category} fix cannot be tried inside the run without changing what it computes"


def _data(finding: Finding, m: Measurements) -> Counterfactual | str:
    located = _located(finding.where)
    site = counterfactuals.site_of(*located) if located else None
    # A DataLoader's pipeline (its dataset, transforms, collate) holds its own references to the
    # user's functions: it is replayed whole, at the loader.
    loader_used = "torch.utils.data.dataloader" in sys.modules and (
        bool(m.sources.loaders) or m.step_source == LOADER or finding.kind in _LOADER_KINDS
    )
    in_items = site is not None and site.function in _ITEM_METHODS
    if loader_used and (finding.kind in _LOADER_KINDS or in_items or site is None or site.function is None):
        return counterfactuals.replay_loader(Arm())
    if located is None or site is None:
        return f"the data work has no line of the user's to replay ({finding.where or 'none found'})"
    if site.function is None or site.trains:
        return _reads_at_line(finding, located)
    if site.nested or not site.returns:
        return (
            f"{site.function}() at {finding.where} is not a function that returns batches "
            "(nested, or returning nothing)"
        )
    owner, problem = _function_owner(located[0], site)
    if owner is None:
        return problem
    return counterfactuals.replay_function(Arm(), owner, site.function, f"the batches of {site.function}()")


def _reads_at_line(finding: Finding, located: tuple[str, int]) -> Counterfactual | str:
    """Data read inline in the training loop: the reader's call at that line replays its arrays."""
    targets: list[tuple[Any, str]] = []
    if finding.kind == "hdf5" and "h5py" in sys.modules:
        targets.append((sys.modules["h5py"].Dataset, "__getitem__"))
    elif finding.kind == "zarr" and "zarr" in sys.modules:
        targets.append((sys.modules["zarr"].Array, "__getitem__"))
    elif finding.kind == "disk":
        targets += [(sys.modules[name], "load") for name in ("numpy", "torch") if name in sys.modules]
    if not targets:
        return (
            f"the data work at {finding.where} is inline in the training loop and its reader "
            f"({finding.kind or 'unknown'}) returns nothing that can be replayed safely"
        )
    reader = {"hdf5": "HDF5 reads", "zarr": "Zarr reads", "disk": "file loads"}[finding.kind]
    return counterfactuals.replay_at_line(Arm(), targets, *located, f"the {reader} at line {located[1]}")


def _host_call(finding: Finding) -> Counterfactual | str:
    located = _located(finding.where)
    site = counterfactuals.site_of(*located) if located else None
    if located is not None and site is not None and site.call is None and _makes_results(site):
        # Plain code of the user's in a function that returns what the step uses (a batch built
        # by hand): its results replayed, as for data.
        maker, problem = _function_owner(located[0], site)
        if maker is None:
            return problem
        assert site.function is not None  # _makes_results checked
        return counterfactuals.replay_function(
            Arm(), maker, site.function, f"the results of {site.function}()"
        )
    if located is None or site is None or site.call is None:
        return f"the host work at {finding.where or 'no line'} is not one call whose result goes unused"
    filename, line = located
    if site.call.rpartition(".")[2] not in SKIPPABLE:
        return f"{site.call}() at {finding.where} may do more than write or log, so it is not skipped"
    namespace = counterfactuals.module_namespace(filename)
    if namespace is None:
        return f"{filename} is not a loaded module"
    parts = site.call.split(".")
    owner: Any
    if len(parts) == 1:
        if parts[0] not in namespace and not hasattr(builtins, parts[0]):
            return f"{site.call}() is not a name of {Path(filename).name}'s globals"
        owner = namespace  # a global (or a builtin, shadowed in this module only)
    else:
        if parts[0] not in namespace:
            return f"{parts[0]} in {site.call}() is not one of {Path(filename).name}'s globals"
        owner = namespace[parts[0]]
        for part in parts[1:-1]:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, parts[-1]):
            return f"{site.call} cannot be found from {Path(filename).name}'s globals"
    try:
        return counterfactuals.skip_call(Arm(), owner, parts[-1], filename, line, f"{site.call}()")
    except (AttributeError, TypeError) as exc:
        return f"{site.call} cannot be replaced for the experiment ({exc})"


def _makes_results(site: Site) -> bool:
    return site.function is not None and not site.nested and site.returns and not site.trains


def _function_owner(filename: str, site: Site) -> tuple[Any, str]:
    namespace = counterfactuals.module_namespace(filename)
    if namespace is None:
        return None, f"{filename} is not a loaded module"
    assert site.function is not None  # the caller checked
    owner: Any = namespace
    if site.klass is not None:
        owner = namespace.get(site.klass)
        if not isinstance(owner, type):
            return None, f"class {site.klass} is not one of {Path(filename).name}'s globals"
    found = owner.get(site.function) if isinstance(owner, dict) else owner.__dict__.get(site.function)
    code = getattr(found, "__code__", None)
    if code is None or code.co_firstlineno != site.def_line:
        return (
            None,
            f"{site.function}() is wrapped or redefined, so the function at its line cannot be replaced",
        )
    return owner, ""


def _located(where: str | None) -> tuple[str, int] | None:
    if not where or ":" not in where:
        return None
    filename, _, line = where.rpartition(":")
    if not line.isdigit():
        return None
    return str(Path(filename).resolve()), int(line)
