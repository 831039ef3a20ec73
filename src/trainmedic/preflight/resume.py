"""The resume check: save -> SIGKILL -> resume, compared with the uninterrupted run.

Run A (the normal preflight run) saved steps s1 < ... < sn, with a content digest per object.
Run B starts fresh and is SIGKILLed (whole process group) right after its save of the middle step
k (the injected sitecustomize freezes it there, so the kill point is the same every time). Run C
gets B's directory: it must restore step k or later and finish; every save C writes after the
resume point must match A's digests, object by object. B's saves up to k are compared with A's
too: two fresh runs that already differ mean the script is not deterministic, and then no resume
can be judged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypedDict

from trainmedic.preflight import child
from trainmedic.preflight.estimate import format_budget
from trainmedic.preflight.events import Events, Save, read_events
from trainmedic.preflight.model import ResumeCheck, Where
from trainmedic.preflight.process import RunOutcome, file_size, run_child

#: What a killed run leaves that would be mistaken for run C's own (its checkpoints and events stay).
_INSTRUMENT_FILES = (
    child.STACK,
    child.FAULTHANDLER,
    child.CONFIGS,
    child.EXCEPTION,
    child.TIMELINE,
    child.SITE_PID,
    child.SITE_ERRORS,
)


class _Killed(TypedDict):
    """The verdict's fields that every run C outcome shares (typed, so that ``**base`` is checked)."""

    killed_after_step: int
    skipped: list[tuple[str, str]]


class _Resumed(_Killed):
    """And those of a run C that restored a step at or after the kill."""

    restored_step: int
    compared_steps: list[int]


