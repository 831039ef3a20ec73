"""The ``trainmedic tune`` console answer, rendered at a fixed width without colour, checked as text.

The fixtures are built by hand and shared with test_tune_html: a 3D U-Net (seed 002) where
batch 2 beats batch 4 and every configuration is bandwidth-bound, and an MLP that is
compute-bound and whose search the budget cut short.
"""

from __future__ import annotations

import io

from rich.console import Console

from trainmedic.tune.console import (
    format_bandwidth,
    format_flops,
    format_times,
    ordered_rows,
    render_tune,
    sig3,
)
from trainmedic.tune.model import Ceilings, Config, Measurement, Roofline, Row, TuneResult

A100 = Ceilings(
    "NVIDIA A100 80GB (SXM4)",
    {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    2039e9,
    "catalog",
)
H100 = Ceilings(
    "NVIDIA H100 80GB HBM3 (SXM)",
    {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    3350e9,
    "catalog",
)


def _row(
    ceil: Ceilings,
    flops_per_sample: float,
    batch: int,
    precision: str,
    speed: float,
    intensity: float,
    first_step_s: float = 2.1,
    compile: bool = False,
    memory_format: str = "contiguous",
    noise: float = 0.01,
) -> Row:
    """A measured row: five trials around ``speed`` (spread ``noise``), its roofline under ``ceil``'s roofs."""
    trials = tuple(speed * (1 + noise * k) for k in (-1.5, -1.0, 0.0, 1.0, 1.5))
    flops = flops_per_sample * batch
    roof = Roofline(
        flops,
        flops / intensity,
        ceil.peak_flops[precision],
        ceil.bandwidth_bytes_per_s,
        flops * speed / batch,
    )
    return Row(
        Config(batch, precision, compile, memory_format),
        "measured",
        Measurement(trials, 20, first_step_s, 3),
        roof,
    )


def unet3d_result() -> TuneResult:
    """Seed 002: memory-bandwidth-bound 3D convolutions; batch 4 is slower than batch 2."""
    f = 1.2e12  # FLOP per sample, forward and backward
    rows = [
        _row(A100, f, 1, "fp32", 5.1, 6.1),
        _row(A100, f, 2, "fp32", 6.0, 6.4),
        _row(A100, f, 4, "fp32", 5.2, 6.5),
        Row(Config(8, "fp32"), "skipped", reason="the plan needs 91.3 GiB of 75.3 GiB usable"),
        _row(A100, f, 1, "bf16", 9.8, 12.0),
        _row(A100, f, 2, "bf16", 11.4, 12.6),
        _row(A100, f, 4, "bf16", 9.9, 12.9),
        Row(
            Config(8, "bf16"),
            "failed",
            reason="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        _row(
            A100,
            f,
            2,
            "bf16",
            11.3,
            17.5,
            first_step_s=48.2,
            compile=True,
            memory_format="channels_last_3d",
            noise=0.02,
        ),
    ]
    best, tie = Config(2, "bf16"), Config(2, "bf16", True, "channels_last_3d")
    return TuneResult(
        target="dose_unet.py:build",
        device="cuda:0 (NVIDIA A100-SXM4-80GB)",
        ceilings=A100,
        rows=rows,
        best=best,
        ties=[tie],
        baseline=Config(4, "fp32"),
        baseline_source="largest batch that fits",
        verdict="batch 2 · bf16 is fastest: 11.4 samples/s, bandwidth-bound at 53% of its roof",
        why=[
            (
                "Every configuration is bandwidth-bound: 6-18 FLOP/B, left of the ridge (9.6 FLOP/B fp32, "
                "153 FLOP/B bf16)."
            ),
            (
                "Batch 4 is slower than batch 2: a bigger batch adds bytes as fast as FLOPs, so intensity "
                "cannot rise, and the working set spills out of L2."
            ),
            "bf16 halves the bytes a step moves: 1.9x at batch 2. compile ties within the noise.",
        ],
        change='loader = DataLoader(ds, batch_size=2)\nwith torch.autocast("cuda", dtype=torch.bfloat16):\n'
        "    loss = step(model, x[idx])",
        budget_s=600.0,
        elapsed_s=412.0,
        notes=["5 trials of 20 steps each after warm-up; ± is the trials' spread."],
        warnings=["batch 8 · bf16 failed out of memory although the plan said it fits: raise --headroom"],
    )


def mlp_result() -> TuneResult:
    """A wide MLP on an H100: compute-bound, bf16 wins by a lot; the budget ended the search."""
    f = 6 * 12e6 * 8  # 6 x parameters x tokens per sample
    rows = [
        _row(H100, f, 4096, "bf16", 612_000.0, 1210.0, first_step_s=0.9),
        _row(H100, f, 1024, "bf16", 431_000.0, 700.0, first_step_s=0.8),
        _row(H100, f, 4096, "fp32", 51_200.0, 605.0, first_step_s=0.7),
        _row(H100, f, 1024, "fp32", 48_700.0, 350.0, first_step_s=0.6),
        Row(Config(4096, "bf16", compile=True), "not_run", reason="the 2m budget ran out"),
        Row(Config(4096, "fp16"), "not_run"),
    ]
    return TuneResult(
        target="mlp.py:build",
        device="cuda:0 (NVIDIA H100 80GB HBM3)",
        ceilings=H100,
        rows=rows,
        best=Config(4096, "bf16"),
        baseline=Config(4096, "fp32"),
        baseline_source="largest batch that fits",
        verdict="batch 4096 · bf16 is fastest: 612,000 samples/s, compute-bound at 36% of its roof",
        why=["Compute-bound above 350 FLOP/B: only a faster precision raises the roof."],
        change="--precision bf16",
        budget_s=120.0,
        elapsed_s=121.5,
        stopped_early="the budget of 2m ran out after 4 measured configurations",
    )


def empty_result() -> TuneResult:
    """Nothing fits: every configuration skipped, no ceilings known."""
    return TuneResult(
        target="big.py:build",
        device="cpu",
        ceilings=None,
        rows=[Row(Config(1, "fp32"), "skipped", reason="the plan needs 31.0 GiB of 15.0 GiB usable")],
        elapsed_s=3.2,
    )


def render(result: TuneResult, width: int = 100) -> str:
    out = io.StringIO()
    render_tune(result, Console(file=out, width=width, color_system=None, legacy_windows=False))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


UNET3D = """\
trainmedic tune  dose_unet.py:build
device:    cuda:0 (NVIDIA A100-SXM4-80GB)
ceilings:  fp32 19.5 · tf32 156 · bf16 312 · fp16 312 TFLOP/s · memory 2,039 GB/s (from the catalog)
search:    9 configurations in 6m52s of a 10m budget: 7 measured, 1 skipped, 1 failed

config                      samples/s      ±  vs base  1st step  FLOP/B  bound      % roof
batch 2 · bf16                   11.4  ±1.0%    2.19x    2.10 s    12.6  bandwidth     53%  ◀ best
batch 2 · bf16 · compile ·       11.3  ±2.0%    2.17x   48.20 s    17.5  bandwidth     38%  tie
channels_last_3d
batch 4 · bf16                   9.90  ±1.0%    1.90x    2.10 s    12.9  bandwidth     45%
batch 1 · bf16                   9.80  ±1.0%    1.88x    2.10 s    12.0  bandwidth     48%
batch 2 · fp32                   6.00  ±1.0%    1.15x    2.10 s    6.40  bandwidth     55%
batch 4 · fp32                   5.20  ±1.0%    1.00x    2.10 s    6.50  bandwidth     47%  baseline
batch 1 · fp32                   5.10  ±1.0%    0.98x    2.10 s    6.10  bandwidth     49%

Not measured
  batch 8 · fp32  skipped  the plan needs 91.3 GiB of 75.3 GiB usable
  batch 8 · bf16  failed   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB

batch 2 · bf16 is fastest: 11.4 samples/s, bandwidth-bound at 53% of its roof
  - Every configuration is bandwidth-bound: 6-18 FLOP/B, left of the ridge (9.6 FLOP/B fp32, 153
    FLOP/B bf16).
  - Batch 4 is slower than batch 2: a bigger batch adds bytes as fast as FLOPs, so intensity cannot
    rise, and the working set spills out of L2.
  - bf16 halves the bytes a step moves: 1.9x at batch 2. compile ties within the noise.
change:
    loader = DataLoader(ds, batch_size=2)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step(model, x[idx])
2.19x faster than batch 4 · fp32 (largest batch that fits)

note: 5 trials of 20 steps each after warm-up; ± is the trials' spread.
warning: batch 8 · bf16 failed out of memory although the plan said it fits: raise --headroom
"""


def test_unet3d_renders_exactly():
    assert render(unet3d_result()) == UNET3D


def test_every_line_fits_100_columns_and_a_narrow_console_does_not_break():
    for make in (unet3d_result, mlp_result, empty_result):
        assert max(len(line) for line in render(make()).splitlines()) <= 100
        assert "trainmedic tune" in render(make(), width=60)


def test_best_first_then_by_speed_then_skipped_failed_not_run():
    r = unet3d_result()
    r.rows.append(Row(Config(16, "fp32"), "not_run", reason="Ctrl+C"))
    r.rows.insert(0, Row(Config(16, "bf16"), "skipped", reason="too big"))
    labels = [row.config.label for row in ordered_rows(r)]
    assert labels[:3] == ["batch 2 · bf16", "batch 2 · bf16 · compile · channels_last_3d", "batch 4 · bf16"]
    assert labels[-4:] == ["batch 16 · bf16", "batch 8 · fp32", "batch 8 · bf16", "batch 16 · fp32"]
    # The tuner may name a slower configuration best (the simpler of a tie): it still comes first.
    r.best, r.ties = r.ties[0], [r.best]
    text = render(r)
    assert text.index("compile ·") < text.index("batch 2 · bf16   ")
    assert "tie\n" in text.split("batch 2 · bf16   ", 1)[1].splitlines(keepends=True)[0]


def test_a_tied_baseline_is_not_called_a_gain():
    r = unet3d_result()
    r.baseline = r.ties[0]
    text = render(r)
    assert "tie · baseline" in text
    assert (
        "the baseline, batch 2 · bf16 · compile · channels_last_3d (largest batch that fits), is already as "
        "fast as any" in text.replace("\n", " ")
    )
    r.baseline = r.best
    assert "◀ best · baseline" in render(r)


def test_stopped_early_says_what_was_measured():
    text = render(mlp_result())
    assert (
        "stopped early: the budget of 2m ran out after 4 measured configurations (4 of 6 measured, 2 not\n"
        "run); the verdict covers only what was measured" in text
    )
    assert "  batch 4096 · bf16 · compile  not run  the 2m budget ran out\n" in text
    assert "  batch 4096 · fp16            not run  no reason recorded\n" in text
    assert "batch 4096 · bf16    612,000  ±1.0%    12.0x  900.0 ms   1,210  compute     36%  ◀ best" in text
    assert "12.0x faster than batch 4096 · fp32 (largest batch that fits)" in text
    assert "fp32 67.0 · tf32 494 · bf16 990 · fp16 990 TFLOP/s · memory 3,350 GB/s" in text


def test_empty_result_renders_and_says_so():
    assert (
        render(empty_result())
        == """\
trainmedic tune  big.py:build
device:    cpu
ceilings:  unknown, so no roofline
search:    1 configuration in 3.20 s: 1 skipped

No configuration was measured, so there is no winner.

Not measured
  batch 1 · fp32  skipped  the plan needs 31.0 GiB of 15.0 GiB usable

No verdict: nothing was measured.
"""
    )
    bare = TuneResult(
        target="t.py:build",
        device="cpu",
        ceilings=None,
        stopped_early="stopped by Ctrl+C after 0 measured configurations",
    )
    text = render(bare)
    assert "search:    0 configurations in 0.0 ms\n" in text
    assert (
        "stopped early: stopped by Ctrl+C after 0 measured configurations (0 of 0 measured); nothing to\n"
        "compare" in text
    )


def test_strings_print_verbatim_not_as_markup():
    r = unet3d_result()
    r.target = "[red]model.py[/red]:build"
    r.change = "x = batch[idx]  # [bold]not markup[/bold]"
    r.rows[3].reason = "[b]needs[/b] 9 GiB"
    text = render(r)
    assert "[red]model.py[/red]:build" in text
    assert "x = batch[idx]  # [bold]not markup[/bold]" in text
    assert "[b]needs[/b] 9 GiB" in text


def test_a_script_without_a_batch_size_reports_steps_per_second():
    m = Measurement((3.0, 3.1, 3.2), 10, 1.5)
    r = TuneResult(
        target="train.py",
        device="cpu",
        ceilings=None,
        rows=[Row(Config(None, overrides=(("lr", "0.1"), ("amp", "1"))), "measured", m)],
        best=Config(None, overrides=(("lr", "0.1"), ("amp", "1"))),
    )
    text = render(r)
    assert "steps/s" in text and "samples/s" not in text
    assert (
        "lr=0.1 amp=1     3.10  ±3.2%        —    1.50 s  ◀ best" in text
    )  # no roofline columns without ceilings


def test_numbers():
    assert [sig3(x) for x in (0, 6, 11.44, 612_345, 0.0123, float("nan"), None)] == [
        "0",
        "6.00",
        "11.4",
        "612,000",
        "0.0123",
        "—",
        "—",
    ]
    assert format_flops(19.5e12) == "19.5 TFLOP/s" and format_flops(850e9) == "850 GFLOP/s"
    assert format_bandwidth(2039e9) == "2,039 GB/s" and format_bandwidth(51.2e9) == "51.2 GB/s"
    assert [format_times(x) for x in (1.834, 12.34, None)] == ["1.83x", "12.3x", "—"]
