"""Say why the winner wins: the verdict line, the roofline reasoning, the change to make.

Every sentence is built from measured or counted numbers of this run (samples/s, FLOPs and bytes
per step, the device's ceilings); none is a rule of thumb. The batch-size sentence is the one
a sweep needs: when a larger batch is not faster it says whether the step is bandwidth- or
compute-bound at both sizes, how FLOPs and bytes grew with the batch, and what FLOP/s and
bandwidth each size reached.
"""

from __future__ import annotations

from trainmedic.roofline.model import Roofline
from trainmedic.tune.model import Config, Row, TuneResult
from trainmedic.tune.ties import within_noise
from trainmedic.units import format_bandwidth, format_flops, format_seconds, format_sig3


def explain(result: TuneResult, limits: dict[str, int | None]) -> None:
    """Fill ``result.verdict``, ``result.why`` and ``result.change`` (a build target's code)."""
    best = result.row(result.best)
    if best is None:
        result.verdict = "nothing was measured" + (
            f": {result.stopped_early}" if result.stopped_early else ""
        )
        return
    result.verdict = _verdict(result, best)
    why = [_bound(best, best.roofline)] if best.roofline else []
    why += _batch_reason(result, best, limits)
    why += _variant_reasons(result, best)
    result.why = [line for line in why if line]
    if not result.change:
        result.change = change_for(best.config, result.baseline, result.device)


def _verdict(result: TuneResult, best: Row) -> str:
    speed = _speed(best)
    base = result.row(result.baseline)
    if result.ties:
        tied = [result.row(c) for c in result.ties]
        names = ", ".join(r.config.label for r in tied[:3] if r) + (
            f" and {len(tied) - 3} more" if len(tied) > 3 else ""
        )
        return (
            f"tie: {best.config.label} ({speed}) and {names} are within the noise of each other; "
            f"{best.config.label} is the smallest change"
        )
    if base is not None and base.config == best.config:
        return f"your baseline {best.config.label} is the fastest measured ({speed})"
    gain = f", {result.gain:.2f}x {result.baseline.label}" if result.gain and result.baseline else ""
    return f"fastest: {best.config.label} at {speed}{gain}"


def _speed(row: Row) -> str:
    unit = "samples/s" if row.config.batch_size is not None else "steps/s"
    m = row.measurement
    return f"{format_sig3(m.samples_per_s)} {unit} (±{m.spread:.0%})" if m else "-"


def _bound(row: Row, line: Roofline) -> str:
    ceilings = (
        f"step intensity {line.intensity:.1f} FLOP/byte, ridge {line.ridge:.1f} = "
        f"{format_flops(line.peak_flops)} / {format_bandwidth(line.bandwidth_bytes_per_s)}"
    )
    if line.roofline_s is None or line.bandwidth_share is None:
        return (
            f"{row.config.label} is {line.bound}-bound ({ceilings}); it reaches {line.share_of_ceiling:.0%} of the roof "
            f"({format_flops(line.achieved_flops)}){_above(line)}"
        )
    roof = line.bandwidth_share if line.bound == "bandwidth" else 1 - line.bandwidth_share
    return (
        f"{row.config.label} is {line.bound}-bound: op by op, {roof:.0%} of the {format_seconds(line.roofline_s)} the roofs allow "
        f"a step is spent under the {line.bound} roof ({ceilings}); measured {format_seconds(line.step_s)} a step, "
        f"{line.share_of_ceiling:.0%} of the roofline's speed{_above(line)}"
    )


def _above(line: Roofline) -> str:
    if line.share_of_ceiling <= 1.0:
        return ""
    return (
        " (above 100 %: the bytes are counted unfused, and fused kernels or data held in caches move fewer; "
        "or the ceilings were measured while the machine was busier)"
    )


