"""One report for a torchrun job: per-rank step times, the straggler and why, the bottleneck.

Ranks that synchronise every step (DDP's all-reduce) all take as long as the slowest one, so
their step times hardly differ; what differs is how long each *waits* for the others in
collectives (probe/collectives.py measures it). The rank that waits least is the one the others
wait for: the straggler. Why it is slow is the category in which its step time exceeds the
median other rank's: data (its batches come slower), compute, or host work.

The merged report is the straggler's own report — its bottleneck sets the pace of the whole
job — or the lowest rank's when no rank stands out; its time waiting in collectives is moved
from ``compute`` (where a stack sample inside backward puts it) to ``sync``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
import time
from typing import Any

from trainmedic._os import HOST, pid_alive
from trainmedic.categories import CATEGORIES, COMPUTE, DATA, SYNC
from trainmedic.run.diagnose import amdahl, margin
from trainmedic.run.probe.session import Measurements
from trainmedic.run.report.model import DeviceInfo, Finding, RankSummary, Report, StepStats, Straggler
from trainmedic.units import format_seconds

#: A rank is a straggler when the others wait this much longer than it does, per step: a share
#: of the step, and never less than STRAGGLER_MIN_S (timer noise on a fast step).
STRAGGLER_SHARE = 0.05
STRAGGLER_MIN_S = 0.002
#: Without a straggler, ranks that all wait this share of the step are bound by communication.
COMMUNICATION_SHARE = 0.2
#: What accumulating gradients over 4 micro-batches (model.no_sync) does to the all-reduce time.
ACCUMULATION = 4
DIED = "died"
#: A rank whose process still ran when the parts were merged (rank 0's own script had failed).
RUNNING = "running"
#: How a rank's error reads when it only lost its connection to a rank that failed first (gloo,
#: NCCL, the c10d store): a consequence, never the cause.
_PEER_LOST = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|remote process exited|Read error|NCCL communicator was aborted"
    r"|socket timeout|Socket Timeout|recvBytes|Connection refused",
    re.IGNORECASE,
)

_FIXES = {
    DATA: (
        "give every rank the same fast input path: trainmedic.data.load(...) builds one cache per node that every "
        "rank maps, shards it across ranks and serves each batch with one gather; check that rank {rank} does not "
        "read a slower disk, a remote share or a larger shard"
    ),
    COMPUTE: (
        "make rank {rank}'s work equal to the others': check that its inputs are not larger (uneven lengths, a bigger "
        "shard), that it is alone on its CPU cores or GPU (top, nvidia-smi) and that its device is not throttled"
    ),
}
_OTHER_FIX = (
    "rank {rank} does host work the others do not ({cause}): logging, metrics or checkpoint writes on one rank "
    "stall every rank at the next all-reduce; do them asynchronously, or equally rarely on every rank"
)


def rank_payload(report: Report, m: Measurements, ended_at: float | None = None) -> dict[str, Any]:
    """What a rank writes into its part: its report, its per-step waits in collectives, and the
    wall-clock time its script ended (``ended_at``, now when not known)."""
    return {
        "report": report.to_dict(),
        "waits": [round(s, 6) for _, s in m.collectives.waits],
        "kinds": list(m.collectives.kinds),
        "untimed": list(m.collectives.untimed),
        # When ranks fail one after another, the first is the cause: the script's end, not the
        # part's write (diagnosis takes longer on some ranks than on others).
        "ended_at": ended_at if ended_at is not None else time.time(),
    }


def merge(
    parts: dict[int, dict[str, Any]], world_size: int, command: list[str], exit_code: int | None = None
) -> Report:
    """The job's report from its ranks' parts (see module docstring); missing ranks are named as dead."""
    reports: dict[int, Report] = {}
    rows: list[RankSummary] = []
    ended: dict[int, float] = {}
    waits: dict[int, float] = {}
    seconds: dict[int, dict[str, float]] = {}
    kinds: list[str] = []
    untimed: list[str] = []
    # Read on the whole error: the one-line form can cut "Connection closed by peer" short.
    peer_lost: set[int] = set()
    for rank in range(world_size):
        part = parts.get(rank)
        if part is None or part.get("state") != "done" or "report" not in part:
            rows.append(_missing(rank, part, parts))
            continue
        report = Report.from_dict(part["report"])
        if report.message and _PEER_LOST.search(report.message):
            peer_lost.add(rank)
        report.message = short_message(report.message)
        reports[rank] = report
        ended[rank] = float(part.get("ended_at") or math.inf)
        samples = [float(w) for w in part.get("waits", [])]
        waits[rank] = statistics.median(samples) if samples else 0.0
        kinds += [k for k in part.get("kinds", []) if k not in kinds]
        untimed += [k for k in part.get("untimed", []) if k not in untimed]
        seconds[rank] = _seconds(report, waits[rank])
        rows.append(_summary(rank, part, report, seconds[rank]))

    measured = {r.rank: r for r in rows if r.outcome not in (DIED, RUNNING) and r.steps > 0}
    # Waits that were not measured (CUDA) would make every rank look equally idle: no verdict.
    straggler = None if untimed else _straggler(measured, seconds, reports, kinds)
    base_rank = straggler.rank if straggler else (min(reports) if reports else None)
    merged = _base(reports, base_rank, command, rows)
    if base_rank is not None:
        _move_wait_to_sync(merged, waits[base_rank])
    findings = list(merged.findings)
    if straggler is not None:
        findings.insert(0, _straggler_finding(straggler, measured))
    elif measured and not untimed:
        communication = _communication_finding(measured, kinds)
        if communication is not None:
            findings.insert(0, communication)
    failed = [
        r
        for r in rows
        if r.outcome in (DIED, RUNNING) or (r.exit_code not in (0, None) and r.outcome != "interrupted")
    ]
    failed.sort(key=lambda r: (_blame(r, peer_lost), ended.get(r.rank, math.inf), r.rank))
    outcome, message, code = merged.outcome, merged.message, merged.exit_code
    if failed:
        first = failed[0]
        outcome = "exception" if first.outcome in (DIED, RUNNING) else first.outcome
        verb = {DIED: "died", RUNNING: "did not finish"}.get(first.outcome, "failed")
        message = f"rank {first.rank} {verb}: {first.message or 'no message'}"
        code = first.exit_code if first.exit_code not in (None, 0) else 1
    if exit_code is not None:
        code = exit_code
    notes = [_ranks_note(rows, world_size, base_rank, straggler is not None)] + list(merged.notes)
    if untimed:
        notes.insert(
            1,
            (
                f"not timed: {', '.join(untimed)} — on a GPU a collective completes on the device after the host has "
                "moved on, so the waits column and the straggler verdict are left out; compare the ranks' step "
                "breakdowns instead"
            ),
        )
    # The rank's close call holds only while its first lever still leads the merged report.
    close_call = list(merged.close_call)
    if close_call and (
        not findings or findings[0].category != close_call[0] or merged.bottleneck != close_call[0]
    ):
        close_call = []
        notes = [n for n in notes if not n.startswith(margin.note_start(merged.close_call[0]))]
    return dataclasses.replace(
        merged,
        command=command,
        close_call=close_call,
        findings=findings,
        ranks=rows,
        straggler=straggler,
        outcome=outcome,
        message=message,
        exit_code=code,
        notes=notes,
    )


def short_message(message: str | None, limit: int = 240) -> str | None:
    """A rank's error on one line: gloo and NCCL errors carry pages of C++ context."""
    if not message or ("\n" not in message and len(message) <= limit):
        return message
    where = message[message.rfind(" (at ") :] if message.rstrip().endswith(")") and " (at " in message else ""
    first = " ".join(message.split("\n", 1)[0].split())
    if len(first) > limit:
        first = first[: limit - 1] + "…"
    return first + (" …" + where.strip() if where and where.strip() not in first else "")


