"""TM106's repair, where the data flow is provable: a concatenation whose result nothing in the loop
reads moves after the loop, and ``acc = torch.cat([acc, x])`` collects the parts in a list that is
concatenated once after the loop, keeping ``acc``'s initial value first. Checked by running the
broken and the repaired loop on the same data (torch on the CPU, numpy) and comparing exactly."""

from __future__ import annotations

import textwrap

import numpy as np
import torch
from lint_fix_kit import repaired, run_module, unfixable

from trainmedic.lint import get_rule, lint_source


def test_a_tensor_grown_every_step_collects_its_parts_and_concatenates_once():
    after = repaired(
        """
        import torch
        all_preds = torch.empty(0)
        for x, y in train_loader:
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            all_preds = torch.cat([all_preds, out.argmax(1).detach()])  # predictions
        print(all_preds.shape)
        """,
        "TM106",
    )
    assert after == textwrap.dedent(
        """
        import torch
        all_preds = torch.empty(0)
        all_preds_parts = []
        for x, y in train_loader:
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            all_preds_parts.append(out.argmax(1).detach())  # predictions
        all_preds = torch.cat([all_preds, *all_preds_parts])
        print(all_preds.shape)
        """
    )


def test_a_concatenation_the_loop_never_reads_moves_after_the_loop():
    after = repaired(
        """
        import numpy as np

        def train(model, loader, optimizer, epochs):
            embeddings = []
            for epoch in range(epochs):
                for step, (x, y) in enumerate(loader):
                    loss = model.loss(x, y)
                    loss.backward()
                    optimizer.step()
                    embeddings.append(model.embed(x).detach().cpu().numpy())
                    bank = np.concatenate(  # every embedding so far
                        embeddings,
                        axis=0,
                    )
                print(epoch, bank.shape)
            return bank
        """,
        "TM106",
    )
    assert after == textwrap.dedent(
        """
        import numpy as np

        def train(model, loader, optimizer, epochs):
            embeddings = []
            for epoch in range(epochs):
                for step, (x, y) in enumerate(loader):
                    loss = model.loss(x, y)
                    loss.backward()
                    optimizer.step()
                    embeddings.append(model.embed(x).detach().cpu().numpy())
                bank = np.concatenate(  # every embedding so far
                    embeddings,
                    axis=0,
                )
                print(epoch, bank.shape)
            return bank
        """
    )


def test_the_fixes_say_what_they_do():
    source = textwrap.dedent(
        """
        import torch
        preds, losses = torch.zeros(0, 3), []
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            opt.step()
            preds = torch.cat((preds, x, x * 2), 0)
            losses.append(loss.detach())
            curve = torch.stack(losses)
        """
    )
    found = lint_source(source, "train.py", [get_rule("TM106")], with_fixes=True)
    assert [v.fix.description for v in found] == [
        "collect the parts in `preds_parts` and concatenate once after the loop, "
        "`preds = torch.cat([preds, *preds_parts], 0)`, with `preds`'s value from before the loop first, "
        "as every step had it",
        "move `curve = ...` after the loop: nothing in the loop reads `curve`, so one concatenation after "
        "the last step gives the same value",
    ]
    after = repaired(source, "TM106")
    assert "    preds_parts.extend([x, x * 2])\n" in after
    assert after.endswith("curve = torch.stack(losses)\npreds = torch.cat([preds, *preds_parts], 0)\n")


def test_a_while_loop_and_crlf_line_endings():
    source = (
        "import torch\r\n"
        "acc = torch.empty(0)\r\n"
        "step = 0\r\n"
        "while step < steps:\r\n"
        "    loss = model(next(it)).mean()\r\n"
        "    loss.backward()\r\n"
        "    opt.step()\r\n"
        "    acc = torch.cat([acc, loss.detach()[None]])\r\n"
        "    step += 1"
    )
    assert repaired(source, "TM106") == (
        "import torch\r\n"
        "acc = torch.empty(0)\r\n"
        "step = 0\r\n"
        "acc_parts = []\r\n"
        "while step < steps:\r\n"
        "    loss = model(next(it)).mean()\r\n"
        "    loss.backward()\r\n"
        "    opt.step()\r\n"
        "    acc_parts.append(loss.detach()[None])\r\n"
        "    step += 1\r\n"
        "acc = torch.cat([acc, *acc_parts])"
    )


# -- the repaired loop computes exactly what the broken one did ----------------------------------

_TRAINING = """
import numpy as np
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
preds = torch.empty(0)
probs = torch.empty(0, 4, dtype=torch.float64)
labels = torch.tensor([], dtype=torch.int32)
feats = np.empty((0, 4), dtype=np.float32)
rows = np.empty((0, 4))
flat = np.array([], dtype=np.int16)
losses = []
for epoch in range(2):
    for x, y in loader:
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        preds = torch.cat([preds, out.argmax(1)])
        probs = torch.cat((probs, out.softmax(1).detach()), dim=0)
        labels = torch.cat([labels, y, y + 10])
        feats = np.concatenate([feats, out.detach().numpy()], axis=0)
        rows = np.vstack([rows, out.detach().numpy()[0]])
        flat = np.hstack([flat, y.numpy()])
        losses.append(loss.detach())
        curve = torch.stack(losses)
        weights = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
        history = np.stack([l.numpy() for l in losses])
"""