def _batch_reason(result: TuneResult, best: Row, limits: dict[str, int | None]) -> list[str]:
    """Why this batch: what a larger one did (or why larger ones were faster up to here).

    The winner's own series first; when the staged search measured no larger batch there (its
    memory format or compile variant ran on the finalists only), the eager ladders show what a
    larger batch did, the winner's precision first.
    """
    lines = []
    series = _series(result, best.config)
    larger = [r for r in series if (r.config.batch_size or 0) > (best.config.batch_size or 0)]
    if larger:
        return [_larger_not_faster(best, larger[0], on_cpu=result.device == "cpu")]
    smaller = [r for r in series if (r.config.batch_size or 0) < (best.config.batch_size or 0)]
    first = smaller[0] if smaller else None
    if first is not None and best.roofline is not None and first.roofline is not None:
        first_line, line = first.roofline, best.roofline
        grew = line.intensity / first_line.intensity if first_line.intensity > 0 else 1.0
        limit = limits.get(best.config.precision)
        capped = (
            f"; batch {best.config.batch_size} is the largest the plan says fits"
            if limit == best.config.batch_size
            else ""
        )
        if grew > 1.2:
            lines.append(
                f"larger batches were faster up to {best.config.batch_size}: intensity grew {grew:.1f}x from batch "
                f"{first.config.batch_size} ({first_line.intensity:.1f} FLOP/byte) as weights are reused across "
                f"more samples{capped}"
            )
        else:
            lines.append(
                f"larger batches were faster up to {best.config.batch_size} with intensity flat at "
                f"{line.intensity:.1f} FLOP/byte: fixed per-step costs (optimizer, launches) spread over more "
                f"samples{capped}"
            )
    for precision in dict.fromkeys((best.config.precision, "fp32")):
        ladder = _series(result, Config(best.config.batch_size, precision))
        peak = max(ladder, key=lambda r: r.samples_per_s or 0.0, default=None)
        beyond = [
            r
            for r in ladder
            if peak is not None and (r.config.batch_size or 0) > (peak.config.batch_size or 0)
        ]
        if beyond and peak is not None and peak.config != best.config:
            lines.append(
                f"in the {precision} eager ladder, "
                + _larger_not_faster(peak, beyond[0], on_cpu=result.device == "cpu")
            )
            break
    return lines


def _series(result: TuneResult, config: Config) -> list[Row]:
    return sorted(
        (r for r in result.measured if _same_series(r.config, config)), key=lambda r: r.config.batch_size or 0
    )


def _larger_not_faster(best: Row, larger: Row, on_cpu: bool) -> str:
    b, big = best.config.batch_size, larger.config.batch_size
    verb = "is no faster than" if within_noise(best, larger) else "is slower than"
    head = f"batch {big} {verb} batch {b} ({_speed(larger)} vs {_speed(best)})"
    a, z = best.roofline, larger.roofline
    if a is None or z is None or a.flops_per_step <= 0 or a.bytes_per_step <= 0:
        return head
    flops, moved = z.flops_per_step / a.flops_per_step, z.bytes_per_step / a.bytes_per_step
    timed = a.step_s > 0 and z.step_s > 0
    per_sample = (z.step_s / big) / (a.step_s / b) if timed and b is not None and big is not None else 1.0
    grew = f"batch {big} does {flops:.1f}x the FLOPs and moves {moved:.1f}x the bytes of batch {b}"
    if z.bound == "bandwidth":
        reason = (
            f"{grew}, so the work per byte stays near {z.intensity:.1f} FLOP/byte and the step is bandwidth-bound "
            f"({z.bandwidth_share:.0%} of its roofline time under the bandwidth roof): memory traffic, not the batch, sets "
            f"the speed. It moved {format_bandwidth(z.achieved_bandwidth)} against {format_bandwidth(a.achieved_bandwidth)} at "
            f"batch {b}, of the {format_bandwidth(z.bandwidth_bytes_per_s)} the device can"
        )
    else:
        both = "at both" if a.bound == "compute" else f"at batch {big} (bandwidth-bound at batch {b})"
        reason = (
            f"{grew} at {z.intensity:.1f} against {a.intensity:.1f} FLOP/byte; the step is compute-bound {both}, where a "
            f"larger batch only adds work: batch {b} ran at {a.share_of_ceiling:.0%} of the roofline's speed and batch {big} "
            f"at {z.share_of_ceiling:.0%}"
        )
    if per_sample > 1.05:
        cache = (
            "; on a CPU a working set that outgrows the caches is served from slower memory"
            if on_cpu
            else "; larger tensors can also change which kernels run"
        )
        reason += f". Per sample, batch {big} took {per_sample:.2f}x as long: its tensors are {moved:.1f}x larger{cache}"
    return f"{head}: {reason}"


