"""TM101: callables built in a loop that read the loop variable when they finally run."""

import textwrap

from trainmedic.lint import get_rule, lint_source


def test_seed_keras_lambda_per_antenna(lint):
    source = """
        from tensorflow import keras
        from tensorflow.keras import layers

        inputs = keras.Input(shape=(4, 14, 448, 2, 1))
        branches = []
        for rx_idx in range(num_rx_antennas):
            x = layers.Lambda(lambda x: x[:, rx_idx, :, :, :])(inputs)
            x = layers.Conv2D(32, 3, padding="same")(x)
            branches.append(x)
        model = keras.Model(inputs, layers.Concatenate()(branches))
    """
    [(line, message)] = lint(source, "TM101")
    assert line == 8
    assert "`rx_idx`" in message and "layers.Lambda()" in message
    assert "`lambda x, *, rx_idx=rx_idx: ...`" in message and "functools.partial" in message


def test_comprehensions_build_lambdas_late(lines):
    source = """
        from keras import layers
        channels = [layers.Lambda(lambda t: t[..., c])(image) for c in range(3)]
        scalers = [lambda v: v * s for s in (0.5, 1.0, 2.0)]
        first = [(lambda v: v * s)(x) for s in (0.5, 1.0)]
        lazy = (lambda v: v * s for s in (0.5, 1.0))
    """
    assert lines(source, "TM101") == [3, 4]


def test_hooks_registered_per_module(lint):
    source = """
        activations = {}
        for name, module in model.named_modules():
            if isinstance(module, nn.Conv2d):
                module.register_forward_hook(lambda m, inp, out: activations.__setitem__(name, out.detach()))

        for i, block in enumerate(model.blocks):
            def save_grad(grad):
                grads[i] = grad
            block.weight.register_hook(save_grad)
    """
    found = lint(source, "TM101")
    assert [line for line, _ in found] == [5, 8]
    assert "`lambda m, inp, out, *, name=name: ...`" in found[0][1]
    assert "nested function save_grad()" in found[1][1] and "`def save_grad(grad, *, i=i):`" in found[1][1]


def test_schedulers_threads_and_stored_functions(lines):
    source = """
        import threading
        from functools import partial
        from torch.optim.lr_scheduler import LambdaLR
        import tensorflow as tf

        schedulers = []
        for group, base in enumerate(base_lrs):
            warm = warmups[group]
            schedulers.append(LambdaLR(optimizers[group], lr_lambda=lambda e: base * min(1.0, e / warm)))
        for shard in shards:
            threading.Thread(target=lambda: preprocess(shard)).start()
        for k in range(4):
            metric_fns[k] = lambda y, p: top_k(y, p, k)
            handlers.append(partial(lambda batch: log(batch, k)))
        for scale in scales:
            @tf.function
            def augment(img):
                return tf.image.resize(img, (scale, scale))
            pipelines.append(augment)
    """
    assert lines(source, "TM101") == [10, 12, 14, 15, 18]


def test_immediate_calls_and_bound_values_are_not_flagged(lines):
    source = """
        import re
        from functools import partial, reduce
        from tensorflow.keras import layers

        offset = 3
        for i in range(n):
            best = max(candidates, key=lambda c: c[i])
            ranked = sorted(rows, key=lambda r: r[i])
            rows.sort(key=lambda r: -r[i])
            kept = list(filter(lambda r: r[i] > 0, rows))
            total = reduce(lambda a, b: a + b[i], rows, 0)
            text = re.sub(r"\\d", lambda m: str(i), text)
            ds = ds.map(lambda x, y: (x[:, i], y))
            x = layers.Lambda(lambda t, i=i: t[:, i])(inputs)
            x = layers.Lambda(partial(slice_at, i=i))(inputs)
            x = layers.Lambda(lambda t: t * offset)(x)
            x = layers.Lambda(lambda t: t * 2.0)(x)
            f = lambda v: v + i
            out.append(f(i))
            self.transform = lambda v: v * i
    """
    assert lines(source, "TM101") == []


def test_callables_used_up_within_the_iteration_are_not_flagged(lines):
    source = """
        import threading
        from tensorflow import keras

        for fold, (train_idx, val_idx) in enumerate(kfold.split(X)):
            model = build_model()
            log = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: print(fold, epoch, logs))
            model.fit(X[train_idx], y[train_idx], callbacks=[log])

        for i, layer in enumerate(model.layers):
            handle = layer.register_forward_hook(lambda m, inp, out: sizes.append((i, out.shape)))
            model(sample)
            handle.remove()

        for part in parts:
            worker = threading.Thread(target=lambda: process(part))
            worker.start()
            worker.join()

        for lr in lrs:
            fns = []
            fns.append(lambda e: lr * e)
            run(fns)
    """
    assert lines(source, "TM101") == []


def test_kfold_loop_training_through_a_local_helper_is_not_flagged(lines):
    source = """
        import torch
        from torch.utils.data import DataLoader, Subset

        def train_one_epoch(model, loader, optimizer):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def run_fold(model, loader):
            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(10):
                train_one_epoch(model, loader, optimizer)

        for fold, (train_idx, val_idx) in enumerate(kfold.split(dataset)):
            mean, std = stats[fold]
            loader = DataLoader(Subset(dataset, train_idx), batch_size=64,
                                collate_fn=lambda b: normalize(default_collate(b), mean, std))
            model = Net()
            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(10):
                train_one_epoch(model, loader, optimizer)

        for fold, (train_idx, val_idx) in enumerate(kfold.split(dataset)):
            mean, std = stats[fold]
            loader = DataLoader(Subset(dataset, train_idx), collate_fn=lambda b: normalize(b, mean, std))
            run_fold(Net(), loader)
    """
    assert lines(source, "TM101") == []


def test_the_fix_binds_every_captured_variable(lint):
    source = """
        from torch.utils.data import DataLoader

        loaders = []
        for fold, (mean, std) in enumerate(stats):
            loaders.append(DataLoader(folds[fold], collate_fn=lambda b: normalize(b, mean, std)))
        evaluate_all(loaders)
    """
    [(line, message)] = lint(source, "TM101")
    assert line == 6
    assert "`mean`, `std`" in message
    assert "bind them now with `lambda b, *, mean=mean, std=std: ...`" in message


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        from keras import layers
        for i in range(3):
            a = layers.Lambda(lambda t: t[:, i])(x)  # noqa: TM101
            b = layers.Lambda(lambda t: t[:, i])(x)
    """)
    assert [v.line for v in lint_source(source, rules=[get_rule("TM101")])] == [5]