# -- per rank -------------------------------------------------------------------------------------


def _seconds(report: Report, wait_s: float) -> dict[str, float]:
    """Seconds per step in each category, with the measured wait taken out of compute and sync."""
    step = report.steps.median_s
    per = {c: report.breakdown.get(c, 0.0) * step for c in CATEGORIES}
    busy = per[COMPUTE] + per[SYNC]
    wait = min(wait_s, busy) if busy else 0.0
    per[SYNC], per[COMPUTE] = wait, busy - wait
    return per


def _summary(rank: int, part: dict[str, Any], report: Report, per: dict[str, float]) -> RankSummary:
    """A rank's row from its report and its seconds per step by category (``_seconds``)."""
    who = part.get("identity", {})
    other = sum(s for c, s in per.items() if c not in (DATA, COMPUTE, SYNC))
    return RankSummary(
        rank=rank,
        host=str(who.get("host", "")),
        pid=int(who.get("pid", 0)),
        outcome=report.outcome,
        exit_code=report.exit_code,
        message=report.message,
        steps=report.steps.count,
        median_s=report.steps.median_s,
        p90_s=report.steps.p90_s,
        data_s=per[DATA],
        wait_s=per[SYNC],
        compute_s=per[COMPUTE],
        other_s=other,
        # Its own bottleneck once waiting for the others counts as sync, not as backward.
        bottleneck=max(CATEGORIES, key=lambda c: per[c]) if report.steps.median_s else report.bottleneck,
    )