def check_resume(
    run_a: Events,
    argv: list[str],
    cwd: Path,
    env_for: Callable[[Path, int | None], Mapping[str, str]],
    workdir: Path,
    budget: float,
    describe_failure: Callable[[RunOutcome], tuple[str, Where | None]],
    progress: Callable[[str], None] = lambda text: None,
) -> ResumeCheck:
    steps = run_a.save_steps()
    if len(steps) < 2:
        return ResumeCheck(
            "inconclusive",
            f"not checked: the run saved only step {steps[0] if steps else 'none'}; it needs two saves to kill "
            "between them (let the tiny run do a few more steps)",
        )
    kill_at = steps[(len(steps) - 1) // 2]
    progress(f"resume check: run B, killed after its save of step {kill_at}")
    dir_b = workdir / "resume"
    b = run_child(argv, cwd, env_for(dir_b, kill_at), dir_b, budget, kill_after_save=kill_at)
    if b.killed_after_save is None:
        return _b_did_not_save(b, kill_at, describe_failure)
    killed = b.killed_after_save
    events_b = read_events(dir_b / child.EVENTS)
    differs = _first_difference(run_a.by_step(), events_b.by_step(), lambda s: s <= killed)
    if differs is not None:
        step, names = differs
        return ResumeCheck(
            "nondeterministic",
            f"not checked: two fresh runs already differ at step {step} in {_names(names)}, before any kill; "
            "the run is not deterministic (seed every RNG at the start, avoid time- or pid-based seeds), "
            "so a resumed run cannot be compared with it",
            killed_after_step=killed,
            diverged_step=step,
            objects=names,
        )

    for name in _INSTRUMENT_FILES:
        (dir_b / name).unlink(missing_ok=True)
    offset = file_size(dir_b / child.EVENTS)
    progress(f"resume check: run C, resuming from run B's checkpoints (step {killed})")
    c = run_child(argv, cwd, env_for(dir_b, None), dir_b, budget)
    events_c = read_events(dir_b / child.EVENTS, offset)
    restore = events_c.restores[0] if events_c.restores else None
    skipped = _skipped(restore)
    base: _Killed = {"killed_after_step": killed, "skipped": skipped}
    if c.stuck or c.returncode != 0 or c.start_error:
        error, where = describe_failure(c)
        state = (
            f"was still running after its {format_budget(budget)} budget" if c.stuck else f"failed: {error}"
        )
        return ResumeCheck("resume_failed", f"the resumed run {state}", where=where, **base)
    restored = restore.get("step") if restore else None
    if restore is None:
        return ResumeCheck(
            "not_restored",
            f"the second run never called restore(), although run B was killed after saving step {killed}: "
            "call start = ckpt.restore(model=..., optimizer=...) before the loop and start from it",
            **base,
        )
    if not isinstance(restored, int) or restored < killed:
        why = f" ({_skipped_text(skipped)})" if skipped else ""
        got = "nothing (step 0)" if not restored else f"step {restored}"
        return ResumeCheck(
            "not_restored",
            f"restore() resumed {got}, but step {killed} had been saved before the kill{why}",
            restored_step=restored if isinstance(restored, int) else None,
            **base,
        )
    a_saves, c_saves = run_a.by_step(), events_c.by_step()
    compared = sorted(s for s in c_saves if s > restored and s in a_saves)
    resumed: _Resumed = {**base, "restored_step": restored, "compared_steps": compared}
    if not compared:
        return ResumeCheck(
            "inconclusive",
            f"resumed from step {restored}, but no later save to compare with the uninterrupted run",
            **resumed,
        )
    differs = _first_difference(a_saves, c_saves, lambda s: s > restored)
    if differs is not None:
        step, names = differs
        return ResumeCheck(
            "diverged",
            f"diverged at step {step} in {_names(names)}: after resuming from step {restored} the run no longer "
            f"matches the uninterrupted one. State that is used but not checkpointed (an RNG, a counter, "
            f"the data position) must be passed to ckpt.save() and ckpt.restore()",
            diverged_step=step,
            objects=names,
            **resumed,
        )
    later = f"{len(compared)} later save{'s' if len(compared) != 1 else ''} compared"
    return ResumeCheck(
        "identical",
        f"resume identical from step {restored} (killed after the save of step {killed}; {later})",
        **resumed,
    )


def _b_did_not_save(
    b: RunOutcome, kill_at: int, describe_failure: Callable[[RunOutcome], tuple[str, Where | None]]
) -> ResumeCheck:
    if b.stuck:
        return ResumeCheck(
            "resume_failed", f"a second fresh run did not save step {kill_at} within its budget"
        )
    if b.returncode != 0 or b.start_error:
        error, where = describe_failure(b)
        return ResumeCheck(
            "resume_failed", f"a second fresh run failed before saving step {kill_at}: {error}", where=where
        )
    return ResumeCheck(
        "inconclusive",
        f"not checked: a second fresh run ran to its end instead of stopping after its save of step {kill_at} "
        "(it saved other steps than the first run, or saved without checkpoint.Checkpointer.save)",
    )


def _first_difference(
    a: dict[int, Save], b: dict[int, Save], keep: Callable[[int], bool]
) -> tuple[int, list[str]] | None:
    """The first step whose user objects differ, and their names.

    The Checkpointer's own ``_rng`` is left out: it holds every global stream the process loaded,
    including NumPy's, which NumPy seeds from the OS at import (trainmedic itself imports NumPy),
    so two fresh runs of a script that never touches NumPy's RNG differ there for nothing. A
    stream the run really draws from shows up in the objects it feeds (model, data).
    """
    for step in sorted(s for s in a if s in b and keep(s)):
        da, db = a[step].digests, b[step].digests
        names = sorted(n for n in set(da) | set(db) if not n.startswith("_") and da.get(n) != db.get(n))
        if names:
            return step, names
    return None


def _names(names: list[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    if len(quoted) == 1:
        return f"object {quoted[0]}"
    return "objects " + ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _skipped(restore: dict | None) -> list[tuple[str, str]]:
    out = []
    for item in (restore or {}).get("skipped") or []:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            out.append((str(item[0]), str(item[1])))
    return out


def _skipped_text(skipped: list[tuple[str, str]]) -> str:
    return "; ".join(f"skipped {Path(path).name}: {reason}" for path, reason in skipped)
