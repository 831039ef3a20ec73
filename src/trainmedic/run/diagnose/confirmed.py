"""What the confirmation measured, read into the findings: measured gains, a refuted verdict.

A finding whose fix was tried carries a :class:`MeasuredGain` and is ranked by it; the others
keep their estimate. A fix that bought almost nothing refutes the finding: it goes behind the
findings that may still buy something, and the report says what the step spends its time on
instead. Where no fix could be tried, a note says the gains are estimates, and why.
"""

from __future__ import annotations

import dataclasses
import statistics

from trainmedic.run.probe.confirm import Confirmation
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.probe.session import Measurements
from trainmedic.run.report.model import Finding, MeasuredGain
from trainmedic.units import format_seconds

#: A measured gain below this, with every block pair below REFUTED_HIGH, refutes the finding: the
#: step did not wait for what the fix removed.
REFUTED = 1.1
REFUTED_HIGH = 1.2


def apply(
    findings: list[Finding], confirmation: Confirmation | None, *, step_limit: int | None
) -> tuple[list[Finding], list[str]]:
    """``findings`` with the confirmation's measured gain, re-ranked, and the notes that explain it.
    ``step_limit``: the run's ``--steps``; a full run (None) is told how to get a confirmation."""
    if not findings:
        return findings, []
    if confirmation is None:
        if step_limit is not None:
            return findings, []
        return findings, [
            "What each fix buys is estimated from its sampled share. A diagnosis-only run "
            "(trainmedic run --steps 50 ...) also tries the top finding's fix for a few more steps "
            "and measures what it buys; a full run never changes what it trains."
        ]
    index = next(
        (
            i
            for i, f in enumerate(findings)
            if f.category == confirmation.category and f.where == confirmation.where
        ),
        None,
    )
    if index is None or not confirmation.measured:
        why = confirmation.problem or "the finding it was to try is not in the report"
        return findings, [f"What each fix buys is estimated from its sampled share: {why}."]
    finding = findings[index]
    measured = MeasuredGain(
        gain=round(confirmation.gain, 2),
        low=round(min(confirmation.pair_gains, default=confirmation.gain), 2),
        high=round(max(confirmation.pair_gains, default=confirmation.gain), 2),
        change=confirmation.change or "",
        as_is_steps=len(confirmation.as_is),
        fixed_steps=len(confirmation.fixed),
        as_is_median_s=round(statistics.median(confirmation.as_is), 6),
        fixed_median_s=round(statistics.median(confirmation.fixed), 6),
        estimated=finding.expected_speedup,
    )
    confirmed = dataclasses.replace(finding, measured=measured)
    rest = findings[:index] + findings[index + 1 :]
    cut = (
        f" The script ended after {confirmation.blocks} of its {confirmation.planned_blocks} blocks."
        if confirmation.blocks < confirmation.planned_blocks
        else ""
    )
    notes = [
        _tried(confirmed, measured)
        + f" The confirmation took {format_seconds(confirmation.seconds)} after the window.{cut}"
    ]
    if refuted(confirmed):
        # Behind every finding that may still buy something: this one was measured not to.
        ranked = sorted(rest, key=lambda f: f.gain, reverse=True) + [confirmed]
        lead = ranked[0] if ranked[0] is not confirmed else None
        notes.append(
            f"So {confirmed.where or 'its line'} is not what the step waits for: its time overlaps with other "
            "work, which takes as long without it"
            + (
                f"; the step spends its time on {lead.category} ({lead.share:.0%} sampled) instead."
                if lead is not None
                else "; nothing else sampled stands out, so the step waits on work the sampler does not "
                "see (another thread, a worker process, the device), and no bottleneck is named."
            )
        )
        return ranked, notes
    # The others keep their order; the confirmed one goes before the first it buys at least as much as.
    at = next((i for i, f in enumerate(rest) if measured.gain >= f.gain), len(rest))
    return [*rest[:at], confirmed, *rest[at:]], notes


def settle(outcome: RunOutcome, m: Measurements, *, cut_short: bool) -> RunOutcome:
    """How the run ended, once the confirmation is accounted for. A script that failed while the
    confirmation's fix was in (replayed batches, a skipped call) failed on the fix, not on its
    own: the window's diagnosis stands, its gain stays an estimate, and the run stopped at its
    --steps as asked. ``m.confirmation`` then says why."""
    if not cut_short or m.confirmation is None or outcome.outcome not in ("exception", "exit"):
        return outcome
    m.confirmation = dataclasses.replace(
        m.confirmation, problem=f"the script failed while the confirmation ran ({outcome.message})"
    )
    return RunOutcome(0, "step_limit", f"stopped after {m.max_steps} steady-state steps (--steps)")


def refuted(finding: Finding) -> bool:
    """Whether the fix was tried and bought almost nothing: the finding is not the step's cost."""
    m = finding.measured
    return m is not None and m.gain < REFUTED and m.high < REFUTED_HIGH


def _tried(finding: Finding, measured: MeasuredGain) -> str:
    return (
        f"Confirmed in this run: with {measured.change}, {measured.fixed_steps} steps took a median "
        f"{format_seconds(measured.fixed_median_s)} against {format_seconds(measured.as_is_median_s)} as they are "
        f"({measured.as_is_steps} steps, alternated): ×{measured.gain:.2f} measured "
        f"(×{measured.low:.2f}-×{measured.high:.2f} across block pairs), ×{measured.estimated:.2f} estimated "
        f"from the sampled share for {finding.category} at {finding.where or 'its line'}."
    )
