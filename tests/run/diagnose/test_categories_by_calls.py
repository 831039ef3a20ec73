"""Plain user code takes its category from what its torch calls touch, never from where it sits.

Hand-built measurements with a census as a run records it (probe/census.py): each test is one
defect seen on real code (nanoGPT, pytorch/examples) that a position rule got wrong.
"""

from __future__ import annotations

import pytest

from trainmedic.run.diagnose import diagnose
from trainmedic.run.probe.call_floor import CallCost
from trainmedic.run.probe.census import CallTally, Census
from trainmedic.run.probe.recorder import AFTER_MODEL, BEFORE_MODEL, SLOTS

STEPS = 40
FLOOR = CallCost("cpu", floor_s=2e-6, byte_s=1e-10, flop_s=1e-11)


def tally(
    calls: int, grad: int = 0, work_per_call: float = 1e-8, grad_work_per_call: float | None = None
) -> CallTally:
    grad_work = work_per_call if grad_work_per_call is None else grad_work_per_call
    return CallTally(calls, grad, work_per_call * calls, FLOOR.floor_s * calls, grad_work * grad)


def census(by_function=None, by_line=None, steps=2) -> Census:
    return Census(steps, by_function or {}, by_line or {}, floors={"cpu": FLOOR})


def with_census(m, c):
    m.census = c
    return m


def test_a_batch_fetched_after_the_forward_is_data(completed, measure):
    # nanoGPT fetches the next batch between forward and backward; its get_batch re-read and
    # encoded the raw text every step (80 % of the step) and once read "compute 100 %".
    get_batch = "train.py:20:get_batch"
    lines = {
        ("compute", "forward", "train.py:60", "train.py:1:<module>"): 0.05 * STEPS,
        (AFTER_MODEL, "", "train.py:24", get_batch): 0.75 * STEPS,  # the encode: pure Python
        (AFTER_MODEL, "", "train.py:26", get_batch): 0.05 * STEPS,  # torch.stack of the windows
        ("compute", "backward", "train.py:62", "train.py:1:<module>"): 0.15 * STEPS,
    }
    c = census({get_batch: tally(26)}, {"train.py:26": tally(26)})
    report = diagnose(with_census(measure(lines, [1.0] * STEPS), c), ["train.py"], completed)
    assert report.bottleneck == "data"
    top = report.findings[0]
    assert (top.category, top.kind, top.where) == ("data", "batch preparation", "train.py:24")
    assert report.breakdown["data"] == pytest.approx(0.8)


def test_a_loss_computed_outside_the_model_is_compute(completed, measure):
    lines = {
        ("compute", "forward", "train.py:30", "train.py:1:<module>"): 0.5 * STEPS,
        (AFTER_MODEL, "", "train.py:31", "train.py:1:<module>"): 0.3
        * STEPS,  # loss = (out - y).pow(2).mean()
        (BEFORE_MODEL, "", "train.py:29", "train.py:1:<module>"): 0.2 * STEPS,  # x = pool[idx]
    }
    c = census(
        {"train.py:1:<module>": tally(6, grad=3)}, {"train.py:31": tally(3, grad=3), "train.py:29": tally(3)}
    )
    report = diagnose(with_census(measure(lines, [1.0] * STEPS), c), ["train.py"], completed)
    assert report.breakdown["compute"] == pytest.approx(0.8)
    assert report.breakdown["data"] == pytest.approx(0.2)


def test_module_level_bookkeeping_without_calls_is_host_other_wherever_it_sits(completed, measure):
    lines = {
        ("compute", "forward", "train.py:30", "train.py:1:<module>"): 0.7 * STEPS,
        (BEFORE_MODEL, "", "train.py:10", "train.py:1:<module>"): 0.3 * STEPS,  # lr schedule maths
    }
    c = census({"train.py:1:<module>": tally(2, grad=2)}, {"train.py:31": tally(2, grad=2)})
    report = diagnose(with_census(measure(lines, [1.0] * STEPS), c), ["train.py"], completed)
    assert report.breakdown["host_other"] == pytest.approx(0.3)
    assert report.breakdown["data"] == 0.0