def test_torch_and_numpy_accumulators_give_the_same_values_dtypes_and_shapes(tmp_path):
    after = repaired(_TRAINING, "TM106")
    assert "        preds_parts.append(out.argmax(1))\n" in after
    assert "        labels_parts.extend([y, y + 10])\n" in after
    assert "    preds = torch.cat([preds, *preds_parts])\n" in after
    assert "    probs = torch.cat([probs, *probs_parts], dim=0)\n" in after
    assert "    feats = np.concatenate([feats, *feats_parts], axis=0)\n" in after
    assert "    rows = np.vstack([rows, *rows_parts])\n" in after
    assert "    curve = torch.stack(losses)\n" in after
    generator = torch.Generator().manual_seed(1)
    loader = [
        (torch.randn(5, 3, generator=generator), torch.randint(0, 4, (5,), generator=generator))
        for _ in range(4)
    ]
    broken = run_module(textwrap.dedent(_TRAINING), tmp_path / "broken", loader=loader)
    fixed = run_module(after, tmp_path / "fixed", loader=loader)
    for name in ("preds", "probs", "labels", "curve"):
        assert fixed[name].dtype == broken[name].dtype and fixed[name].shape == broken[name].shape, name
        assert torch.equal(fixed[name], broken[name]), name
    for name in ("feats", "rows", "flat", "weights", "history"):
        assert fixed[name].dtype == broken[name].dtype and fixed[name].shape == broken[name].shape, name
        assert np.array_equal(fixed[name], broken[name]), name
    # Type promotion is what every step did: float from an empty float32 start and int64 parts,
    # float64 kept from the start, int16 + int64 = int64.
    assert (fixed["preds"].dtype, fixed["probs"].dtype, fixed["labels"].dtype) == (
        torch.float32,
        torch.float64,
        torch.int64,
    )
    assert (fixed["feats"].dtype, fixed["flat"].dtype, fixed["rows"].shape) == (np.float32, np.int64, (8, 4))
    assert fixed["labels"].shape == (80,) and fixed["curve"].shape == (8,)


def test_a_start_value_that_is_not_empty_stays_first(tmp_path):
    source = """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = torch.full((1, 2), -1.0)
        for x in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen = torch.cat([seen, x], 0)
    """
    after = repaired(source, "TM106")
    loader = [torch.full((2, 2), float(i)) for i in range(3)]
    broken = run_module(textwrap.dedent(source), tmp_path / "broken", loader=loader)["seen"]
    fixed = run_module(after, tmp_path / "fixed", loader=loader)["seen"]
    assert torch.equal(fixed, broken) and fixed[0].tolist() == [-1.0, -1.0] and fixed.shape == (7, 2)


# -- what is refused, and why -------------------------------------------------------------------


def test_results_read_in_the_loop_or_computed_under_a_block_are_left_with_a_reason():
    reasons = unfixable(
        """
        import torch
        hist = []
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            hist.append(loss.detach())
            smoothed = torch.stack(hist).mean()
            print(f"{step}: {smoothed:.3f}")
            if step > 10:
                late = torch.stack(hist)
            with torch.no_grad():
                quiet = torch.stack(hist)
            writer.add_histogram("loss", torch.stack(hist), step)
            snapshot = torch.stack(hist)
            hist.append(loss.detach() * 0)
        """,
        "TM106",
    )
    assert reasons == [
        "the concatenated tensor `smoothed` is read inside the loop at line 10; keep a running result "
        "instead (a running sum on the device, or concatenate every N steps)",
        "the concatenation is inside the `if` block at line 11, not directly in the loop's body, so moving "
        "it after the loop would change when or how it runs; move it by hand",
        "the concatenation is inside the `with` block at line 13, not directly in the loop's body, so "
        "moving it after the loop would change when or how it runs; move it by hand",
        "the concatenated result at line 15 is used in place, not kept in a variable; keep a running "
        "result instead (a running sum on the device, or concatenate every N steps)",
        "`hist` is used again at line 17, after the concatenation in the same step, so after the loop it "
        "may hold something else; move it by hand",
    ]


