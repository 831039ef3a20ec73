"""TM111: printing or logging on every training step."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixers.step_gate import LOG_EVERY, gate, printer_name
from trainmedic.lint.model import Rule


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for call in context.nodes(ast.Call):
        what = printer_name(context, call)
        if what is None or not context.runs_every_step(call):
            continue
        yield (
            call,
            (
                f"{what} runs on every training step{context.every_step_note(call)}; log every N steps "
                "(if step % log_every == 0) or once per epoch"
            ),
        )


RULE = Rule(
    code="TM111",
    name="log-every-step",
    summary="print() or logger.info() inside the training loop, on every step.",
    why=(
        "Formatting and writing a line every step costs host time the GPU waits for, and a terminal\n"
        "or notebook that renders thousands of lines a minute slows the whole loop. When the value\n"
        "printed is a GPU tensor, each print also blocks until the device catches up (TM107).\n"
        "A 3D U-Net in TensorFlow that printed every batch, 100 times an epoch, got part of its speed\n"
        "back by printing once per epoch. In trainmedic's logging scenario (tests/scenarios/logging_bound.py)\n"
        "a per-step JSON log took 85 % of the step."
    ),
    fix=(
        "Log every N steps behind `if step % log_every == 0:`, or accumulate on the device and print\n"
        "once per epoch. logger.debug() is not flagged: it is off unless asked for.\n"
        f"`trainmedic lint --fix` puts the print under `if step % {LOG_EVERY} == 0:` where the loop's\n"
        "step counter is in sight (enumerate, range, a `+= 1` counter)."
    ),
    before="""
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
""",
    after="""
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
""",
    check=check,
    fixer=gate,
)