def test_backward_and_the_optimizer_are_never_folded_into_a_loop(completed, measure):
    # A module-level loop that issued ~670 library calls a step: the census charges them to the
    # libraries, and backward's time stays backward whatever the function's call count.
    module = "train.py:1:<module>"
    lines = {
        ("compute", "backward", "train.py:305", module): 0.56 * STEPS,
        ("compute", "optimizer", "train.py:309", module): 0.05 * STEPS,
        ("compute", "optimizer", "train.py:311", module): 0.09 * STEPS,
        ("compute", "forward", "model.py:90", "model.py:80:forward"): 0.30 * STEPS,
    }
    c = census({module: tally(8, grad=4)}, {"train.py:300": tally(8, grad=4)})
    report = diagnose(with_census(measure(lines, [1.0] * STEPS), c), ["train.py"], completed)
    assert report.breakdown["tiny_ops"] == 0.0
    (top,) = report.findings
    assert (top.category, top.where) == ("compute", "train.py:305")
    assert "split: backward 56%, forward 30%, optimizer 14%" in top.evidence


def test_many_calls_whose_work_outweighs_their_start_are_not_tiny(completed, measure):
    # 400 calls a step on large tensors: 45 us each, but each one's own work is 40 us.
    fn = "train.py:3:augment"
    lines = {
        (BEFORE_MODEL, "", "train.py:7", fn): 0.018 * STEPS,
        ("compute", "forward", "train.py:20", "train.py:18:forward"): 0.01 * STEPS,
    }
    c = census({fn: tally(800, work_per_call=40e-6)}, {"train.py:7": tally(800, work_per_call=40e-6)})
    report = diagnose(with_census(measure(lines, [0.028] * STEPS), c), ["train.py"], completed)
    assert report.breakdown["tiny_ops"] == 0.0
    assert report.findings[0].category == "data"


def test_cheap_calls_at_a_few_times_the_floor_are_a_tiny_op_loop_with_the_floor_in_evidence(
    completed, measure
):
    fn = "gen.py:3:make_sample"
    lines = {
        (BEFORE_MODEL, "", "gen.py:7", fn): 0.012 * STEPS,  # 1,000 calls at 12 us = 6x the floor
        ("compute", "forward", "train.py:20", "train.py:18:forward"): 0.004 * STEPS,
    }
    c = census({fn: tally(2000)}, {"gen.py:7": tally(2000)})
    report = diagnose(with_census(measure(lines, [0.016] * STEPS), c), ["gen.py"], completed)
    top = report.findings[0]
    assert top.category == "tiny_ops"
    assert "1,000 torch calls per step at 12.0 µs each" in top.evidence
    assert "this machine starts a call in 2.0 µs" in top.evidence
    # The calls' own work stays after batching: the fix buys 1 / (0.25 + 0.75 / k), k < 8.
    assert 1.0 < top.expected_speedup < 1 / (0.25 + 0.75 / 8) + 0.01


def test_a_growing_concatenation_is_growth_whatever_else_its_function_does(completed, measure):
    # Seed 004's pool: one torch.cat of the whole pool (work grows) plus many small draws.
    fn = "ot.py:40:sample"
    per_step, wall = [], []
    for i in range(STEPS):
        seconds = 0.015 + 0.0005 * i
        slots = [0.0] * len(SLOTS)
        slots[SLOTS.index(BEFORE_MODEL)] = seconds - 0.005
        slots[SLOTS.index("compute")] = 0.005
        per_step.append((i + 3, slots))
        wall.append(seconds)
    share = 1 - 0.005 * STEPS / sum(wall)
    lines = {
        (BEFORE_MODEL, "", "ot.py:44", fn): sum(wall) * share,
        ("compute", "forward", "ot.py:60", "ot.py:55:forward"): sum(wall) * (1 - share),
    }
    # 300 draws at the floor plus the cat, whose bytes (a 512K-row pool) outweigh every start.
    c = census(
        {fn: CallTally(301, 0, 0.02, 301 * FLOOR.floor_s)},
        {"ot.py:44": CallTally(301, 0, 0.02, 301 * FLOOR.floor_s)},
    )
    report = diagnose(with_census(measure(lines, wall, per_step=per_step), c), ["ot.py"], completed)
    top = report.findings[0]
    assert (top.category, top.kind) == ("data", "pool")
    assert "grew" in top.evidence


