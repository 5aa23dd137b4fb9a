"""Skipping a whole table at once (mere.snapshot.vectorized) answers as the per-file analysis does.

The per-file analysis (``may_match`` / ``must_match``) is proven sound against the
row-level evaluator in test_expr_skipping.py; here the vectorized one must give the
same answer for every file, over the same random files and predicates, several
files at a time (so it is sound too), and must actually cover the predicates
those tests draw.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_expr_skipping import (
    FILE,
    SCHEMA,
    SOUND_SCHEMA,
    VALUES,
    facts,
    files,
    many_examples,
    predicates,
)

from mere.expr import ColumnRange, bind, may_match, must_match, parse, to_arrow
from mere.snapshot.vectorized import Facts, may_match_all, must_match_all

TYPES = {f.name: f.type for f in SOUND_SCHEMA}


def both(predicate: Any, ranges: list[dict[str, ColumnRange]], rows: list[int]) -> tuple[Any, Any]:
    found = Facts.from_ranges(ranges, rows, TYPES)
    return may_match_all(predicate, found), must_match_all(predicate, found)


@many_examples
@given(
    tables=st.lists(files(), min_size=1, max_size=4),
    sql=predicates,
    forget=st.sets(st.sampled_from(list(VALUES))),
    vague=st.sets(st.sampled_from(list(VALUES)), max_size=2),
)
def test_vectorized_answers_as_the_per_file_analysis(tables, sql, forget, vague) -> None:
    predicate = bind(parse(sql), SOUND_SCHEMA)
    ranges = [facts(t, forget, vague) for t in tables]
    rows = [t.num_rows for t in tables]
    may, must = both(predicate, ranges, rows)
    if may is None:
        assert must is None
        return
    for i, table in enumerate(tables):
        assert may[i].as_py() == may_match(predicate, ranges[i], rows[i]), (sql, i)
        assert must[i].as_py() == must_match(predicate, ranges[i], rows[i]), (sql, i)
        try:
            matching = table.filter(to_arrow(predicate)).num_rows
        except pa.ArrowInvalid:  # a cast of NaN to an integer: no rows to compare
            continue
        assert may[i].as_py() or not matching, sql  # sound, as the per-file analysis is
        assert not must[i].as_py() or matching == table.num_rows, sql


def test_the_random_predicates_are_mostly_vectorized() -> None:
    """The property above means little if most predicates fall back to the per-file path."""
    rng = random.Random(5)
    analysed = total = 0
    for _ in range(300):
        sql = _random_predicate(rng)
        predicate = bind(parse(sql), SOUND_SCHEMA)
        may, _ = both(predicate, [{}], [10])
        total += 1
        analysed += may is not None
    assert analysed / total > 0.9


def _random_predicate(rng: random.Random) -> str:
    leaves = [
        "i > 2",
        "j <= -1",
        "f = 1.0",
        "d < 1.5",
        "s LIKE 'a%'",
        "s = 'b'",
        "b",
        "NOT b",
        "day >= DATE '2024-01-02'",
        "tz < '2024-01-01 02:00:00'",
        "i IN (1, 2, NULL)",
        "f IS NULL",
        "isnan(f)",
        "i IS DISTINCT FROM j",
        "CAST(i AS DOUBLE) > 1.5",
        "s ILIKE 'A%'",
        "f NOT IN (1.0, CAST('NaN' AS DOUBLE))",
        "(i > 1) IS NOT TRUE",
    ]
    parts = rng.sample(leaves, rng.randint(1, 3))
    joiner = rng.choice([" AND ", " OR "])
    text = joiner.join(f"({p})" for p in parts)
    return f"NOT ({text})" if rng.random() < 0.3 else text


@pytest.mark.parametrize(
    "sql",
    [
        "x > 100",
        "x >= 50",
        "x = 9",
        "x != 30",
        "100 < x",
        "x BETWEEN 60 AND 70",
        "x IN (1, 2, 99)",
        "x IN (1, NULL)",
        "x NOT IN (1, 2)",
        "x IS NULL",
        "y IS NULL",
        "NOT (x > 5)",
        "x > 100 OR s = 'apple'",
        "x > 60.5",
        "f > 2.5",
        "f < 0.5",
        "f = 1",
        "d > 10",
        "d = 5.5",
        "country IN ('FR', 'DE')",
        "s LIKE 'c%'",
        "s LIKE 'apple'",
        "s LIKE '_pple'",
        "s LIKE '%'",
        "s NOT LIKE '%'",
        "s ILIKE 'Z%'",
        "flag",
        "NOT flag",
        "day > DATE '2024-02-01'",
        "ts < '2024-01-01 09:00:00'",
        "tz > '2024-01-02'",
        "x IS NOT DISTINCT FROM 20",
        "starts_with(s, 'ba')",
    ],
)
def test_the_pruning_examples_agree(sql: str) -> None:
    predicate = bind(parse(sql), SCHEMA)
    types = {f.name: f.type for f in SCHEMA}
    other = {"x": ColumnRange(None, None, None, 100)}
    ranges = [FILE, {}, other, {k: ColumnRange(None, None, 100, 100) for k in FILE}]
    rows = [100, 100, 100, 100]
    found = Facts.from_ranges(ranges, rows, types)
    may, must = may_match_all(predicate, found), must_match_all(predicate, found)
    assert may is not None and must is not None, sql
    for i, r in enumerate(ranges):
        assert may[i].as_py() == may_match(predicate, r, rows[i]), (sql, i)
        assert must[i].as_py() == must_match(predicate, r, rows[i]), (sql, i)


def test_nan_bounds_and_counts() -> None:
    predicate = bind(parse("f > 1"), SOUND_SCHEMA)
    ranges = [
        {"f": ColumnRange(math.nan, math.nan, 0, 10)},
        {"f": ColumnRange(0.0, 0.5, 0, 10, 0)},  # no NaN: pruned
        {"f": ColumnRange(0.0, 0.5, 0, 10, 1)},  # a NaN is above 1
        {"f": ColumnRange(0.0, 0.5, 0, 10)},  # NaN count unknown
    ]
    found = Facts.from_ranges(ranges, [10] * 4, TYPES)
    may = may_match_all(predicate, found)
    assert may is not None
    assert (
        may.to_pylist()
        == [may_match(predicate, r, 10) for r in ranges]
        == [
            True,
            False,
            True,
            True,
        ]
    )


def test_empty_files_never_match() -> None:
    predicate = bind(parse("i > 0 OR i IS NULL"), SOUND_SCHEMA)
    found = Facts.from_ranges([{}, {}], [0, 5], TYPES)
    assert may_match_all(predicate, found).to_pylist() == [False, True]
    assert must_match_all(bind(parse("TRUE"), SOUND_SCHEMA), found).to_pylist() == [False, True]


def test_unanalysed_nodes_give_up() -> None:
    found = Facts.from_ranges([{}], [5], TYPES)
    assert may_match_all(bind(parse("i + 1 > 3"), SOUND_SCHEMA), found) is None
    assert may_match_all(bind(parse("i * 2 > 3"), SOUND_SCHEMA), found) is not None  # anything


def test_a_table_of_facts() -> None:
    """A few thousand files in one call: the shape a real table has."""
    n = 5000
    ranges = [{"i": ColumnRange(k * 10, k * 10 + 9, 0, 10)} for k in range(n)]
    found = Facts.from_ranges(ranges, [10] * n, TYPES)
    may = may_match_all(bind(parse("i = 12345"), SOUND_SCHEMA), found)
    assert may is not None
    assert [k for k, hit in enumerate(may.to_pylist()) if hit] == [1234]
