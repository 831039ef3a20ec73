"""TM107: host syncs on every training step of a GPU script, and the look-alikes that are free."""

import ast
import textwrap

from trainmedic.lint import get_rule, lint_source
from trainmedic.lint.context import ModuleContext

GPU = """
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
"""


def test_item_in_the_step_loop_is_flagged_with_the_fix(lint):
    source = (
        GPU
        + """
    model = Net().to(device)
    for epoch in range(epochs):
        running_loss = 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        print(f"epoch {epoch} loss {running_loss / len(loader):.4f}")
    """
    )
    [(line, message)] = lint(source, "TM107")
    assert line == 14
    assert message.startswith("loss.item() makes the host wait for the GPU on every training step")
    assert "total += loss.detach()" in message and not message.endswith(".")


def test_cpu_copies_float_and_print_of_device_values_are_flagged(lines):
    source = (
        GPU
        + """
    for step, (images, labels) in enumerate(train_loader):
        images = images.cuda(non_blocking=True)
        labels = labels.cuda(non_blocking=True)
        outputs = model(images)
        loss = criterion(outputs, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        preds.append(outputs.argmax(1).cpu())
        targets.extend(labels.detach().cpu().numpy().tolist())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        print(loss)
        print(f"step {step}: {loss:.3f}")
        tqdm_bar.set_postfix(acc=(outputs.argmax(1) == labels).float().mean().item())
    """
    )
    assert lines(source, "TM107") == [13, 14, 15, 16, 17, 18]


def test_one_finding_per_line(lines):
    source = (
        GPU
        + """
    for x, y in loader:
        out = model(x.to(device))
        loss = criterion(out, y.to(device))
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f} acc {(out.argmax(1) == y.to(device)).float().mean().item():.3f}")
    """
    )
    assert lines(source, "TM107") == [10]


def test_a_cpu_only_script_is_not_flagged(lines):
    source = """
    import torch
    model = Net()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        print(loss)
    """
    assert lines(source, "TM107") == []


def test_rate_limited_reads_and_device_side_accumulation_are_not_flagged(lines):
    source = (
        GPU
        + """
    total = torch.zeros((), device=device)
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach()
        if step % args.log_every == 0:
            print(f"step {step} loss {total.item() / (step + 1):.4f}")
        if verbose:
            print(loss)
    print(total.item())
    """
    )
    assert lines(source, "TM107") == []


def test_host_values_and_the_raw_batch_are_not_syncs(lines):
    source = (
        GPU
        + """
    import numpy as np
    history = []
    for epoch in range(num_epochs):
        for i, (inputs, labels) in enumerate(train_loader):
            logits = model(inputs.to(device))
            loss = criterion(logits, labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            label_counts += np.bincount(labels.numpy(), minlength=10)
            first = labels[0].item()
            lr = float(scheduler.get_last_lr()[0])
            n_seen = int(inputs.size(0))
            weights = np.ones(3)
            w = weights.mean().item()
            history.append(loss.detach())
            print("epoch", epoch, "batch", i)
    """
    )
    assert lines(source, "TM107") == []


def test_evaluation_loops_are_not_step_loops(lines):
    source = (
        GPU
        + """
    def evaluate(model, loader):
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                correct += (model(x).argmax(1) == y).sum().item()
        return correct / len(loader.dataset)

    for epoch in range(epochs):
        for x, y in train_loader:
            loss = criterion(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        acc = evaluate(model, val_loader)
        print(f"epoch {epoch}: acc {acc:.3f} loss {loss.item():.4f}")
    """
    )
    assert lines(source, "TM107") == []


def test_a_helper_called_every_step_names_the_call(lint):
    source = (
        GPU
        + """
    def batch_accuracy(logits, labels):
        return (logits.argmax(dim=1) == labels).float().mean().item()

    def train_one_epoch(model, loader):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            acc = batch_accuracy(logits, y)
            meter.update(float(acc))
    """
    )
    [(line, message)] = lint(source, "TM107")
    assert line == 6
    assert "called every step at line 15" in message


def test_a_step_function_returning_a_python_float_is_not_read_again(lines):
    source = (
        GPU
        + """
    def train_step(model, batch):
        x, y = batch[0].to(device), batch[1].to(device)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    for batch in loader:
        value = train_step(model, batch)
        meter.update(float(value))
    """
    )
    assert lines(source, "TM107") == [10]


