"""``trainmedic``: the command line. Parses arguments, calls the library, renders, exits."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from typer.core import TyperGroup

from trainmedic._version import __version__
from trainmedic.cli.run_options import RunOptions
from trainmedic.cli.script_args import mark_script_args

# Each command imports its own module when it runs: `trainmedic lint` never loads the watch,
# `trainmedic run` never loads the planner (hundreds of milliseconds before any work otherwise).

app = typer.Typer(
    name="trainmedic",
    help="Make GPU training fast and keep it from crashing.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits it
)


class _OutputFormat(str, Enum):
    """`trainmedic lint --output-format` (trainmedic.lint.formats.FORMATS, not imported until lint runs)."""

    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


#: main() marks where the script's own arguments begin with `--` (cli/script_args.py); this
#: keeps `run train.py --iters 3` working when the app is called without it (tests, embedding).
_SCRIPT_ARGS = {"allow_interspersed_args": False}


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
) -> None:
    """Make GPU training fast and keep it from crashing."""


#: ``trainmedic run --confirm`` without ``--steps``: the window the confirmation follows.
DEFAULT_CONFIRM_STEPS = 50


@app.command(context_settings=_SCRIPT_ARGS)
def run(
    target: list[str] = typer.Argument(
        None, metavar="SCRIPT [ARGS]...", help="The training script and its own arguments."
    ),
    module: str | None = typer.Option(
        None, "--module", "-m", metavar="MODULE", help="Run a module, like python -m."
    ),
    steps: int | None = typer.Option(
        None, "--steps", min=1, help="Stop after N steady-state steps: diagnosis only."
    ),
    json_path: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the report as JSON (trainmedic.report/1)."
    ),
    html_path: Path | None = typer.Option(
        None, "--html", metavar="PATH", help="Write a self-contained HTML report."
    ),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Steps excluded from steady state at the start."),
    interval_ms: float = typer.Option(10.0, "--interval-ms", min=1.0, help="Stack sampling interval."),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Do not print the report (files are still written)."
    ),
    nproc: int | None = typer.Option(
        None,
        "--nproc",
        min=1,
        metavar="N",
        help="Run on N local torchrun ranks; one merged report (per-rank steps, the straggler).",
    ),
    confirm: bool | None = typer.Option(
        None,
        "--confirm/--no-confirm",
        help="After the steps, try the top finding's fix for a few more and time it (on with --steps; "
        "--confirm alone means --steps 50).",
    ),
) -> None:
    """Run a training script unmodified and report why it is slow, at which line, and what the fix buys.

    Use it exactly like python: `trainmedic run train.py --epochs 3` or `trainmedic run -m pkg.train`.
    trainmedic's own options go before the script. Under torchrun (`torchrun --nproc-per-node 2 -m
    trainmedic run train.py`) rank 0 prints one report for the whole job; --nproc N launches that.
    """
    args = list(target or [])
    if module is None and not args:
        _fail(
            "give a script to run (trainmedic run train.py ...) or a module (trainmedic run -m pkg.train ...)"
        )
    name = module if module is not None else args.pop(0)
    if confirm and steps is None:
        steps = DEFAULT_CONFIRM_STEPS  # the confirmation follows a window: a diagnosis-only run
    options = RunOptions(
        target=name,
        args=args,
        module=module is not None,
        steps=steps,
        confirm=steps is not None if confirm is None else confirm,
        json_path=json_path,
        html_path=html_path,
        warmup=warmup,
        interval_s=interval_ms / 1000,
        quiet=quiet,
        nproc=nproc,
    )
    from trainmedic.cli.run import run_target

    raise typer.Exit(run_target(options, _stderr()))


@app.command()
def attach(
    pid: int = typer.Argument(..., metavar="PID", help="The process id of the running training job."),
    duration: str = typer.Option(
        "30s", "--duration", "-d", metavar="TIME", help="How long to sample: 30s, 2m."
    ),
    rate: int = typer.Option(100, "--rate", min=1, max=1000, metavar="HZ", help="Stack samples per second."),
    dump: bool = typer.Option(False, "--dump", help="Print every thread's stack now, your lines marked."),
    json_path: Path | None = typer.Option(None, "--json", metavar="PATH", help="Write the report as JSON."),
    html_path: Path | None = typer.Option(None, "--html", metavar="PATH", help="Write an HTML report."),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Do not print the report (files are still written)."
    ),
) -> None:
    """Diagnose a training job that is already running, from outside, without stopping or restarting it.

    Reads the job's stacks with py-spy (pip install 'trainmedic[attach]') for --duration, child
    processes included (torchrun ranks, DataLoader workers), and prints run's report, marked as
    sampled. --dump prints one stack per thread instead: for a job that looks hung.
    """
    from trainmedic.cli import attach as attach_command

    options = attach_command.AttachOptions(
        pid=pid,
        duration=duration,
        rate=rate,
        dump=dump,
        json_path=json_path,
        html_path=html_path,
        quiet=quiet,
    )
    raise typer.Exit(attach_command.run_attach(options, Console(highlight=False), _stderr()))


@app.command()
def demo(
    steps: int = typer.Option(60, "--steps", min=8, help="Steady-state steps per loop."),
    html_path: Path | None = typer.Option(None, "--html", metavar="PATH", help="Also write the HTML report."),
    json_path: Path | None = typer.Option(None, "--json", metavar="PATH", help="Also write the JSON report."),
) -> None:
    """Diagnose an embedded, deliberately starved training loop (no data or GPU needed)."""
    from trainmedic.cli import demo as demo_command

    raise typer.Exit(demo_command.run_demo(steps, json_path, html_path, _stderr()))


@app.command()
def lint(
    paths: list[str] = typer.Argument(None, metavar="PATH", help="Python files or folders (default: .)."),
    output_format: _OutputFormat | None = typer.Option(
        None, "--output-format", metavar="FORMAT", help="text (default), json, sarif or github (annotations)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print findings as a JSON list on stdout."),
    fix: bool = typer.Option(False, "--fix", help="Apply the mechanical repairs; print what is left."),
    diff: bool = typer.Option(False, "--diff", help="Print the repairs as a diff; change no file."),
    explain: str | None = typer.Option(
        None, "--explain", metavar="CODE", help="Explain a rule: why, fix, example."
    ),
    select: str | None = typer.Option(
        None, "--select", metavar="CODES", help="Only these codes or prefixes (TM107,TM11)."
    ),
    ignore: str | None = typer.Option(
        None, "--ignore", metavar="CODES", help="Skip these codes or prefixes."
    ),
    config: str | None = typer.Option(None, "--config", metavar="PATH", help="The pyproject.toml to read."),
    isolated: bool = typer.Option(False, "--isolated", help="Ignore [tool.trainmedic.lint] settings."),
    force_exclude: bool = typer.Option(False, "--force-exclude", help="Also exclude files named here."),
    list_rules: bool = typer.Option(False, "--list-rules", help="List every rule and exit."),
) -> None:
    """Find training-code pitfalls without running the code: path:line:col: CODE message.

    TM1xx: time a step loses; TM2xx: training that is silently wrong or leaks memory; TM3xx: calls
    that are unsafe, deprecated or about to change.

    Exit code 0 when clean, 1 with findings (or a file that cannot be parsed), 2 on usage errors.
    Silence one line with `# noqa: TM107`; settings in pyproject.toml's [tool.trainmedic.lint].
    """
    from trainmedic.cli import lint as lint_command
    from trainmedic.cli.lint import LintOptions

    if explain is not None:
        raise typer.Exit(lint_command.explain(explain, typer.echo, _stderr()))
    if list_rules:
        raise typer.Exit(lint_command.list_rules(typer.echo))
    fmt = output_format.value if output_format is not None else None
    options = LintOptions(
        output_format=fmt,
        as_json=json_output,
        select=select,
        ignore=ignore,
        fix=fix,
        diff=diff,
        config=config,
        isolated=isolated,
        force_exclude=force_exclude,
    )
    raise typer.Exit(lint_command.run_lint(list(paths or []), options, out=typer.echo, err=_stderr()))


@app.command()
def plan(
    items: list[str] = typer.Argument(
        None,
        metavar="SPEC [-- ARGS]",
        help="PATH.py:FUNCTION or package.module:FUNCTION (default FUNCTION: build); after --, the "
        "command line the module sees when it is imported (default: none, as `python model.py`).",
    ),
    device: str | None = typer.Option(
        None, "--device", "-d", metavar="NAME", help="Target GPU: t4, rtx3090, a100-80gb, h100, cpu, ..."
    ),
    capacity: str | None = typer.Option(
        None,
        "--capacity",
        metavar="SIZE",
        help="Memory of the target (48GiB, 24GB): overrides --device's, or names any card.",
    ),
    batch: int | None = typer.Option(
        None, "--batch", "-b", metavar="N", help="Batch size to plan (with --max-batch: plan this one too)."
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        metavar="fp32|tf32|bf16|fp16",
        help="Training precision; bf16/fp16 mean autocast (default fp32).",
    ),
    max_batch: bool = typer.Option(
        False,
        "--max-batch",
        help="Also find the largest batch that fits (the plan is made at it unless --batch is given).",
    ),
    headroom: float = typer.Option(
        0.1, "--headroom", metavar="F", help="Share of the memory to keep free (default 0.1, as tune)."
    ),
    json_path: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the plan as JSON (trainmedic.plan/1)."
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Do not print the plan (the JSON is still written)."
    ),
    list_devices: bool = typer.Option(False, "--list-devices", help="List the GPUs --device knows and exit."),
    verify: bool = typer.Option(
        False, "--verify", help="Run two steps for real on this machine's GPU and compare them with the plan."
    ),
    verify_trace: Path | None = typer.Option(
        None,
        "--verify-trace",
        metavar="TRACE",
        help="Compare the plan with a step recorded earlier (gpu-alloc-trace/1, .json or .json.gz).",
    ),
    record: Path | None = typer.Option(
        None,
        "--record",
        metavar="TRACE",
        help="With --verify: keep the recorded step (a .json.gz for --verify-trace).",
    ),
) -> None:
    """Predict the peak GPU memory of one training step before touching a GPU.

    SPEC names a function build(batch_size) returning dict(model=..., inputs=..., optimizer=...,
    loss_fn=...). Exit code 0 when the plan fits (and, verified, the card agreed within the plan's
    own bound), 1 when it does not, 2 on bad input.
    """
    from trainmedic.cli import plan as plan_command

    if list_devices:
        raise typer.Exit(plan_command.list_devices(Console(highlight=False)))
    spec, spec_args = (items[0], items[1:]) if items else (None, [])
    options = plan_command.PlanOptions(
        spec=spec,
        device=device,
        capacity=capacity,
        batch=batch,
        precision=precision,
        max_batch=max_batch,
        headroom=headroom,
        json_path=json_path,
        quiet=quiet,
        verify=verify,
        verify_trace=verify_trace,
        record=record,
        spec_args=tuple(spec_args),
    )
    raise typer.Exit(plan_command.run_plan(options, Console(highlight=False), _stderr()))


@app.command()
def preflight(
    names: list[str] = typer.Argument(
        None, metavar="NAME", help="Run only these experiments of pyproject.toml."
    ),
    commands: list[str] = typer.Option(
        None,
        "--command",
        "-c",
        metavar="COMMAND",
        help='Run this command as an experiment, e.g. "python train.py --steps 5" (repeatable; no pyproject.toml needed).',
    ),
    budget: str | None = typer.Option(
        None,
        "--budget",
        metavar="DURATION",
        help="Wall-clock budget of each run, e.g. 2m (default: pyproject's, else 2m).",
    ),
    device: str | None = typer.Option(
        None,
        "--device",
        "-d",
        metavar="NAME",
        help="Target GPU for the memory plan: t4, rtx3090, a100-80gb, h100, ...",
    ),
    session_limit: str | None = typer.Option(
        None,
        "--session-limit",
        metavar="DURATION",
        help="The platform's session limit, e.g. 9h: does the full run fit?",
    ),
    no_resume_check: bool = typer.Option(
        False,
        "--no-resume-check",
        help="Skip save -> kill -> resume for scripts that use checkpoint.Checkpointer.",
    ),
    json_path: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the report as JSON (trainmedic.preflight/1)."
    ),
    project: Path | None = typer.Option(
        None,
        "--project",
        metavar="DIR",
        help="The project folder (default: the nearest pyproject.toml from here up).",
    ),
) -> None:
    """Run every experiment for a few tiny steps on the CPU before spending GPU hours.

    Experiments are declared under [tool.trainmedic.preflight.experiments] in pyproject.toml or
    given with --command. Each is reported passed, failed (the error and your line) or stuck (where,
    and a config override that missed a copy); scripts using checkpoint.Checkpointer are also saved,
    killed and resumed, and must continue identically. Exit code 0 when all passed, 1 otherwise,
    2 on bad input.
    """
    from trainmedic.cli import preflight as preflight_command

    options = preflight_command.PreflightOptions(
        names=tuple(names or ()),
        commands=tuple(commands or ()),
        budget=budget,
        device=device,
        session_limit=session_limit,
        resume_check=False if no_resume_check else None,
        json_path=json_path,
        project=project,
    )
    raise typer.Exit(preflight_command.run_preflight_command(options, Console(highlight=False), _stderr()))


@app.command()
def tune(
    items: list[str] = typer.Argument(
        None,
        metavar="SPEC [-- ARGS]",
        help="PATH.py:FUNCTION (as for plan); after --, the command line the module sees when "
        "imported, or with --script the script's own arguments.",
    ),
    script: str | None = typer.Option(
        None, "--script", metavar="PATH", help="Tune a training script instead, over the options --set names."
    ),
    sets: list[str] = typer.Option(
        None,
        "--set",
        metavar="NAME=V1,V2",
        help="A script option and the values to try (repeatable), e.g. --set batch_size=2,4,8.",
    ),
    device: str = typer.Option(
        "auto",
        "--device",
        "-d",
        metavar="auto|cpu|cuda[:N]",
        help="Where to measure (default: CUDA when present).",
    ),
    batch: str | None = typer.Option(
        None,
        "--batch",
        "-b",
        metavar="N,N,...",
        help="Batch sizes to measure (default: powers of two up to the largest that fits).",
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        metavar="fp32,bf16,...",
        help="Precisions to measure: fp32, tf32, bf16, fp16 (default: what the device runs fast).",
    ),
    compile_mode: str = typer.Option(
        "auto",
        "--compile",
        metavar="auto|on|off|both",
        help="torch.compile: auto/both measure it on the fastest eager configurations.",
    ),
    memory_format: str | None = typer.Option(
        None,
        "--memory-format",
        metavar="FORMATS",
        help="contiguous, channels_last, channels_last_3d (default: channels_last[_3d] for conv nets).",
    ),
    budget: str | None = typer.Option(
        None,
        "--budget",
        metavar="DURATION",
        help="Stop measuring after this long, e.g. 5m; the result holds what was measured.",
    ),
    trials: int = typer.Option(
        5, "--trials", min=3, help="Timed trials per configuration (median and spread)."
    ),
    current: int | None = typer.Option(
        None,
        "--current",
        min=1,
        metavar="N",
        help="The batch you train with now (fp32, eager): the gain is measured against it.",
    ),
    exhaustive: bool = typer.Option(
        False, "--exhaustive", help="Measure the whole grid instead of the staged search."
    ),
    headroom: float = typer.Option(
        0.1, "--headroom", metavar="F", help="Share of the memory the plan keeps free when it skips batches."
    ),
    capacity: str | None = typer.Option(
        None,
        "--capacity",
        metavar="SIZE",
        help="Plan against this much memory instead of what is free now, e.g. 16GiB.",
    ),
    steps: int | None = typer.Option(
        None,
        "--steps",
        min=4,
        help="With --script: steady-state steps measured per run (default 30).",
    ),
    json_path: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the result as JSON (trainmedic.tune/1)."
    ),
    html_path: Path | None = typer.Option(
        None,
        "--html",
        metavar="PATH",
        help="Write an HTML page with throughput-vs-batch and roofline charts.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Do not print the table (files are still written)."
    ),
) -> None:
    """Find the fastest batch size, precision, memory format and compile setting by measurement.

    SPEC names the same build(batch_size) function `trainmedic plan` takes. Each configuration runs
    real training steps (warm-up apart, repeated trials, median and spread); configurations the
    plan says do not fit are skipped, never run. A roofline per configuration says whether it is
    compute- or bandwidth-bound. Exit code 0 when done, 2 on bad input, 130 after Ctrl+C.
    """
    from trainmedic.cli import tune as tune_command

    words = list(items or [])
    spec = None if script is not None or not words else words.pop(0)
    options = tune_command.TuneOptions(
        spec=spec,
        script=script,
        script_args=tuple(words),
        sets=tuple(sets or ()),
        device=device,
        batches=batch,
        precisions=precision,
        compile=compile_mode,
        memory_formats=memory_format,
        budget=budget,
        trials=trials,
        current=current,
        exhaustive=exhaustive,
        headroom=headroom,
        capacity=capacity,
        steps=steps,
        json_path=json_path,
        html_path=html_path,
        quiet=quiet,
    )
    raise typer.Exit(tune_command.run_tune(options, Console(highlight=False), _stderr()))


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(message: str) -> None:
    _stderr().print(f"trainmedic: error: {message}", style="red", markup=False)
    raise typer.Exit(2)


def main() -> None:
    command = typer.main.get_command(app)
    argv = sys.argv[1:]
    if isinstance(command, TyperGroup):  # it is: the app has several commands
        argv = mark_script_args(argv, command)
    app(args=argv, prog_name="trainmedic")