def test_a_pools_concatenation_beside_its_per_row_draw_in_one_function_is_not_the_loops(completed, measure):
    # tests/scenarios/pool_growth_tiny.py as Python 3.12 runs it (its comprehension inlined):
    # draw() makes one torch.cat of the pool (40 ms a step) and 1,024 per-row calls (5 ms). Over
    # the whole function that is 44 us a call, under 25 floors, and on a 16-core Xeon it read as
    # "a per-sample loop at draw()'s def line" with no data at all.
    fn = "pool.py:36:draw"
    lines = {
        (BEFORE_MODEL, "", "pool.py:37", fn): 0.040 * STEPS,  # pool = torch.cat(self.chunks)
        (BEFORE_MODEL, "", "pool.py:39", fn): 0.005 * STEPS,  # pool[i] + 0.01 * torch.randn(DIM)
        ("compute", "backward", "pool.py:62", "pool.py:1:<module>"): 0.010 * STEPS,
    }
    c = census(
        {fn: tally(2 * 1025)},
        {"pool.py:37": tally(2), "pool.py:39": tally(2 * 1024)},
    )
    report = diagnose(with_census(measure(lines, [0.055] * STEPS), c), ["pool.py"], completed)
    by_line = {(ln.where, ln.category) for ln in report.lines}
    assert ("pool.py:37", "data") in by_line
    assert ("pool.py:39", "tiny_ops") in by_line
    top = report.findings[0]
    assert (top.category, top.where) == ("data", "pool.py:37")
    loop = next(f for f in report.findings if f.category == "tiny_ops")
    assert loop.where == "pool.py:39"
    assert "1,024 torch calls per step at 4.9 µs each" in loop.evidence


def test_the_loops_own_numbers_leave_out_the_work_of_the_lines_outside_it(completed, measure):
    # The pool's cat priced at 1 ms of work a call: over the whole function its work outweighs
    # the starts, and the per-row loop beside it must still read as a loop, with its own numbers.
    fn = "pool.py:36:draw"
    lines = {
        (BEFORE_MODEL, "", "pool.py:37", fn): 0.040 * STEPS,
        (BEFORE_MODEL, "", "pool.py:39", fn): 0.005 * STEPS,
        ("compute", "backward", "pool.py:62", "pool.py:1:<module>"): 0.010 * STEPS,
    }
    cat, rows = tally(2, work_per_call=5e-3), tally(2 * 1024)
    whole = CallTally(cat.calls + rows.calls, 0, cat.work_s + rows.work_s, cat.floor_s + rows.floor_s, 0.0)
    c = census({fn: whole}, {"pool.py:37": cat, "pool.py:39": rows})
    report = diagnose(with_census(measure(lines, [0.055] * STEPS), c), ["pool.py"], completed)
    loop = next(f for f in report.findings if f.category == "tiny_ops")
    assert loop.where == "pool.py:39"
    assert "each call's own work is 0.01 µs" in loop.evidence


def test_a_per_sample_loops_lines_are_all_the_loops_when_each_step_is_one_sample(completed, measure):
    # Steps that are one sample each (no step of the script's own): every line of the sample's
    # function makes a call or two a step, one of them slow; none of them is outside the loop.
    fn = "gen.py:3:make_sample"
    lines = {(BEFORE_MODEL, "", f"gen.py:{4 + i}", fn): 0.000006 * STEPS for i in range(11)}
    lines[(BEFORE_MODEL, "", "gen.py:20", fn)] = 0.00008 * STEPS  # one slower call a sample
    by_line = {f"gen.py:{4 + i}": tally(2) for i in range(11)} | {"gen.py:20": tally(2)}
    c = census({fn: tally(24)}, by_line)
    m = with_census(measure(lines, [0.000146] * STEPS), c)
    m.step_source = "loop"
    report = diagnose(m, ["gen.py"], completed)
    assert {ln.category for ln in report.lines if ln.where.startswith("gen.py")} == {"tiny_ops"}


def test_findings_are_ordered_by_what_their_fix_buys(completed, measure):
    # A re-read np.load at 45 % buys more than "healthy" compute at 54 %.
    lines = {
        ("data", "disk", "train.py:54", "train.py:50:load"): 0.45 * STEPS,
        ("compute", "backward", "train.py:60", "train.py:1:<module>"): 0.35 * STEPS,
        ("compute", "forward", "train.py:58", "train.py:1:<module>"): 0.20 * STEPS,
    }
    report = diagnose(measure(lines, [1.0] * STEPS), ["train.py"], completed)
    assert [f.category for f in report.findings] == ["data", "compute"]
    assert report.bottleneck == "data"
    speedups = [f.expected_speedup for f in report.findings]
    assert speedups == sorted(speedups, reverse=True)


def _finding(category, share, speedup):
    from trainmedic.run.report.model import Finding

    return Finding(category, share, "t", "e", None, "f", speedup, 1 / (1 - share), kind="")


