"""TM104's repair: read the sorted, unique indices, then put the rows back in the index's order."""

from __future__ import annotations

import textwrap

import h5py
import numpy as np
import pytest
from lint_fix_kit import repaired, run_module, unfixable

from trainmedic.lint import get_rule, lint_source

# Seed 000 #2: a generator that shuffled its indices and read two datasets with each batch.
SEED_000 = """
    import h5py
    import numpy as np

    def batches(path, indices, batch_size):
        np.random.shuffle(indices)
        with h5py.File(path, "r") as f:
            for i in range(len(indices) // batch_size):
                batch_indices = indices[i * batch_size:(i + 1) * batch_size]
                y = f["y_received"][batch_indices]
                bits = f["bits"][batch_indices, :]
                yield batch_indices, y, bits
"""


@pytest.fixture
def signals(tmp_path):
    """A small HDF5 file and its contents in memory."""
    rng = np.random.default_rng(0)
    data = {
        "y_received": rng.normal(size=(64, 3, 2)).astype("f4"),
        "bits": rng.integers(0, 2, size=(64, 5)).astype("i1"),
    }
    path = tmp_path / "signals.h5"
    with h5py.File(path, "w") as f:
        for name, array in data.items():
            f[name] = array
    return str(path), data


def test_the_seed_generator_sorts_each_batch_once_for_both_reads():
    after = repaired(SEED_000, "TM104")
    assert after == textwrap.dedent(
        """
        import h5py
        import numpy as np

        def batches(path, indices, batch_size):
            np.random.shuffle(indices)
            with h5py.File(path, "r") as f:
                for i in range(len(indices) // batch_size):
                    batch_indices = indices[i * batch_size:(i + 1) * batch_size]
                    # h5py reads increasing, unique indices only: read those, then put the rows in order
                    batch_indices_unique, batch_indices_inverse = np.unique(batch_indices, return_inverse=True)
                    y = f["y_received"][batch_indices_unique][batch_indices_inverse]
                    bits = f["bits"][batch_indices_unique, :][batch_indices_inverse]
                    yield batch_indices, y, bits
        """
    )


def test_the_seed_generator_raised_and_now_reads_exactly_the_shuffled_rows(signals, tmp_path):
    path, data = signals
    broken = run_module(textwrap.dedent(SEED_000), tmp_path / "broken")
    with pytest.raises(TypeError, match="Indexing elements must be in increasing order"):
        next(broken["batches"](path, np.arange(64), 16))

    fixed = run_module(repaired(SEED_000, "TM104"), tmp_path / "fixed")
    np.random.seed(1)
    seen = []
    for batch, y, bits in fixed["batches"](path, np.arange(64), 16):
        assert not np.all(np.diff(batch) > 0)  # really shuffled
        np.testing.assert_array_equal(y, data["y_received"][batch])
        np.testing.assert_array_equal(bits, data["bits"][batch])
        assert y.dtype == data["y_received"].dtype and bits.shape == (16, 5)
        seen.extend(batch.tolist())
    assert sorted(seen) == list(range(64))


DRAWS = '''
    """Random draws with repeats, from a module that does not import numpy."""

    from __future__ import annotations

    import random

    import h5py
    import torch

    def draw(path, n, batch_size, seed):
        f = h5py.File(path, "r")
        gen = torch.Generator().manual_seed(seed)
        picks = torch.randint(n, (batch_size,), generator=gen).numpy()
        order = torch.randperm(n, generator=gen)[:batch_size].tolist()
        return picks, order, f["bits"][picks], f["y_received"][order]
'''


def test_numpy_is_imported_after_the_other_imports_when_the_module_lacks_it():
    after = repaired(DRAWS, "TM104")
    assert after == textwrap.dedent(
        '''
        """Random draws with repeats, from a module that does not import numpy."""

        from __future__ import annotations

        import random

        import h5py
        import torch
        import numpy as np

        def draw(path, n, batch_size, seed):
            f = h5py.File(path, "r")
            gen = torch.Generator().manual_seed(seed)
            picks = torch.randint(n, (batch_size,), generator=gen).numpy()
            order = torch.randperm(n, generator=gen)[:batch_size].tolist()
            # h5py reads increasing, unique indices only: read those, then put the rows in order
            picks_unique, picks_inverse = np.unique(picks, return_inverse=True)
            order_unique, order_inverse = np.unique(order, return_inverse=True)
            return picks, order, f["bits"][picks_unique][picks_inverse], f["y_received"][order_unique][order_inverse]
        '''
    )


def test_duplicate_and_list_indices_give_exactly_what_numpy_indexing_gives(signals, tmp_path):
    path, data = signals
    broken = run_module(textwrap.dedent(DRAWS), tmp_path / "broken")
    with pytest.raises(TypeError):  # h5py refuses repeated indices as well as unsorted ones
        broken["draw"](path, 64, 40, 0)

    fixed = run_module(repaired(DRAWS, "TM104"), tmp_path / "fixed")
    for seed in range(5):
        picks, order, bits, y = fixed["draw"](path, 64, 40, seed)
        assert len(set(picks.tolist())) < len(picks)  # 40 draws from 64 repeat some rows
        np.testing.assert_array_equal(bits, data["bits"][picks])
        np.testing.assert_array_equal(y, data["y_received"][order])