def _blame(r: RankSummary, peer_lost: set[int]) -> int:
    """Which failure is the cause: a script's own error, then a rank that died without a word,
    then an error that only says a peer went away, then a rank still running."""
    if r.outcome == RUNNING:
        return 3
    if r.outcome == DIED:
        return 1
    return 2 if r.rank in peer_lost else 0


def _missing(rank: int, part: dict[str, Any] | None, parts: dict[int, dict[str, Any]]) -> RankSummary:
    who = (part or {}).get("identity", {})
    pid = who.get("pid")
    if part is not None and who.get("host") == HOST and isinstance(pid, int) and pid_alive(pid):
        return RankSummary(
            rank,
            HOST,
            pid,
            RUNNING,
            None,
            f"its process (pid {pid}) was still running when the reports were merged, "
            "e.g. blocked in a collective for a rank that had failed",
            0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            "",
        )
    if part is None:
        hosts = {p.get("identity", {}).get("host") for p in parts.values()}
        message = (
            "no report from this rank reached this folder: it never started, or runs on another node "
            "(set TRAINMEDIC_RANKS_DIR to a folder every node shares)"
            if len(hosts) <= 1
            else "no report from this rank: it never started"
        )
    else:
        message = (
            f"its process (pid {who.get('pid')} on {who.get('host')}) ended without writing its report: "
            "killed by a signal (SIGKILL, the out-of-memory killer) or by torchrun"
        )
    return RankSummary(
        rank,
        str(who.get("host", "")),
        int(who.get("pid", 0) or 0),
        DIED,
        None,
        message,
        0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        "",
    )


# -- the straggler ----------------------------------------------------------------------------------


def _straggler(
    rows: dict[int, RankSummary],
    seconds: dict[int, dict[str, float]],
    reports: dict[int, Report],
    kinds: list[str],
) -> Straggler | None:
    if len(rows) < 2:
        return None
    rank = min(rows, key=lambda r: (rows[r].wait_s, r))
    others = [r for r in rows if r != rank]
    others_wait = statistics.median(rows[r].wait_s for r in others)
    step = statistics.median(rows[r].median_s for r in rows)
    if others_wait - rows[rank].wait_s < max(STRAGGLER_SHARE * step, STRAGGLER_MIN_S):
        return None
    excess = {
        c: seconds[rank][c] - statistics.median(seconds[o][c] for o in others)
        for c in CATEGORIES
        if c != SYNC
    }
    cause = max(excess, key=lambda c: excess[c])
    where = next((line.where for line in reports[rank].lines if line.category == cause), None)
    waited_in = " and ".join(kinds) if kinds else "collectives"
    if excess[cause] > 0:
        text = (
            f"rank {rank} is the straggler: it spends {format_seconds(excess[cause])} more per step on {cause} "
            f"than the median other rank{f' ({where})' if where else ''}; the other ranks wait "
            f"{format_seconds(others_wait)} per step for it in {waited_in}"
        )
    else:
        text = (
            f"rank {rank} is the straggler: the other ranks wait {format_seconds(others_wait)} per step for it in "
            f"{waited_in}, but no category of its step stands out (a slower node, or CPU contention)"
        )
    return Straggler(rank, cause, max(excess[cause], 0.0), others_wait, where, text)