def _steps(data_shares, other="host_other"):
    """Per-step slots: each step's data share, the rest in ``other``."""
    rows = []
    for i, d in enumerate(data_shares):
        slots = [0.0] * len(SLOTS)
        slots[SLOTS.index("data")] = d
        slots[SLOTS.index(other)] = 1 - d
        rows.append((i, slots))
    return rows


def test_two_levers_within_the_runs_noise_are_called_too_close():
    from trainmedic.run.diagnose import margin

    findings = [_finding("data", 0.52, 1.6), _finding("host_other", 0.48, 1.55)]
    mapping = {"data": {"data": 1.0}, "host_other": {"host_other": 1.0}}
    noisy = _steps([0.2, 0.9, 0.4, 0.7, 0.3, 0.8, 0.6, 0.35] * 3)  # 3 samples a step: coarse
    note = margin.close_call(findings, noisy, mapping)
    assert note is not None and note.startswith(
        "Too close to call between data (52% of the step, buys ×1.60)"
    )
    assert "host_other (48%, buys ×1.55)" in note
    steady = _steps([0.9, 0.92, 0.88, 0.9] * 10)  # a clear lead, step after step
    assert (
        margin.close_call([_finding("data", 0.9, 5.0), _finding("host_other", 0.1, 1.05)], steady, mapping)
        is None
    )


def test_a_lever_that_buys_only_a_little_more_does_not_outrank_the_largest_share(completed, measure):
    # pytorch/examples' vae on a CPU: the DataLoader at 25 % (×1.25 by its factor) against the
    # model at 75 % (×1.21): within the factors' own precision, so the model leads.
    lines = {
        ("data", "transform", "main.py:96", "main.py:90:train"): 0.25 * STEPS,
        ("compute", "backward", "main.py:104", "main.py:90:train"): 0.45 * STEPS,
        ("compute", "forward", "main.py:101", "main.py:90:train"): 0.30 * STEPS,
    }
    report = diagnose(measure(lines, [1.0] * STEPS), ["main.py"], completed)
    assert [f.category for f in report.findings] == ["compute", "data"]
    assert report.findings[1].expected_speedup > report.findings[0].expected_speedup
    assert report.bottleneck == "compute"


def _split(data_share: float, steps: int = 120) -> list:
    """Per-step slots of a run whose data share is ``data_share`` every step (the rest compute)."""
    return _steps([data_share] * steps, other="compute")


def test_a_lever_that_leads_within_the_noise_between_runs_is_called_too_close():
    from trainmedic.run.diagnose import margin

    mapping = {"data": {"data": 1.0}, "compute": {"compute": 1.0}}
    # pytorch/examples' vae in one run of several: its DataLoader at 33 % buys ×1.33 against the
    # model's ×1.19, enough to lead; other runs read it at 24-28 % (×1.27), where the model led.
    # Steady within the run: only the spread between runs shows the order could swap.
    loader, model = _finding("data", 0.332, 1.33), _finding("compute", 0.657, 1.19)
    assert loader.expected_speedup >= margin.LEVER_MARGIN * model.expected_speedup
    note = margin.close_call([loader, model], _split(0.332), mapping)
    assert note is not None and note.startswith(
        "Too close to call between data (33% of the step, buys ×1.33)"
    )
    # ... and in the runs where the model led.
    loader = _finding("data", 0.26, 1.27)
    note = margin.close_call([model, loader], _split(0.26), mapping)
    assert note is not None and note.startswith(
        "Too close to call between compute (66% of the step, buys ×1.19)"
    )
    # A re-read np.load at 45 % buys ×1.8 against the model's ×1.1 at 54 %: a clear lead, no note.
    np_load, rest = _finding("data", 0.45, 1.8), _finding("compute", 0.54, 1.1)
    assert margin.close_call([np_load, rest], _split(0.45), mapping) is None
    # accelerate's loop: the model at 80 % leads and buys more; its DataLoader at 13 % (×1.14)
    # could lead only by clearing the margin, which no band reaches: no note.
    model, loader = _finding("compute", 0.8, 1.23), _finding("data", 0.13, 1.14)
    assert margin.close_call([model, loader], _split(0.13), mapping) is None


