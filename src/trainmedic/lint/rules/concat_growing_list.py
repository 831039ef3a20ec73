"""TM106: torch.cat / np.concatenate of a list that keeps growing, redone every training step."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.accumulators import (
    accumulated_tensor,
    concatenated_list,
    grown_elsewhere,
    grown_in_loop,
    list_key,
)
from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixers.concat_once import fix
from trainmedic.lint.model import Rule


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for call in context.nodes(ast.Call):
        listed = concatenated_list(context, call) or accumulated_tensor(context, call)
        if listed is None or not context.runs_every_step(call):
            continue
        key = list_key(listed)
        assert key is not None
        growth = grown_in_loop(context, call, key) or grown_elsewhere(context, call, key)
        if growth is None:
            continue
        func = ast.unparse(call.func)
        if growth is context.parent(call):
            message = (
                f"{key} = {func}([{key}, ...]) copies all of `{key}` on every training step as it grows: "
                "quadratic; collect the parts in a list and concatenate once after the loop, or keep a "
                "running total"
            )
        elif next(context.enclosing_loops(call), None) is not None:
            message = (
                f"{func}({key}) copies all of `{key}` on every training step while line {growth.lineno} "
                "appends to it: quadratic; concatenate once after the loop, or keep a running total on the "
                "device"
            )
        else:
            via = context.every_step_note(call)
            message = (
                f"{func}({key}) copies the whole of `{key}` (appended to at line {growth.lineno}) on every "
                f"training step{via}; concatenate once when it is complete (a finalize() step) and index the "
                "result"
            )
        yield call, message


RULE = Rule(
    code="TM106",
    name="concat-growing-list",
    summary="torch.cat / np.concatenate of a list that grows, redone every training step.",
    why=(
        "Concatenating a list copies every element into a new tensor. When the list gains an entry\n"
        "every step and is concatenated every step, step N copies N entries: the total is quadratic\n"
        "and the step time grows all run long. torch.cat(self.x_pool) over a 512K-entry\n"
        "trajectory pool in the per-step sample() took ~0.5 s per step against ~0.05 s of\n"
        "forward/backward, so training ran 10x slower than necessary."
    ),
    fix=(
        "Concatenate once, when the list is complete (a finalize() method after the pool is built),\n"
        "then index the one tensor every step: idx = torch.randint(n, (batch,)); pool[idx].\n"
        "For running metrics, keep a running sum on the device instead of a list of every value.\n"
        "trainmedic lint --fix repairs the loop shapes whose data flow is provable: a concatenation whose\n"
        "result the loop does not read moves after the loop, and acc = torch.cat([acc, x]) becomes\n"
        "parts.append(x) with acc = torch.cat([acc, *parts]) after the loop."
    ),
    before="""
class TrajectoryPool:
    def __init__(self):
        self.x_pool = []

    def add(self, x):
        self.x_pool.append(x)

    def sample(self, batch_size):
        all_x = torch.cat(self.x_pool, dim=0)
        return all_x[torch.randint(0, all_x.shape[0], (batch_size,))]

for step in range(num_steps):
    x = pool.sample(256)
    loss = flow_loss(model, x)
    loss.backward()
    optimizer.step()
""",
    after="""
class TrajectoryPool:
    def __init__(self):
        self.x_pool = []

    def add(self, x):
        self.x_pool.append(x)

    def finalize(self):
        self.all_x = torch.cat(self.x_pool, dim=0)
        self.x_pool = None

    def sample(self, batch_size):
        return self.all_x[torch.randint(0, self.all_x.shape[0], (batch_size,))]

pool.finalize()
for step in range(num_steps):
    x = pool.sample(256)
    loss = flow_loss(model, x)
    loss.backward()
    optimizer.step()
""",
    check=check,
    fixer=fix,
)
