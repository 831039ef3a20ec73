"""TM106: concatenating a list that keeps growing, every step, and the linear look-alikes."""

import textwrap

from trainmedic.lint import lint_source


def test_seed_004_pool_concatenated_in_a_per_step_method(lint):
    source = """
        import torch

        class TrajectoryPool:
            def __init__(self):
                self.x_pool = []
                self.v_pool = []

            def add(self, x, v):
                self.x_pool.append(x.cpu())
                self.v_pool.append(v.cpu())

            def sample(self, batch_size, device):
                all_x = torch.cat(self.x_pool, dim=0)
                all_v = torch.cat(self.v_pool, dim=0)
                idx = torch.randint(0, all_x.shape[0], (batch_size,))
                return all_x[idx].to(device), all_v[idx].to(device)

        pool = TrajectoryPool()
        for _ in range(pool_batches):
            pool.add(*simulate())
        for step in range(train_iters):
            x, v = pool.sample(256, device)
            loss = ((model(x) - v) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    found = lint(source, "TM106")
    assert [line for line, _ in found] == [14, 15]
    message = found[0][1]
    assert message.startswith("torch.cat(self.x_pool) copies the whole of `self.x_pool` (appended to at")
    assert "line 10)" in message
    assert "called every step at line 23" in message and "finalize()" in message
    assert not message.endswith(".")


def test_list_appended_and_stacked_in_the_same_step_loop(lines):
    source = """
        import numpy as np
        import torch

        loss_history, grad_norms, embeddings = [], [], []
        for epoch in range(epochs):
            for step, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                loss_history.append(loss.detach())
                smoothed = torch.stack(loss_history).mean()
                grad_norms += [gn]
                gn_ratio = gn / torch.stack(grad_norms).mean()
                embeddings.append(model.embed(x).detach().cpu().numpy())
                bank = np.concatenate(embeddings)
    """
    assert lines(source, "TM106") == [13, 15, 17]


def test_a_tensor_grown_by_concatenation_every_step(lint):
    source = """
        import torch
        all_preds = torch.empty(0)
        for x, y in train_loader:
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            all_preds = torch.cat([all_preds, out.argmax(1).detach()])
    """
    [(line, message)] = lint(source, "TM106")
    assert line == 9
    assert message.startswith("all_preds = torch.cat([all_preds, ...]) copies all of `all_preds`")


def test_a_global_pool_sampled_by_a_step_helper(lines):
    source = """
        import torch
        replay = []

        def sample_batch(n):
            data = torch.cat(replay)
            return data[torch.randint(len(data), (n,))]

        for episode in range(episodes):
            replay.append(run_episode(policy))
            batch = sample_batch(128)
            loss = policy.loss(batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    assert lines(source, "TM106") == [6]


def test_concatenation_after_the_loop_or_rate_limited_is_not_flagged(lines):
    source = """
        import torch
        for epoch in range(epochs):
            preds, targets = [], []
            for step, (x, y) in enumerate(loader):
                out = model(x)
                loss = criterion(out, y)
                loss.backward()
                optimizer.step()
                preds.append(out.detach())
                targets.append(y)
                if step % 100 == 0:
                    running = torch.cat(preds).mean()
            epoch_preds = torch.cat(preds)
            epoch_acc = (epoch_preds.argmax(1) == torch.cat(targets)).float().mean()
    """
    assert lines(source, "TM106") == []


def test_lists_built_fresh_each_step_and_fixed_tuples_are_not_flagged(lines):
    source = """
        import torch
        for x, y in loader:
            parts = []
            for chunk in x.split(64):
                parts.append(encoder(chunk))
            features = torch.cat(parts)
            pair = torch.cat((features, context), dim=1)
            both = torch.stack([x, x.flip(0)])
            loss = criterion(head(pair), y)
            loss.backward()
            optimizer.step()
    """
    assert lines(source, "TM106") == []


def test_bounded_windows_and_flushed_buffers_are_not_flagged(lines):
    source = """
        import torch
        window, pending = [], []
        for step, batch in enumerate(loader):
            loss = model(batch).mean()
            loss.backward()
            optimizer.step()
            window.append(loss.detach())
            if len(window) > 100:
                window.pop(0)
            smooth = torch.stack(window).mean()
            pending.append(batch)
            if len(pending) >= 8:
                replay = torch.cat(pending)
                pending = []
    """
    assert lines(source, "TM106") == []


def test_a_buffer_the_step_method_flushes_or_a_deque_window_is_not_flagged(lines):
    source = """
        import torch
        from collections import deque

        class Buffer:
            def __init__(self):
                self.items = []
                self.recent = deque(maxlen=1000)

            def push(self, x):
                self.items.append(x)
                self.recent.append(x)

            def drain(self):
                out = torch.cat(self.items)
                self.items.clear()
                return out

            def recent_batch(self):
                return torch.stack(list(self.recent))

        for batch in loader:
            buf.push(batch)
            x = buf.drain()
            y = buf.recent_batch()
            loss = model(x, y).mean()
            loss.backward()
            optimizer.step()
    """
    assert lines(source, "TM106") == []


def test_a_deque_window_made_before_the_step_loop_is_not_flagged(lines):
    source = """
        import collections
        import torch

        window = collections.deque(maxlen=100)
        history = collections.deque()
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            window.append(loss.detach())
            smooth = torch.stack(list(window)).mean()
            history.append(loss.detach())
            curve = torch.stack(list(history))
    """
    assert lines(source, "TM106") == [15]


def test_epoch_end_hooks_and_pool_finalization_are_not_flagged(lines):
    source = """
        import torch
        import lightning as L

        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.val_outputs = []

            def training_step(self, batch, batch_idx):
                return self.loss(batch)

            def validation_step(self, batch, batch_idx):
                self.val_outputs.append(self(batch))

            def on_validation_epoch_end(self):
                probs = torch.cat(self.val_outputs)
                self.log("val/conf", probs.max(1).values.mean())
                self.val_outputs.clear()

        class Pool:
            def __init__(self):
                self.xs = []

            def add(self, x):
                self.xs.append(x)

            def finalize(self):
                self.xs = torch.cat(self.xs)

            def sample(self, n):
                return self.xs[torch.randint(len(self.xs), (n,))]

        for step in range(steps):
            x = pool.sample(256)
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
    """
    assert lines(source, "TM106") == []


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        import torch
        hist = []
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            hist.append(loss.detach())
            a = torch.stack(hist)  # noqa: TM106
            b = torch.stack(hist)  # noqa: E501
    """)
    assert [v.line for v in lint_source(source) if v.code == "TM106"] == [10]
