"""trainmedic.plan.console: the plan and its verification as ``trainmedic plan`` prints them, exactly."""

import io
import math
import re

import pytest
from rich.console import Console

from trainmedic.plan import load_build, plan_memory
from trainmedic.plan.compare import Comparison, Divergence, PeakSide
from trainmedic.plan.confidence import CHECKED, CHECKED_BOUND, LOWER_BOUND, Bound, Confidence
from trainmedic.plan.console import (
    build_plan,
    build_verification,
    render_plan,
    render_verification,
    within_bound,
)
from trainmedic.plan.model import Breakdown, Hotspot, Plan
from trainmedic.plan.recorded import RecordedStep
from trainmedic.plan.verify import Verification

MiB, GiB = 2**20, 2**30


# --- a made-up plan, at a fixed width --------------------------------------------------------


def render(plan: Plan) -> str:
    console = Console(file=io.StringIO(), width=100, record=True, force_terminal=False)
    render_plan(plan, console)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def t4_plan(where: str, **changes) -> Plan:
    fields = {
        "device": "t4",
        "capacity_bytes": 15_843_721_216,
        "batch_size": 64,
        "precision": "bf16",
        "peak_bytes": 12 * GiB,
        "reserved_bytes": 12 * GiB + 256 * MiB,
        "breakdown": Breakdown(400 * MiB, 400 * MiB, 800 * MiB, 8 * GiB + 448 * MiB, 2 * GiB, 300 * MiB),
        "headroom": 0.1,
        "max_batch": 80,
        "bytes_per_sample": 150 * MiB,
        "hotspots": [
            Hotspot(
                "softmax in attn",
                f"{where}:6",
                4 * GiB,
                "B·H·S²·bytes = 64·4·6272²·2 = 18.8 GiB",
                "pool before attention",
            ),
            # A backward op as the planner reports it: named so, at the forward line it differentiates.
            Hotspot(
                "mm (backward)", f"{where}:5", GiB, "B·S·D·bytes = 64·6272·1024·2 = 784.0 MiB", "recompute it"
            ),
            Hotspot("_foreach_sqrt", "<unknown>:0", 400 * MiB, "P·bytes = 104857600·4 = 400.0 MiB", ""),
        ],
        "notes": ["Adam planned with foreach=True, its default on CUDA"],
        "warnings": ["the step could not be traced past einsum"],
    }
    fields.update(changes)
    return Plan(**fields)


SOURCE = """\
import torch


def build(batch_size):
    model = torch.nn.TransformerEncoderLayer(256, 4, batch_first=True)
    scores = torch.randn(batch_size, 4, 6272, 6272)
"""

EXPECTED_T4 = """\
Plan for NVIDIA T4 (14.8 GiB), batch 64, bf16

  parameters           400.0 MiB   3%  weights and buffers
  gradients            400.0 MiB   3%  alive at the peak
  optimizer state      800.0 MiB   6%  e.g. Adam's two moments
  activations            8.4 GiB  67%  inputs and tensors saved for backward
  temporaries            2.0 GiB  16%  intermediates alive at the peak
= peak allocated        12.0 GiB  96%  torch.cuda.max_memory_allocated
  allocator reserve    256.0 MiB   2%  reserved - peak: block rounding, cached segments
  cuda context         300.0 MiB   2%  outside the allocator: context, cuBLAS, cuDNN
= needed                12.5 GiB       what the card must hold
usable after headroom   13.3 GiB       10% of 14.8 GiB kept free

fits with 754.8 MiB free
largest batch that fits: 80 (with 10% headroom, about 150.0 MiB per sample)

Hotspots: the largest tensors alive at the peak
     4.0 GiB  softmax in attn at model.py:6
              B·H·S²·bytes = 64·4·6272²·2 = 18.8 GiB
              6 | scores = torch.randn(batch_size, 4, 6272, 6272)
              -> pool before attention
     1.0 GiB  mm (backward) at model.py:5
              B·S·D·bytes = 64·6272·1024·2 = 784.0 MiB
              5 | model = torch.nn.TransformerEncoderLayer(256, 4, batch_first=True)
              -> recompute it
   400.0 MiB  _foreach_sqrt (no line of yours: inside a library call)
              P·bytes = 104857600·4 = 400.0 MiB

note: Adam planned with foreach=True, its default on CUDA
warning: the step could not be traced past einsum
"""