def _variant_reasons(result: TuneResult, best: Row) -> list[str]:
    """What precision, memory format and compile did, each against the same configuration without it."""
    lines = []
    for field, off in (("precision", "fp32"), ("memory_format", "contiguous"), ("compile", False)):
        if getattr(best.config, field) == off:
            continue
        other = result.row(best.config.replace(**{field: off}))
        if other is None or other.measurement is None or best.measurement is None:
            continue
        ratio = best.measurement.samples_per_s / other.measurement.samples_per_s
        if field == "precision":
            moved = ""
            if best.roofline and other.roofline:
                moved = f"; it moves {best.roofline.bytes_per_step / other.roofline.bytes_per_step:.2f}x the bytes per step"
            lines.append(
                f"{best.config.precision} is {ratio:.2f}x fp32 at batch {best.config.batch_size}{moved}"
            )
        elif field == "memory_format":
            lines.append(
                f"{best.config.memory_format} is {ratio:.2f}x the default layout at the same batch and precision"
            )
        else:
            lines.append(
                f"torch.compile is {ratio:.2f}x eager; its first step took {format_seconds(best.measurement.first_step_s)} "
                f"(compilation, paid once per run) against {format_seconds(other.measurement.first_step_s)} eager"
            )
    for row in result.measured:
        if row.config.compile and row.config != best.config and row.config != result.best:
            eager = result.row(row.config.replace(compile=False))
            if (
                eager is not None
                and eager.measurement
                and row.measurement
                and eager.measurement.samples_per_s > row.measurement.samples_per_s
            ):
                lines.append(
                    f"torch.compile did not pay at {row.config.replace(compile=False).label}: "
                    f"{row.measurement.samples_per_s / eager.measurement.samples_per_s:.2f}x eager after a "
                    f"{format_seconds(row.measurement.first_step_s)} first step"
                )
                break
    return lines


def change_for(best: Config, baseline: Config | None, device: str) -> str:
    """The code that turns the baseline's training step into the best one's."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    lines = []
    if baseline is None or best.batch_size != baseline.batch_size:
        was = f"  # was {baseline.batch_size}" if baseline is not None else ""
        lines.append(f"batch_size = {best.batch_size}{was}")
    if best.memory_format != "contiguous" and (
        baseline is None or best.memory_format != baseline.memory_format
    ):
        fmt = f"torch.{best.memory_format}"
        rank = "5-D" if best.memory_format.endswith("3d") else "4-D"
        lines.append(
            f"model = model.to(memory_format={fmt})  # and each {rank} batch: x = x.contiguous(memory_format={fmt})"
        )
    if best.compile and (baseline is None or not baseline.compile):
        lines.append("model = torch.compile(model)")
    if best.precision == "tf32":
        lines.append("torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True")
    elif best.precision in ("bf16", "fp16") and (baseline is None or best.precision != baseline.precision):
        dtype = "bfloat16" if best.precision == "bf16" else "float16"
        lines.append(f'with torch.autocast("{kind}", dtype=torch.{dtype}):  # forward and loss only')
        lines.append("    loss = loss_fn(model(x), y)")
        if best.precision == "fp16":
            lines.append(f'scaler = torch.amp.GradScaler("{kind}")  # once, before the loop')
            lines.append("scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()")
    return "\n".join(lines) if lines else "no change: your configuration is the fastest measured"


def _same_series(a: Config, b: Config) -> bool:
    return (a.precision, a.compile, a.memory_format, a.overrides) == (
        b.precision,
        b.compile,
        b.memory_format,
        b.overrides,
    )
