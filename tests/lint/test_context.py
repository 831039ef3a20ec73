"""The training-loop facts every rule builds on: which loops and functions run once per step."""

import ast
import textwrap

from trainmedic.lint.context import ModuleContext


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
    assert limited == {
        "enumerate": False,
        "model": False,
        "a": True,
        "b": True,
        "c": True,
        "d": False,
        "e": False,
    }


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


def test_failure_and_exit_branches_run_on_few_steps_and_rank_checks_on_all():
    source = """
        for episode in range(episodes):
            loss = run_episode(policy)
            loss.backward()
            optimizer.step()
            try:
                log(loss)
            except ValueError:
                warn()
            if running_reward > threshold:
                solved(episode)
                break
            if not finite(loss):
                skipped(episode)
                continue
            if rank == 0:
                on_main()
            if dist.get_rank() == 0:
                on_main_too()
    """
    ctx = context(source)
    limited = {c.func.id: ctx.is_rate_limited(c) for c in ctx.nodes(ast.Call) if isinstance(c.func, ast.Name)}
    assert {k: limited[k] for k in ("log", "warn", "solved", "skipped", "on_main", "on_main_too")} == {
        "log": False,
        "warn": True,
        "solved": True,
        "skipped": True,
        "on_main": False,
        "on_main_too": False,
    }


def test_a_training_loop_behind_two_levels_of_helpers_is_found():
    source = """
        def backward_and_step(loss):
            loss.backward()
            optimizer.step()

        def run_batch(batch):
            loss = model(batch).mean()
            backward_and_step(loss)
            report(loss)

        for batch in loader:
            run_batch(batch)
    """
    ctx = context(source)
    assert sorted(f.name for f in ctx.step_functions) == ["backward_and_step", "run_batch"]
    assert ctx.is_per_step(call_at(ctx, 9))
    assert len(ctx.step_loops) == 1


def test_traced_functions_run_their_python_once():
    source = """
        import tensorflow as tf
        import keras

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            print("tracing")

        class Custom(keras.Model):
            def train_step(self, data):
                print("tracing too")
                return super().train_step(data)
    """
    ctx = context(source)
    assert not ctx.is_per_step(call_at(ctx, 10))
    assert not ctx.is_per_step(call_at(ctx, 14))


def test_a_method_call_reaches_only_the_class_its_receiver_was_built_from():
    source = """
        class Buffer:
            def sample(self, n):
                return self.data[:n]

        class Diffusion:
            def sample(self, n):
                print("denoising")

        buffer = Buffer()
        for step in range(steps):
            x = buffer.sample(256)
            model(x).mean().backward()
            optimizer.step()
            if step % 5000 == 0:
                diffusion.sample(16)
    """
    ctx = context(source)
    assert [f.lineno for f in ctx.per_step_callers] == [3]
    assert not ctx.is_per_step(call_at(ctx, 8))


def test_training_functions_include_callers_of_training_functions():
    source = """
        def train_one_epoch(model, loader):
            for x in loader:
                model(x).sum().backward()
                opt.step()

        def run_fold(k):
            train_one_epoch(model, loaders[k])

        def plot(history):
            pass
    """
    ctx = context(source)
    assert sorted(f.name for f in ctx.training_functions) == ["run_fold", "train_one_epoch"]