def test_a_gpu_plan_renders_exactly(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert render(t4_plan(str(tmp_path / "model.py"))) == EXPECTED_T4


def test_a_plan_that_does_not_fit_says_by_how_much_and_points_to_max_batch():
    plan = t4_plan(
        "gone.py",
        batch_size=128,
        peak_bytes=15 * GiB,
        reserved_bytes=15 * GiB,
        max_batch=None,
        hotspots=[],
        notes=[],
        warnings=[],
    )
    text = render(plan)
    assert "does NOT fit: needs 2.0 GiB more; --max-batch finds the largest batch that fits\n" in text
    assert "largest batch that fits:" not in text and "Hotspots" not in text and "note:" not in text


def test_a_lower_bound_says_so_in_the_peak_row_and_the_verdict():
    text = render(t4_plan("m.py", exact=False))
    assert "= peak allocated (at least)   12.0 GiB  96%" in text
    assert "fits with 754.8 MiB free, but the plan is a lower bound (see the warnings)\n" in text


def test_a_missing_source_file_shows_the_place_without_a_line():
    text = render(t4_plan("/nowhere/model.py"))
    assert "softmax in attn at /nowhere/model.py:6\n" in text
    assert " | " not in text


def test_no_batch_fits_and_a_custom_card():
    plan = t4_plan(
        "m.py",
        device="custom",
        capacity_bytes=GiB,
        batch_size=1,
        max_batch=0,
        bytes_per_sample=None,
        hotspots=[],
    )
    text = render(plan)
    assert text.startswith("Plan for a GPU of 1.0 GiB, batch 1, bf16\n")
    assert "largest batch that fits: 0 (even batch 1 does not fit)\n" in text


def test_the_host_plan_leaves_out_allocator_and_context_rows():
    plan = Plan(
        "cpu", 32 * GiB, 8, "fp32", 3 * MiB, Breakdown(MiB, MiB, MiB // 2, MiB // 4, MiB // 4, 0), 3 * MiB
    )
    text = render(plan)
    assert text.startswith("Plan for the host CPU (32.0 GiB of RAM), batch 8, fp32\n")
    assert "= peak allocated         3.0 MiB  100%\n" in text
    assert "usable after headroom   32.0 GiB        no headroom kept (--headroom)\n" in text
    for row in ("allocator reserve", "cuda context", "= needed", "max_memory_allocated"):
        assert row not in text


def test_warnings_are_yellow_and_notes_dim():
    console = Console(
        file=io.StringIO(), width=100, record=True, force_terminal=True, color_system="standard"
    )
    render_plan(t4_plan("m.py"), console)
    ansi = console.export_text(styles=True)
    assert "\x1b[33mwarning: the step could not be traced past einsum" in ansi
    assert "\x1b[2mnote: Adam planned" in ansi


def test_build_plan_is_what_render_plan_prints():
    plan = t4_plan("m.py")
    console = Console(file=io.StringIO(), width=100, record=True, force_terminal=False)
    console.print(build_plan(plan))
    assert "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n" == render(plan)


# --- a real plan of a tiny model --------------------------------------------------------------

TINY = """\
import torch


def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs = torch.randn(batch_size, 64)
    return dict(model=model, inputs=inputs, optimizer=lambda params: torch.optim.Adam(params, lr=1e-3))
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    (tmp_path / "tiny.py").write_text(TINY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # a hotspot's file is shown relative to the working folder
    return load_build("tiny.py:build")


def test_a_real_host_plan_names_the_users_line_and_no_gpu_rows(tiny):
    text = render(plan_memory(tiny, 8, device="cpu"))
    lines = text.splitlines()
    assert lines[0].startswith("Plan for the host CPU (") and lines[0].endswith(" of RAM), batch 8, fp32")
    for row in (
        "  parameters",
        "  gradients",
        "  optimizer state",
        "  activations",
        "  temporaries",
        "= peak allocated",
        "usable after headroom",
        "fits with ",
        "how sure: checked: ",
    ):
        assert any(line.startswith(row) for line in lines), row
    for row in ("allocator reserve", "cuda context", "= needed", "does NOT fit"):
        assert row not in text
    assert "randn at tiny.py:6\n" in text
    assert "6 | inputs = torch.randn(batch_size, 64)\n" in text


def test_a_real_gpu_plan_adds_the_allocator_the_context_and_the_margin(tiny):
    text = render(plan_memory(tiny, 8, device="t4"))
    assert text.startswith("Plan for NVIDIA T4 (14.8 GiB), batch 8, fp32\n\n")
    assert re.search(r"^  cuda context +300\.0 MiB +\d+%  outside the allocator: context, cuBLAS", text, re.M)
    assert re.search(r"^  allocator reserve .*reserved - peak: block rounding, cached segments$", text, re.M)
    assert re.search(r"^  margin .* 16% for the plan's own error \(estimated\)$", text, re.M)
    assert "\nhow sure: estimated: " in text
    assert text.endswith("\nnote: Adam planned with foreach=True, its default on CUDA\n")


# --- the verification, from the model classes -------------------------------------------------

CHECKED_PLAN = {"confidence": Confidence(CHECKED, CHECKED_BOUND)}
FLOOR = {"confidence": Confidence(LOWER_BOUND, Bound(math.inf, math.inf), ("not traced past einsum",))}


def verification(
    planned: int,
    measured: int,
    *,
    reserved: tuple[int, int] | None = None,
    divergence=None,
    result: dict | None = None,
    oom: bool = False,
    source: str = "runs/mlp.json.gz",
) -> Verification:
    planned_reserved, measured_reserved = reserved or (planned, measured)
    comparison = Comparison(
        PeakSide(planned, planned_reserved, 2, "backward", ()),
        PeakSide(measured, measured_reserved, 2, "optimizer", ()),
        divergence,
    )
    card = {"device": "NVIDIA H200", "torch": "2.11.0+cu130"} if result is None else result
    return Verification(comparison, RecordedStep([], card, out_of_memory=oom), source)


def render_check(check: Verification, plan: Plan, width: int = 100, **console) -> str:
    out = Console(file=io.StringIO(), width=width, record=True, **({"force_terminal": False} | console))
    render_verification(check, plan, out)
    return plain(out, styles="color_system" in console)


def plain(console: Console, styles: bool = False) -> str:
    """What ``console`` recorded, without the trailing spaces rich pads lines with."""
    return "\n".join(line.rstrip() for line in console.export_text(styles=styles).splitlines()) + "\n"


EXPECTED_VERIFIED = """\

Verified against two real steps on NVIDIA H200 (torch 2.11.0+cu130), recorded in runs/mlp.json.gz
                           planned           measured  error
  peak allocated         700.0 MiB          705.0 MiB  -0.7%
  peak reserved          800.0 MiB          810.0 MiB  -1.2%
  peak in         step 2, backward  step 2, optimizer
first divergence: none; every allocation of 1 MiB or more matches the card's, in order
within the plan's own bound (1% peak, 5% reserved)
"""


def test_a_step_within_the_plans_bound_renders_exactly():
    check = verification(700 * MiB, 705 * MiB, reserved=(800 * MiB, 810 * MiB))
    plan = t4_plan("m.py", **CHECKED_PLAN)
    assert render_check(check, plan) == EXPECTED_VERIFIED
    assert within_bound(check, plan)


def test_a_step_outside_the_bound_asks_for_the_trace_in_red():
    check = verification(700 * MiB, 750 * MiB)
    plan = t4_plan("m.py", **CHECKED_PLAN)
    ansi = render_check(check, plan, force_terminal=True, color_system="standard")
    assert "\x1b[1;31mOUTSIDE the plan's own bound (1% peak, 5% reserved): please report it" in ansi
    assert not within_bound(check, plan)


@pytest.mark.parametrize(
    ("planned", "agreed", "words"),
    [
        (700 * MiB, True, "the plan is a lower bound and the card's peak is at or above it"),
        (
            800 * MiB,
            False,
            "the card's peak is BELOW the plan's lower bound: please report it with the trace",
        ),
    ],
)
@pytest.mark.parametrize("confidence", [FLOOR, {"confidence": None}], ids=["lower bound", "no confidence"])
def test_a_lower_bound_agrees_when_the_card_is_at_or_above_it(planned, agreed, words, confidence):
    check = verification(planned, 750 * MiB)
    plan = t4_plan("m.py", **confidence)
    assert render_check(check, plan).endswith(f"\n{words}\n")
    assert within_bound(check, plan) is agreed


def test_a_card_out_of_memory_never_agrees_and_says_why():
    check = verification(
        700 * MiB,
        700 * MiB,
        oom=True,
        result={"device": "NVIDIA T4", "error": "torch.OutOfMemoryError: out of memory"},
    )
    plan = t4_plan("m.py", **CHECKED_PLAN)
    text = render_check(check, plan)
    assert text.startswith("\nVerified against two real steps on NVIDIA T4, recorded in runs/mlp.json.gz\n")
    assert "\nthe card ran out of memory: torch.OutOfMemoryError: out of memory\n" in text
    outside = "OUTSIDE the plan's own bound (1% peak, 5% reserved): please report it with the trace"
    assert text.endswith(f"\n{outside}\n")
    assert not within_bound(check, plan)


def test_a_live_step_names_its_first_divergence_and_no_recording():
    divergence = Divergence(
        2, "forward", 12, ("alloc 128.0 MiB",), ("alloc 64.0 MiB",), planned_where="m.py:5"
    )
    check = verification(700 * MiB, 700 * MiB, divergence=divergence, source="this machine's GPU")
    text = render_check(check, t4_plan("m.py", **CHECKED_PLAN), width=200)
    assert text.startswith("\nVerified against two real steps on NVIDIA H200 (torch 2.11.0+cu130)\n")
    assert (
        "\nfirst divergence: step 2, forward, after 12 matching events: the card did alloc 128.0 MiB; "
        "the plan did alloc 64.0 MiB (plan at m.py:5)\n"
    ) in text


def test_build_verification_is_what_render_verification_prints():
    check, plan = verification(700 * MiB, 705 * MiB), t4_plan("m.py", **CHECKED_PLAN)
    console = Console(file=io.StringIO(), width=100, record=True, force_terminal=False)
    console.print(build_verification(check, plan))
    assert plain(console) == render_check(check, plan)