def test_moves_that_could_change_the_final_value_are_left_with_a_reason():
    reasons = unfixable(
        """
        import torch

        def report():
            print(watched)

        hist = []
        n = 1
        for step, (x, y) in enumerate(loader):
            loss = model(x).mean()
            if loss.isnan():
                continue
            loss.backward()
            optimizer.step()
            hist.append(loss)
            skipped = torch.stack(hist)
        for step, (x, y) in enumerate(loader):
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            hist.append(loss)
            scaled = torch.stack(hist) / n
            n = n + 1
            changed = torch.stack(hist)
            loss.mul_(0)
        try:
            for x in loader:
                loss = model(x).mean()
                loss.backward()
                optimizer.step()
                hist.append(loss)
                guarded = torch.stack(hist)
        except KeyboardInterrupt:
            pass
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            hist.append(loss)
            finished = torch.stack(hist)
        else:
            print("done")
        for x in loader:
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            hist.append(loss)
            watched = torch.stack(hist)
        """,
        "TM106",
    )
    assert reasons == [
        "the `continue` at line 12 can skip the concatenation on the last step, so `skipped` after the "
        "loop could differ; move it by hand",
        "`n` changes at line 23, after the concatenation in the same step, so the statement would see "
        "another value after the loop; move it by hand",
        "line 25 changes in place what was appended to `hist`, after the concatenation in the same step; "
        "move it by hand",
        "the loop is inside the try block at line 26: if an exception stops it, the result would miss the "
        "steps done so far; move the concatenation by hand",
        "the loop has an else: block (line 42); move the concatenation by hand",
        "`watched` is also read by report() at line 5, which may run while the loop does; move the "
        "concatenation by hand",
    ]


def test_accumulators_that_cannot_become_a_list_are_left_with_a_reason():
    reasons = unfixable(
        """
        import numpy as np
        import torch

        acc, front, twice, kept, dims = (torch.empty(0),) * 5
        buf, bank = np.zeros(4), np.empty((0, 4))

        class Trainer:
            def fit(self):
                self.preds = torch.empty(0)
                for x in self.loader:
                    loss = self.model(x).mean()
                    loss.backward()
                    self.opt.step()
                    self.preds = torch.cat([self.preds, x])

        for step, x in enumerate(loader):
            loss = model(x).mean()
            loss.backward()
            optimizer.step()
            acc = torch.stack([acc, x])
            front = torch.cat([x, front])
            twice = torch.cat([twice, twice])
            reader.read_into(buf)
            bank = np.concatenate([bank, buf[None]])
            out = model(x)
            kept = torch.cat([kept, out])
            out += 1
            dims = torch.cat([dims, x], dim=axis)
            axis = 0
            seen = torch.cat([seen, x], out=scratch)
        """,
        "TM106",
    )
    assert reasons == [
        "`self.preds` is not a local variable: code outside the loop may read it while the loop runs; "
        "collect the parts by hand",
        "torch.stack() adds a dimension on every step, so the steps do not add up to one call; collect the "
        "parts by hand",
        "the new parts go before `front` in the list, not after it; collect them by hand "
        "(torch.cat([*reversed(parts), front]))",
        "`twice` is concatenated with itself, not only with new parts; rewrite it by hand",
        "`buf[None]` is the same buffer on every step and line 24 may fill it in place; a list would keep "
        "only its last content, so collect the parts by hand",
        "line 28 changes in place a tensor that is concatenated; a list would keep the changed one, so "
        "collect the parts by hand",
        "`axis` changes inside the loop, and one concatenation after it would use only its last value; "
        "collect the parts by hand",
        "torch.cat() writes into out=; collect the parts by hand",
    ]


def test_a_pool_concatenated_in_a_per_step_method_is_left_with_a_reason():
    # Seed 004 #2, the rule's own card: where the pool is complete is a design decision.
    rule = get_rule("TM106")
    assert unfixable(rule.before, "TM106") == [
        "`self.x_pool` is appended to at line 7 and concatenated in sample(), which runs every step; the "
        "place where the list is complete, to concatenate it once (a finalize() step), is not visible in "
        "the code, so fix it by hand"
    ]
    assert "trainmedic lint --fix" in rule.fix
    assert unfixable(
        """
        import torch

        class Memory(torch.nn.Module):
            bank = torch.empty(0)

            def training_step(self, batch):
                self.bank = torch.cat([self.bank, batch])
                return self.loss(batch)
        """,
        "TM106",
    ) == [
        "`self.bank` grows by one concatenation each time training_step() runs (every step); where the "
        "whole of it is needed is not visible here: collect the parts in a list and concatenate there"
    ]


def test_a_loop_like_the_cards_repairs_to_clean_code():
    after = repaired(
        """
        import torch
        pool = []
        for step in range(num_steps):
            x = simulate(model)
            loss = flow_loss(model, x)
            loss.backward()
            optimizer.step()
            pool.append(x.detach().cpu())
            all_x = torch.cat(pool, dim=0)
        torch.save(all_x, "pool.pt")
        """,
        "TM106",
    )
    assert after.endswith(
        '    pool.append(x.detach().cpu())\nall_x = torch.cat(pool, dim=0)\ntorch.save(all_x, "pool.pt")\n'
    )
