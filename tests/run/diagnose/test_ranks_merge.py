"""Merging torchrun ranks' parts: the straggler and why, dead ranks, communication-bound jobs."""

from __future__ import annotations

import json

from trainmedic.categories import CATEGORIES
from trainmedic.run.diagnose.ranks import merge, short_message
from trainmedic.run.report.console import build
from trainmedic.run.report.html import render_html
from trainmedic.run.report.model import DeviceInfo, Finding, LineCost, Report, StepStats


def _report(
    step: float, shares: dict[str, float], lines=(), outcome="completed", code=0, message=None
) -> Report:
    breakdown = {c: shares.get(c, 0.0) for c in CATEGORIES}
    return Report(
        command=["job.py"],
        exit_code=code,
        outcome=outcome,
        device=DeviceInfo("cpu", "EPYC"),
        steps=StepStats(30, step, step * 1.1, 1.0, 3, "optimizer"),
        breakdown=breakdown,
        bottleneck=max(breakdown, key=breakdown.get),
        findings=[Finding("compute", 0.5, "own finding", "e", None, "f", 1.5, 2.0)],
        lines=list(lines),
        message=message,
    )


def _part(rank: int, report: Report, wait: float, ended_at: float = 0.0) -> dict:
    return {
        "state": "done",
        "identity": {"rank": rank, "host": "node", "pid": 100 + rank, "run_id": "r"},
        "report": json.loads(report.to_json()),
        "waits": [wait] * 5,
        "kinds": ["DDP gradient all-reduce"],
        "ended_at": ended_at,
    }


def test_the_rank_the_others_wait_for_is_the_straggler_and_its_excess_the_cause():
    # Rank 0 waits 60 ms of its 70 ms step (inside backward: sampled as compute); rank 1 reads.
    fast = _report(0.070, {"compute": 0.95, "data": 0.05})
    slow = _report(
        0.070, {"compute": 0.10, "data": 0.90}, lines=[LineCost("job.py:12", "data", "hdf5", 0.063, 0.9)]
    )
    merged = merge({0: _part(0, fast, 0.060), 1: _part(1, slow, 0.001)}, 2, ["job.py"])
    s = merged.straggler
    assert (s.rank, s.cause, s.where) == (1, "data", "job.py:12")
    assert abs(s.excess_s - (0.063 - 0.0035)) < 1e-6 and s.others_wait_s == 0.060
    assert merged.findings[0].kind == "straggler" and merged.findings[0].where == "job.py:12"
    assert merged.findings[1].title == "own finding"  # the straggler's own findings follow
    assert merged.bottleneck == "data"  # the straggler's report sets the pace
    rows = {r.rank: r for r in merged.ranks}
    assert rows[0].bottleneck == "sync" and abs(rows[0].compute_s - (0.0665 - 0.060)) < 1e-9
    assert "are the straggler's (rank 1)" in merged.notes[0]


def test_ranks_that_wait_alike_have_no_straggler():
    a = _report(0.050, {"compute": 1.0})
    b = _report(0.050, {"compute": 1.0})
    merged = merge({0: _part(0, a, 0.004), 1: _part(1, b, 0.003)}, 2, ["job.py"])
    assert merged.straggler is None
    assert merged.findings[0].title == "own finding"
    assert "rank 0's" in merged.notes[0]


def test_every_rank_waiting_long_is_communication_bound():
    a = _report(0.050, {"compute": 1.0})
    b = _report(0.050, {"compute": 1.0})
    merged = merge({0: _part(0, a, 0.030), 1: _part(1, b, 0.029)}, 2, ["job.py"])
    assert merged.straggler is None
    first = merged.findings[0]
    assert first.kind == "collective" and abs(first.share - 0.59) < 0.01
    assert "no_sync" in first.fix
    assert merged.bottleneck == "sync"


def test_a_missing_or_running_part_is_a_dead_rank_and_the_first_cause_is_named():
    alive = _report(
        0.05,
        {"compute": 1.0},
        outcome="exception",
        code=1,
        message="RuntimeError: Connection closed by peer\n\nAt:\n  pair.cc (at job.py:41)",
    )
    stub = {"state": "running", "identity": {"rank": 1, "host": "node", "pid": 4242, "run_id": "r"}}
    merged = merge({0: _part(0, alive, 0.0), 1: stub}, 3, ["job.py"])
    rows = {r.rank: r for r in merged.ranks}
    assert rows[1].outcome == "died" and "pid 4242 on node" in rows[1].message
    # Every part came from one host: rank 2 may run on another node whose parts never arrive.
    assert rows[2].outcome == "died" and "another node" in rows[2].message
    assert merged.message.startswith("rank 1 died")
    assert merged.exit_code == 1 and merged.outcome == "exception"
    assert rows[0].message == "RuntimeError: Connection closed by peer …(at job.py:41)"
    assert "ranks 1, 2 wrote no report" in merged.notes[0]


def test_of_two_failed_ranks_the_one_that_failed_first_is_the_cause():
    first = _report(
        0.05, {"compute": 1.0}, outcome="exception", code=1, message="ValueError: bad batch (at job.py:9)"
    )
    later = _report(0.05, {"compute": 1.0}, outcome="exception", code=1, message="RuntimeError: peer closed")
    merged = merge(
        {0: _part(0, later, 0.0, ended_at=20.0), 1: _part(1, first, 0.0, ended_at=10.0)}, 2, ["job.py"]
    )
    assert merged.message == "rank 1 failed: ValueError: bad batch (at job.py:9)"


