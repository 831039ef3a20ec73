"""The training-loop facts every rule builds on: which loops and functions run once per step."""

import ast
import textwrap

from trainmedic.guard.lint.context import ModuleContext


def context(source: str) -> ModuleContext:
    source = textwrap.dedent(source)
    return ModuleContext(ast.parse(source), source, "train.py")


def call_at(ctx: ModuleContext, line: int) -> ast.Call:
    return next(c for c in ctx.nodes(ast.Call) if c.lineno == line)


def per_step_lines(source: str) -> list[int]:
    ctx = context(source)
    return sorted({c.lineno for c in ctx.nodes(ast.Call) if ctx.is_per_step(c)})


def test_the_step_loop_is_the_innermost_loop_with_a_step_not_the_epoch_loop():
    source = """
        for epoch in range(10):
            for x, y in loader:
                loss = crit(model(x), y)
                loss.backward()
                optimizer.step()
            evaluate(model)
    """
    assert per_step_lines(source) == [4, 5, 6]


def test_gradient_accumulation_makes_both_loops_step_loops():
    source = """
        while True:
            for micro_step in range(accum):
                loss = model(get_batch())
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if iter_num > max_iters:
                break
    """
    ctx = context(source)
    assert len(ctx.step_loops) == 2
    assert ctx.is_per_step(call_at(ctx, 7))


def test_a_scheduler_step_is_not_a_training_step():
    source = """
        for epoch in range(10):
            train_one_epoch(model)
            scheduler.step()
            lr_scheduler.step()
    """
    assert context(source).step_loops == set()


def test_a_helper_with_a_step_makes_its_callers_loop_a_training_loop():
    source = """
        def update(model, batch, opt):
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            return loss

        for batch in loader:
            update(model, batch, opt)
            log(batch)
    """
    ctx = context(source)
    assert [f.name for f in ctx.step_functions] == ["update"]
    assert ctx.is_per_step(call_at(ctx, 10))


def test_functions_called_every_step_are_per_step_unless_rate_limited():
    source = """
        class Pool:
            def sample(self, n):
                return torch.cat(self.items)

        def evaluate(model):
            return run_eval(model)

        for step in range(steps):
            x = pool.sample(64)
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            if step % 500 == 0:
                evaluate(model)
    """
    ctx = context(source)
    assert ctx.is_per_step(call_at(ctx, 4))
    assert ctx.called_every_step_from(call_at(ctx, 4)).lineno == 10
    assert not ctx.is_per_step(call_at(ctx, 7))


def test_common_method_names_do_not_reach_the_users_functions():
    source = """
        class Trainer:
            def train(self):
                print("training")

        for batch in loader:
            model.train()
            model(batch).sum().backward()
            optimizer.step()
    """
    ctx = context(source)
    assert not ctx.is_per_step(call_at(ctx, 4))


def test_rate_limits():
    source = """
        for step, batch in enumerate(loader):
            model(batch).sum().backward()
            optimizer.step()
            if step % 10 == 0:
                a()
            if args.verbose:
                b()
            if step == 0:
                c()
            if args.mode == "train":
                d()
            if loss_is_nan:
                e()
    """
    ctx = context(source)
    limited = {c.func.id: ctx.is_rate_limited(c) for c in ctx.nodes(ast.Call) if isinstance(c.func, ast.Name)}
    assert limited == {"enumerate": False, "model": False, "a": True, "b": True, "c": True, "d": False, "e": False}


def test_a_for_loops_iterable_runs_once_and_a_while_test_every_time():
    source = """
        for batch in make_loader():
            model(batch).sum().backward()
            opt.step()
        while not done():
            model(x).sum().backward()
            opt.step()
    """
    assert per_step_lines(source) == [3, 4, 5, 6, 7]


def test_imports_resolve_aliases_and_framework_spellings():
    ctx = context("""
        import numpy as np
        import tensorflow as tf
        from tensorflow.keras import layers
        import pytorch_lightning as pl
        from torch import cat as concat
        np.concatenate; tf.keras.layers.Lambda; layers.Dense; pl.callbacks.ModelCheckpoint; concat; model.fit
    """)
    names = [ctx.qualname(statement.value) for statement in ctx.tree.body[5:]]
    assert names == [
        "numpy.concatenate",
        "keras.layers.Lambda",
        "keras.layers.Dense",
        "lightning.pytorch.callbacks.ModelCheckpoint",
        "torch.cat",
        "model.fit",
    ]


def test_a_one_off_backward_is_not_a_step_function():
    source = """
        def test_gradients_flow():
            loss = model(x).sum()
            loss.backward()
            print(loss)

        def fit_once(model, x, y):
            loss = crit(model(x), y)
            loss.backward()
            optimizer.step()

        def train_batch(model, batch):
            loss = model(batch).mean()
            loss.backward()
            optimizer.step()

        def closure():
            optimizer.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            return loss

        fit_once(model, x, y)
    """
    ctx = context(source)
    assert sorted(f.name for f in ctx.step_functions) == ["closure", "train_batch"]