def test_an_existing_numpy_alias_is_used_and_a_tuple_index_keeps_its_other_axes():
    after = repaired(
        """
        import h5py
        import numpy as onp

        with h5py.File("data.h5") as h5:
            dset = h5["x"]
            idx = onp.arange(len(dset))
            for epoch in range(10):
                for start in range(0, len(idx), 64):
                    x = dset[idx[start:start + 64], 1:3]
                    train_step(x)
                onp.random.shuffle(idx)
        """,
        "TM104",
    )
    assert (
        "        idx_unique, idx_inverse = onp.unique(idx[start:start + 64], return_inverse=True)\n" in after
    )
    assert "        x = dset[idx_unique, 1:3][idx_inverse]\n" in after
    assert "import numpy as np" not in after


def test_a_name_np_bound_to_something_else_is_left_alone():
    after = repaired(
        """
        import random
        import h5py

        np = 3
        f = h5py.File("x.h5")
        rows = f["x"][random.sample(range(100), 8)]
        """,
        "TM104",
    )
    assert "import numpy as np_2\n" in after
    assert "idx_unique, idx_inverse = np_2.unique(random.sample(range(100), 8), return_inverse=True)" in after


def test_each_random_draw_in_a_statement_keeps_its_own_draw():
    after = repaired(
        """
        import h5py
        import numpy as np
        f = h5py.File("x.h5")
        a, b = f["x"][np.random.randint(0, 9, 4)], f["x"][np.random.randint(0, 9, 4)]
        """,
        "TM104",
    )
    assert after.count("np.unique(np.random.randint(0, 9, 4), return_inverse=True)") == 2
    assert 'a, b = f["x"][idx_unique][idx_inverse], f["x"][idx_unique_2][idx_inverse_2]' in after


def test_a_read_after_the_index_changes_gets_its_own_sort():
    after = repaired(
        """
        import h5py
        import numpy as np
        f = h5py.File("x.h5")
        perm = np.random.permutation(100)
        a = f["x"][perm]
        np.random.shuffle(perm)
        b = f["x"][perm]
        """,
        "TM104",
    )
    assert after.count("np.unique(perm, return_inverse=True)") == 2


def test_reads_that_cannot_get_a_line_before_them_are_left_with_a_reason():
    reasons = unfixable(
        """
        import h5py
        import numpy as np

        f = h5py.File("x.h5")
        perm = np.random.permutation(100)
        if perm.size: first = f["x"][perm]
        pick = lambda: f["x"][perm]
        rows = [f["x"][perm] for _ in range(3)]
        maybe = f["x"][perm] if perm.size else None
        while f["x"][perm].any():
            pass
        if perm is None:
            pass
        elif f["x"][perm].any():
            pass
        if perm.size and f["x"][perm].any():
            pass
        """,
        "TM104",
    )
    by_hand = 'sort it by hand: `u, inv = np.unique(perm, return_inverse=True)` before the read, then `f["x"][u][inv]`'
    assert reasons == [
        "the read cannot get a line of its own before it: it shares its line with other code "
        f"(`if c: x = ...` or `a; b`); {by_hand}",
        f"the read cannot get a line of its own before it: it is inside a lambda, where no statement can go "
        f"before it; {by_hand}",
        "the read cannot get a line of its own before it: it is inside a comprehension, which evaluates it "
        f"once per element; {by_hand}",
        "the read cannot get a line of its own before it: it runs only in one branch of a conditional "
        f"expression (x if c else y); {by_hand}",
        "the read cannot get a line of its own before it: it is in the header of a `while` statement, where "
        f"no line can go before it alone; {by_hand}",
        "the read cannot get a line of its own before it: it is in an `elif` test, where no line can go "
        f"before it alone; {by_hand}",
        "the read cannot get a line of its own before it: it runs only when an `and`/`or` before it lets it; "
        f"{by_hand}",
    ]


def test_the_cards_example_is_repaired_and_lints_clean():
    rule = get_rule("TM104")
    after = repaired(rule.before, "TM104")
    assert "        batch_unique, batch_inverse = np.unique(batch, return_inverse=True)\n" in after
    assert '        y = f["y"][batch_unique][batch_inverse]\n' in after
    assert lint_source(after, "after.py", [rule]) == []


def test_a_random_boolean_mask_is_not_an_index_and_h5py_reads_it(signals, tmp_path):
    source = textwrap.dedent(
        """
        import h5py
        import numpy as np

        def subset(path, seed):
            rng = np.random.default_rng(seed)
            with h5py.File(path, "r") as f:
                mask = rng.choice([True, False], size=len(f["bits"]))
                return mask, f["bits"][mask]
        """
    )
    assert lint_source(source, "train.py", [get_rule("TM104")]) == []
    path, data = signals
    mask, rows = run_module(source, tmp_path)["subset"](path, 3)
    np.testing.assert_array_equal(rows, data["bits"][mask])