def test_lightning_training_step_batch_is_on_the_device(lines):
    source = """
    import lightning as L
    import torch.nn.functional as F

    class Classifier(L.LightningModule):
        def training_step(self, batch, batch_idx):
            x, y = batch
            logits = self(x)
            loss = F.cross_entropy(logits, y)
            self.log("train_loss", loss.item())
            self.log("train_loss_ok", loss)
            y_np = y.cpu().numpy()
            idx = int(batch_idx)
            return loss

    trainer = L.Trainer(accelerator="gpu", devices=1)
    """
    assert lines(source, "TM107") == [10, 12]


def test_accelerate_marks_the_module_as_gpu(lines):
    source = """
    from accelerate import Accelerator
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        outputs = model(**batch)
        accelerator.backward(outputs.loss)
        optimizer.step()
        losses.append(outputs.loss.item())
    """
    assert lines(source, "TM107") == [9]


def test_noqa_silences_the_line():
    source = textwrap.dedent(
        GPU
        + """
    for x, y in loader:
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        a = loss.item()  # noqa: TM107
        b = loss.item()  # noqa: E501
    """
    )
    assert [v.line for v in lint_source(source) if v.code == "TM107"] == [10]


def test_failure_branches_are_not_every_step(lines):
    source = (
        GPU
        + """
    import math, sys
    for images, targets in loader:
        images = [img.to(device) for img in images]
        loss_dict = model(images, targets)
        losses = sum(loss for loss in loss_dict.values())
        loss_value = losses.item()
        if not math.isfinite(loss_value):
            print(f"Loss is {loss_value}, stopping training")
            print(loss_dict)
            sys.exit(1)
        try:
            losses.backward()
        except RuntimeError:
            print(losses.cpu())
            raise
        optimizer.step()
    """
    )
    assert lines(source, "TM107") == [10]


def test_values_the_environment_needs_are_not_deferrable(lines):
    source = (
        GPU
        + """
    def select_action(state):
        q = policy_net(torch.as_tensor(state, device=device))
        return q.argmax().item()

    for episode in range(episodes):
        state = env.reset()
        for t in range(max_t):
            action = select_action(state)
            state, reward, done, _ = env.step(action)
            memory.push(state, action, reward)
            loss = compute_loss(policy_net, memory.sample(64))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            envs.step(policy_net(obs).argmax(-1).cpu().numpy())
    """
    )
    assert lines(source, "TM107") == []


def test_keras_batch_results_are_host_values(lines):
    source = """
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    for epoch in range(epochs):
        for x, y in batches:
            loss = model.train_on_batch(x, y)
            print(f"loss {loss:.4f}")
            history.append(float(loss))
    """
    assert lines(source, "TM107") == []


def test_models_optimizers_and_their_attributes_are_not_tensors(lines):
    source = (
        GPU
        + """
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        lr = optimizer.param_groups[0]["lr"]
        print(f"lr {lr:.2e}", model.training, int(model.num_layers))
        losses.append(1.0)
        mean_loss = sum(losses) / len(losses)
        print(float(mean_loss), compute_accuracy(model, val_loader))
        print(model)
    """
    )
    assert lines(source, "TM107") == []


def test_submodule_outputs_are_on_the_device(lines):
    source = (
        GPU
        + """
    class Trainer:
        def train_step(self, batch):
            x, y = batch[0].to(device), batch[1].to(device)
            feats = self.backbone(x)
            logits = self.model.module(feats)
            loss = self.criterion(logits, y)
            loss.backward()
            self.optimizer.step()
            return feats.cpu(), int(logits.argmax())
    """
    )
    assert lines(source, "TM107") == [13]


def _module_scans(source: str, code: str) -> tuple[int, int]:
    """(findings, how many times the rule listed every call of the module)."""
    source = textwrap.dedent(source)
    context = ModuleContext(ast.parse(source), source, "train.py")
    nodes, scans = context.nodes, []

    def counting(*types):
        scans.append(types)
        return nodes(*types)

    context.nodes = counting  # type: ignore[method-assign]
    findings = list(get_rule(code).check(context))
    return len(findings), sum(1 for types in scans if types == (ast.Call,))


def test_what_the_environment_needs_is_found_once_per_module():
    loop = """
        import torch
        device = torch.device("cuda")
        for step, (obs, target) in enumerate(loader):
            loss = criterion(policy_net(obs.to(device)), target.to(device))
            loss.backward()
            optimizer.step()
            action = policy_net(obs).argmax().item()
            env.step(action)
    """
    few = textwrap.dedent(loop) + "".join(f"    m{i} = loss.item()\n" for i in range(5))
    many = textwrap.dedent(loop) + "".join(f"    m{i} = loss.item()\n" for i in range(60))
    found_few, scans_few = _module_scans(few, "TM107")
    found_many, scans_many = _module_scans(many, "TM107")
    assert (found_few, found_many) == (5, 60)
    assert scans_few == scans_many