def test_no_rank_reporting_still_gives_a_report_naming_every_rank():
    merged = merge({}, 2, ["job.py"])
    assert [r.outcome for r in merged.ranks] == ["died", "died"]
    assert merged.exit_code == 1
    json.loads(merged.to_json())


def test_the_ranks_render_in_the_console_json_and_html():
    fast = _report(0.070, {"compute": 0.95, "data": 0.05})
    slow = _report(
        0.070, {"compute": 0.10, "data": 0.90}, lines=[LineCost("job.py:12", "data", "hdf5", 0.063, 0.9)]
    )
    merged = merge({0: _part(0, fast, 0.060), 1: _part(1, slow, 0.001)}, 3, ["job.py"])
    from rich.console import Console

    console = Console(width=100, record=True, color_system=None)
    console.print(build(merged))
    text = console.export_text()
    assert "Ranks (per steady-state step)" in text and "data ◀ straggler" in text and "died" in text
    back = Report.from_dict(json.loads(merged.to_json()))
    assert back.straggler == merged.straggler and back.ranks == merged.ranks
    page = render_html(merged)
    assert page.count('class="straggler"') == 1 and "<h2>Ranks</h2>" in page


def test_short_message_keeps_one_line_and_the_users_line():
    assert short_message("plain") == "plain"
    assert short_message(None) is None
    long = "E: " + "x" * 400
    assert len(short_message(long)) == 240


def test_a_peer_lost_error_is_a_consequence_of_the_rank_that_died():
    lost = _report(
        0.05,
        {"compute": 1.0},
        outcome="exception",
        code=1,
        message="RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1234 (at job.py:41)",
    )
    stub = {"state": "running", "identity": {"rank": 1, "host": "elsewhere", "pid": 7, "run_id": "r"}}
    merged = merge({0: _part(0, lost, 0.0, ended_at=5.0), 1: stub}, 2, ["job.py"])
    assert merged.message.startswith("rank 1 died")


def test_a_peer_lost_error_longer_than_one_line_is_still_a_consequence():
    # DDP's comm hook wraps gloo's error twice: the one-line form cuts "Connection closed by peer" short.
    wrapped = "RuntimeError: Got the following error when running the callback: " * 3
    message = (
        wrapped
        + "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [::1]:29500"
    )
    lost = _report(0.05, {"compute": 1.0}, outcome="exception", code=1, message=message + " (at job.py:39)")
    stub = {"state": "running", "identity": {"rank": 1, "host": "elsewhere", "pid": 7, "run_id": "r"}}
    merged = merge({0: _part(0, lost, 0.0, ended_at=5.0), 1: stub}, 2, ["job.py"])
    assert "Connection closed by peer" not in {r.rank: r for r in merged.ranks}[0].message
    assert merged.message.startswith("rank 1 died")


def test_a_rank_still_running_at_the_merge_is_not_called_dead():
    import os

    from trainmedic._os import HOST

    failed = _report(
        0.05, {"compute": 1.0}, outcome="exception", code=1, message="ValueError: bad (at job.py:3)"
    )
    blocked = {"state": "running", "identity": {"rank": 1, "host": HOST, "pid": os.getpid(), "run_id": "r"}}
    merged = merge({0: _part(0, failed, 0.0), 1: blocked}, 2, ["job.py"])
    rows = {r.rank: r for r in merged.ranks}
    assert rows[1].outcome == "running" and "still running" in rows[1].message
    assert merged.message == "rank 0 failed: ValueError: bad (at job.py:3)"


def test_untimed_waits_on_cuda_give_no_straggler_verdict_but_say_so():
    fast = _report(0.070, {"compute": 1.0})
    slow = _report(0.070, {"compute": 0.1, "data": 0.9})
    parts = {0: _part(0, fast, 0.0), 1: _part(1, slow, 0.0)}
    for part in parts.values():
        part["untimed"] = ["DDP gradient all-reduce on CUDA"]
    merged = merge(parts, 2, ["job.py"])
    assert merged.straggler is None
    assert merged.findings[0].title == "own finding"
    assert any(n.startswith("not timed: DDP gradient all-reduce on CUDA") for n in merged.notes)


def test_a_ranks_close_call_is_kept_only_while_its_lever_leads_the_merged_report():
    close = "Too close to call between compute (50% of the step, buys ×1.50) and data (45%, buys ×1.45)"

    # launches.py's own close call, between two bounds of the model's time, is another matter.
    bounds = "Too close to call between the kernels and their launches: busy 70 % of the model's time."

    def rank_report(step, shares, lines=()):
        r = _report(step, shares, lines)
        r.close_call, r.notes = ["compute", "data"], [close, bounds]
        return r

    # Ranks that wait alike: the merged report is rank 0's, its close call with it.
    even = merge(
        {
            0: _part(0, rank_report(0.050, {"compute": 0.55, "data": 0.45}), 0.001),
            1: _part(1, rank_report(0.050, {"compute": 0.55, "data": 0.45}), 0.001),
        },
        2,
        ["job.py"],
    )
    assert even.close_call == ["compute", "data"] and close in even.notes
    # A straggler leads: the rank's pair is no longer the report's first two levers.
    fast = rank_report(0.070, {"compute": 0.95, "data": 0.05})
    slow = rank_report(
        0.070, {"compute": 0.10, "data": 0.90}, [LineCost("job.py:12", "data", "hdf5", 0.063, 0.9)]
    )
    merged = merge({0: _part(0, fast, 0.060), 1: _part(1, slow, 0.001)}, 2, ["job.py"])
    assert merged.findings[0].kind == "straggler"
    assert merged.close_call == [] and close not in merged.notes
    assert bounds in merged.notes
