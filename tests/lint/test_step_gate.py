"""TM107's and TM111's repair: a reporting statement put under ``if step % 100 == 0:`` where the
loop's step counter is in sight, and left with a reason everywhere else."""

from __future__ import annotations

import contextlib
import io
import textwrap

import torch
from lint_fix_kit import repaired, run_module, unfixable

from trainmedic.lint import get_rule, select_rules
from trainmedic.lint.autofix import repair_source

#: A real loop: 250 steps of a small regression on the CPU, reporting every step.
TRAINING = """
import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(250, 8, 4)
y = x.sum(-1, keepdim=True)
total = 0.0
for step, (xb, yb) in enumerate(zip(x, y)):
    loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
    total += loss.item()
"""


def _run(source: str, folder) -> tuple[dict, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace = run_module(source, folder)
    return namespace, out.getvalue().splitlines()


def test_the_print_goes_under_the_step_counter_and_training_is_unchanged(tmp_path):
    source = textwrap.dedent(TRAINING)
    after, fixed, left = repair_source(source, "train.py", select_rules(["TM107", "TM111"], None))
    assert after == source.replace(
        '    print(f"step {step} loss {loss.item():.6f}")\n',
        '    if step % 100 == 0:\n        print(f"step {step} loss {loss.item():.6f}")\n',
    )
    # One repair answers both findings on the print; the sum read every step is left, with why,
    # at its line in the repaired text.
    assert sorted((v.line, v.code) for v in fixed) == [(16, "TM107"), (16, "TM111")]
    [kept] = left
    assert (kept.line, kept.code) == (18, "TM107")
    assert kept.unfixable.startswith("the value is used on every step, not only printed or logged")

    broken, broken_lines = _run(source, tmp_path / "broken")
    fixed_run, fixed_lines = _run(after, tmp_path / "fixed")
    for a, b in zip(broken["model"].parameters(), fixed_run["model"].parameters(), strict=True):
        assert torch.equal(a, b)
    assert broken["total"] == fixed_run["total"]
    assert len(broken_lines) == 250
    assert fixed_lines == [broken_lines[0], broken_lines[100], broken_lines[200]]


def test_a_run_of_reports_goes_under_one_if_with_its_continuation_lines():
    after = repaired(
        """
        for step in range(steps):
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            print("step", step)
            logger.info("loss %s lr %s",
                        loss, sched.get_last_lr())
        """,
        "TM111",
    )
    assert after == textwrap.dedent(
        """
        for step in range(steps):
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            if step % 100 == 0:
                print("step", step)
                logger.info("loss %s lr %s",
                            loss, sched.get_last_lr())
        """
    )


def test_a_counter_the_loop_advances_is_the_step_and_a_string_keeps_its_lines():
    after = repaired(
        '''
        it = 0
        while it < max_iters:
            loss = model(batch)
            loss.backward()
            optimizer.step()
            print(f"""iter {it}
        loss {loss}""")
            it += 1
        ''',
        "TM111",
    )
    assert '    if it % 100 == 0:\n        print(f"""iter {it}\nloss {loss}""")\n' in after


def test_enumerate_through_tqdm_is_the_step():
    after = repaired(
        """
        for i, batch in tqdm(enumerate(loader), total=len(loader)):
            loss = model(batch)
            loss.backward()
            optimizer.step()
            print(i, loss)
        """,
        "TM111",
    )
    assert "    if i % 100 == 0:\n        print(i, loss)\n" in after


def test_a_loop_without_a_counter_keeps_the_finding_and_says_how():
    [reason] = unfixable(
        """
        for x, y in loader:
            loss = model(x, y)
            loss.backward()
            optimizer.step()
            print(loss)
        """,
        "TM111",
    )
    assert "no step counter in sight" in reason and "enumerate(loader)" in reason


def test_a_counter_the_body_reassigns_is_not_trusted():
    [reason] = unfixable(
        """
        for step, batch in enumerate(loader):
            loss = model(batch)
            loss.backward()
            optimizer.step()
            step = step * 2
            print(loss)
        """,
        "TM111",
    )
    assert "no step counter" in reason


def test_a_print_in_a_function_the_loop_calls_names_the_call():
    [reason] = unfixable(
        """
        def report(loss):
            print(loss)

        for step, batch in enumerate(loader):
            loss = model(batch)
            loss.backward()
            optimizer.step()
            report(loss)
        """,
        "TM111",
    )
    assert "the training loop calls this function at line 9" in reason


def test_a_print_sharing_its_line_is_left():
    [reason] = unfixable(
        """
        for step, batch in enumerate(loader):
            loss = model(batch); loss.backward(); optimizer.step(); print(loss)
        """,
        "TM111",
    )
    assert "shares its line" in reason


def test_a_progress_bar_postfix_of_item_is_gated_for_tm107():
    after = repaired(
        """
        import torch
        device = torch.device("cuda")
        for step, (x, y) in enumerate(bar):
            loss = model(x.to(device), y.to(device))
            loss.backward()
            optimizer.step()
            bar.set_postfix(loss=loss.item())
        """,
        "TM107",
    )
    assert "    if step % 100 == 0:\n        bar.set_postfix(loss=loss.item())\n" in after


def test_the_cards_say_what_fix_applies():
    for code in ("TM107", "TM111"):
        assert "trainmedic lint --fix" in get_rule(code).fix