def _straggler_finding(s: Straggler, rows: dict[int, RankSummary]) -> Finding:
    step = statistics.median(r.median_s for r in rows.values())
    share = min(s.others_wait_s / step, 1.0) if step else 0.0
    # Evening out the straggler's excess saves at most what the others wait for it.
    saved = min(min(s.excess_s, s.others_wait_s) / step, 1.0) if step and s.excess_s > 0 else 0.0
    fix = _FIXES.get(s.cause, _OTHER_FIX).format(rank=s.rank, cause=s.cause)
    return Finding(
        category=SYNC,
        kind="straggler",
        share=share,
        title=f"Rank {s.rank} holds the other ranks back",
        evidence=s.text,
        where=s.where,
        fix=fix,
        expected_speedup=amdahl.ceiling(saved),
        ceiling=amdahl.ceiling(share),
    )


def _communication_finding(rows: dict[int, RankSummary], kinds: list[str]) -> Finding | None:
    shares = [r.wait_s / r.median_s for r in rows.values() if r.median_s]
    if not shares or min(shares) < COMMUNICATION_SHARE:
        return None  # some rank hardly waits: the others wait for it, not for the network
    share = statistics.median(shares)
    wait = statistics.median(r.wait_s for r in rows.values())
    return Finding(
        category=SYNC,
        kind="collective",
        share=share,
        title="Every rank waits in collectives, none for a straggler",
        evidence=(
            f"each rank waits {format_seconds(wait)} per step ({share:.0%}) in "
            f"{' and '.join(kinds) or 'collectives'}, with no rank the others wait for"
        ),
        where=None,
        fix=(
            f"all-reduce less often or less: accumulate gradients over {ACCUMULATION} micro-batches inside "
            "model.no_sync(), a larger bucket_cap_mb, a bf16 compression hook "
            "(ddp_comm_hooks.default_hooks.bf16_compress_hook), or a faster interconnect"
        ),
        expected_speedup=amdahl.expected_speedup(share, ACCUMULATION),
        ceiling=amdahl.ceiling(share),
    )


# -- the merged report ------------------------------------------------------------------------------


def _base(
    reports: dict[int, Report], rank: int | None, command: list[str], rows: list[RankSummary]
) -> Report:
    if rank is not None:
        return dataclasses.replace(
            reports[rank], findings=list(reports[rank].findings), breakdown=dict(reports[rank].breakdown)
        )
    # No rank lived to report: an empty report that still names every rank.
    return Report(
        command=command,
        exit_code=1,
        outcome="exception",
        device=DeviceInfo("unknown", "unknown"),
        steps=StepStats(0, 0.0, 0.0, 1.0),
        breakdown={c: 0.0 for c in CATEGORIES},
        bottleneck=COMPUTE,
        findings=[],
        message="no rank wrote its report",
    )


def _move_wait_to_sync(report: Report, wait_s: float) -> None:
    step = report.steps.median_s
    if not step:
        return
    busy = report.breakdown.get(COMPUTE, 0.0) + report.breakdown.get(SYNC, 0.0)
    sync = min(wait_s / step, busy)
    report.breakdown[SYNC], report.breakdown[COMPUTE] = sync, busy - sync
    report.bottleneck = max(CATEGORIES, key=lambda c: report.breakdown.get(c, 0.0))


def _ranks_note(rows: list[RankSummary], world_size: int, base_rank: int | None, straggling: bool) -> str:
    reported = sum(r.outcome not in (DIED, RUNNING) for r in rows)
    text = f"torchrun job of {world_size} rank{'s' if world_size > 1 else ''}: {reported} reported"
    dead = [str(r.rank) for r in rows if r.outcome in (DIED, RUNNING)]
    if dead:
        text += f"; rank{'s' if len(dead) > 1 else ''} {', '.join(dead)} wrote no report"
    if base_rank is None:
        return text
    whose = f"the straggler's (rank {base_rank})" if straggling else f"rank {base_rank}'s"
    return (
        f"{text}; the breakdown, findings and lines above are {whose}, its collective waits counted as sync"
    )
