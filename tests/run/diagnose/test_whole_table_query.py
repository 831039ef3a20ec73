"""Per-batch SQL -> the whole-table query data.load runs once."""

from __future__ import annotations

import pytest

from trainmedic.run.diagnose.sql import whole_table_query
from trainmedic.run.probe.source_facts import Query


def query(text, params=(), varying=(), count=10):
    return Query(text, count, params, frozenset(varying))


@pytest.mark.parametrize(
    ("per_batch", "whole"),
    [
        (
            query("SELECT features, label FROM samples ORDER BY RANDOM() LIMIT ?", (256,)),
            "SELECT features, label FROM samples",
        ),
        (query("SELECT x, y FROM t LIMIT 256 OFFSET 512;"), "SELECT x, y FROM t"),
        (
            query("SELECT f, lat FROM m WHERE sample_id IN (?,?,?)", (1, 2, 3), {0, 1, 2}),
            "SELECT f, lat FROM m",
        ),
        (
            query("SELECT x, y FROM t WHERE split = ? AND id BETWEEN ? AND ?", ("train", 0, 255), {1, 2}),
            "SELECT x, y FROM t WHERE split = 'train'",
        ),
        (
            query("SELECT x FROM t WHERE id >= :lo AND id < :hi", {"lo": 0, "hi": 256}, {"lo", "hi"}),
            "SELECT x FROM t",
        ),
        (
            query("SELECT x FROM t WHERE id = %(i)s AND ok = %(ok)s", {"i": 5, "ok": True}, {"i"}),
            "SELECT x FROM t WHERE ok = TRUE",
        ),
        (query("SELECT x FROM t WHERE id = %s", (5,), {0}), "SELECT x FROM t"),
        (
            query(
                "SELECT a.x, b.y FROM a JOIN b ON a.id = b.id WHERE a.label <> 'it''s' ORDER BY a.id LIMIT ? OFFSET ?",
                (64, 128),
                {1},
            ),
            "SELECT a.x, b.y FROM a JOIN b ON a.id = b.id WHERE a.label <> 'it''s' ORDER BY a.id",
        ),
        (
            query(
                "SELECT x FROM t WHERE id IN (SELECT id FROM u WHERE k = ?) AND z BETWEEN ? AND ?",
                (3, 0, 9),
                {1, 2},
            ),
            "SELECT x FROM t WHERE id IN (SELECT id FROM u WHERE k = 3)",
        ),
        (
            query('select "x", y from t where y::int = $1 order by random() fetch first 10 rows only', (1,)),
            'SELECT "x", y FROM t WHERE y::int = 1',
        ),
        (query("WITH s AS (SELECT * FROM t) SELECT * FROM s"), "WITH s AS (SELECT * FROM t) SELECT * FROM s"),
    ],
)
def test_batch_selection_is_dropped_and_fixed_filters_are_written_in(per_batch, whole):
    derived = whole_table_query(per_batch)
    assert (derived.text, derived.exact) == (whole, True)


@pytest.mark.parametrize(
    ("per_batch", "problem"),
    [
        (query("SELECT x FROM t WHERE f(id) > ?", (5,), {0}), "not a plain id selection"),
        (query("SELECT x FROM t WHERE id = ? OR id = ?", (5, 6), {0, 1}), "with OR"),
        (query("SELECT x FROM t WHERE id NOT IN (?, ?)", (1, 2), {0, 1}), "not a plain id selection"),
        (
            query("SELECT x FROM t WHERE id BETWEEN ? AND ?", (0, 9), {0}),
            "mixes a per-batch value with fixed ones",
        ),
    ],
)
def test_a_per_batch_condition_that_is_not_an_id_selection_is_left_to_the_user(per_batch, problem):
    derived = whole_table_query(per_batch)
    assert not derived.exact
    assert derived.text == "SELECT x FROM t WHERE <fill in: which rows to train on>"
    assert problem in derived.problem


def test_set_operations_and_limited_ctes_are_not_rewritten():
    for text in (
        "SELECT x FROM t UNION SELECT x FROM u LIMIT ?",
        "WITH s AS (SELECT * FROM t) SELECT * FROM s LIMIT ?",
    ):
        derived = whole_table_query(query(text, (3,)))
        assert derived.text is None and not derived.exact


def test_the_filter_of_the_query_that_listed_the_ids_is_carried_over():
    per_batch = query("SELECT features FROM measurements WHERE sample_id IN (?, ?)", (1, 2), {0, 1})
    listing = query("SELECT sample_id FROM measurements WHERE split = ?", ("train",), count=1)
    other_table = query("SELECT sample_id FROM labels WHERE split = ?", ("val",), count=1)
    derived = whole_table_query(per_batch, (other_table, listing))
    assert derived.text == "SELECT features FROM measurements WHERE split = 'train'"
    assert derived.carried == ["split = 'train'"] and derived.selectors == ["sample_id IN (...)"]