def test_a_report_whose_two_levers_noise_could_swap_says_so_in_its_verdict(completed, measure):
    # pytorch/examples' mnist_rnn on a CPU: its DataLoader read at 23-35 % between runs and the
    # bottleneck field flipped between compute and data; the close call is part of the verdict.
    lines = {
        ("data", "loader", "main.py:96", "main.py:90:train"): 0.34 * STEPS,
        ("compute", "backward", "main.py:104", "main.py:90:train"): 0.66 * STEPS,
    }
    close = diagnose(measure(lines, [1.0] * STEPS, per_step=_split(0.34, STEPS)), ["main.py"], completed)
    assert close.close_call == [
        close.bottleneck,
        next(c for c in ("data", "compute") if c != close.bottleneck),
    ]
    assert any(n.startswith("Too close to call") for n in close.notes)
    lines = {
        ("data", "loader", "main.py:96", "main.py:90:train"): 0.05 * STEPS,
        ("compute", "backward", "main.py:104", "main.py:90:train"): 0.95 * STEPS,
    }
    clear = diagnose(measure(lines, [1.0] * STEPS, per_step=_split(0.05, STEPS)), ["main.py"], completed)
    assert (clear.bottleneck, clear.close_call) == ("compute", [])


def test_a_tokenizing_comprehension_takes_its_helpers_category(completed, measure, tmp_path):
    # nanoGPT with get_batch re-encoding the raw text: `[stoi[c] for c in text]` runs in a
    # comprehension's own code object, which makes no torch call; get_batch's calls decide.
    script = tmp_path / "train.py"
    script.write_text(
        "import numpy as np\nimport torch\n\n\ndef get_batch(text, stoi):\n"
        "    data = np.array([stoi[c] for c in text])\n"
        "    return torch.from_numpy(data[:64]), torch.from_numpy(data[1:65])\n",
        encoding="utf-8",
    )
    get_batch, comprehension = f"{script}:5:get_batch", f"{script}:6:<listcomp>"
    lines = {
        (AFTER_MODEL, "", "train.py:6", comprehension): 0.6 * STEPS,
        (AFTER_MODEL, "", "train.py:6", get_batch): 0.1 * STEPS,
        ("compute", "backward", "train.py:30", f"{script}:1:<module>"): 0.3 * STEPS,
    }
    c = census({get_batch: tally(2)}, {"train.py:7": tally(2)})
    report = diagnose(with_census(measure(lines, [1.0] * STEPS), c), ["train.py"], completed)
    assert report.breakdown["data"] == pytest.approx(0.7)
    assert report.breakdown["host_other"] == 0.0


def test_a_dataloaders_time_is_one_finding_at_the_users_transform(completed, measure):
    # pytorch/examples' mnist with a heavy NumPy transform: the pipeline's time split between
    # the `for` line ("loader") and the transform's own line.
    lines = {
        ("data", "loader", "main.py:39", "main.py:30:train"): 0.37 * STEPS,
        ("data", "transform", "main.py:82", "main.py:76:heavy_augment"): 0.25 * STEPS,
        ("compute", "backward", "main.py:44", "main.py:30:train"): 0.38 * STEPS,
    }
    report = diagnose(measure(lines, [1.0] * STEPS), ["main.py"], completed)
    top = report.findings[0]
    assert (top.category, top.kind, top.where) == ("data", "transform", "main.py:82")
    assert top.share == pytest.approx(0.62)


def test_a_pool_of_detached_outputs_is_data_and_its_growth_a_pool(completed, measure):
    # pytorch/examples' vae with `seen = torch.cat([seen, recon_batch.detach()])` every step:
    # the .detach() touches the model's output and does nothing; the cat copies the whole pool.
    # It read as "compute/user code", 64 % of the model's time, grown 1.5x: "healthy, ×1.2".
    train = "main.py:95:train"
    grow = [0.3 + 0.6 * i / STEPS for i in range(STEPS)]
    lines = {
        ("compute", "forward", "main.py:101", train): 0.2 * STEPS,
        ("compute", "backward", "main.py:105", train): 0.3 * STEPS,
        (AFTER_MODEL, "", "main.py:104", train): sum(grow),
    }
    per_step = [
        (i, [g if slot == AFTER_MODEL else 0.5 * (slot == "compute") for slot in SLOTS])
        for i, g in enumerate(grow)
    ]
    durations = [0.5 + g for g in grow]
    # detach: one call on a grad tensor, no bytes of its own; cat: one call, the pool's bytes
    cat_line = tally(4, grad=2, work_per_call=5e-3, grad_work_per_call=0.0)
    c = census({train: cat_line}, {"main.py:104": cat_line})
    m = measure(lines, durations, per_step=per_step, cpu_durations=durations)
    report = diagnose(with_census(m, c), ["main.py"], completed)
    top = report.findings[0]
    assert (top.category, top.kind, top.where) == ("data", "pool", "main.py:104")
    assert "grew" in top.evidence
