"""File skipping: it prunes what it can, and it never prunes a file holding a matching row."""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from mere.expr import ColumnRange, bind, may_match, must_match, parse, to_arrow

UTC = dt.UTC
SCHEMA = pa.schema(
    [
        ("x", pa.int64()),
        ("y", pa.int32()),
        ("f", pa.float64()),
        ("d", pa.decimal128(6, 2)),
        ("s", pa.string()),
        ("country", pa.string()),
        ("flag", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("us", "UTC")),
    ]
)


def R(lo, hi, nulls=0, rows=100) -> ColumnRange:
    return ColumnRange(lo, hi, nulls, rows)


def prunes(sql: str, ranges: dict[str, ColumnRange], rows: int = 100) -> bool:
    """True when the file is skipped."""
    return not may_match(bind(parse(sql), SCHEMA), ranges, rows)


# --- it prunes ----------------------------------------------------------------------------

FILE = {
    "x": R(10, 50),
    "y": R(-5, 5, nulls=3),
    "f": R(0.5, 2.5),
    "d": R(Decimal("1.00"), Decimal("9.99")),
    "s": R("apple", "banana"),
    "country": R("GB", "US"),
    "flag": R(False, False),
    "day": R(dt.date(2024, 1, 1), dt.date(2024, 1, 31)),
    "ts": R(dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 1, 12)),
    "tz": R(dt.datetime(2024, 1, 1, 10, tzinfo=UTC), dt.datetime(2024, 1, 1, 12, tzinfo=UTC)),
}


@pytest.mark.parametrize(
    ("sql", "pruned"),
    [
        ("x > 100", True),
        ("x > 50", True),
        ("x >= 50", False),
        ("x < 10", True),
        ("x <= 10", False),
        ("x = 9", True),
        ("x = 30", False),
        ("x != 30", False),
        ("100 < x", True),
        ("5 > x", True),
        ("50 <= x", False),
        ("x BETWEEN 60 AND 70", True),
        ("x BETWEEN 40 AND 70", False),
        ("x NOT BETWEEN 0 AND 100", True),
        ("x IN (1, 2, 99)", True),
        ("x IN (1, 20)", False),
        ("x IN (1, NULL)", True),
        ("x NOT IN (1, 2)", False),
        ("x IS NULL", True),  # null_count 0
        ("x IS NOT NULL", False),
        ("y IS NULL", False),
        ("NOT (x > 5)", True),  # every x > 5
        ("NOT (x <= 50)", True),
        ("NOT (x = 30)", False),
        ("x > 100 OR x < 0", True),
        ("x > 100 OR s = 'apple'", False),
        ("x > 100 AND s = 'apple'", True),
        ("x > 20 AND x < 15", False),  # columns ranges are independent: conservative
        ("x + 1 > 100", True),
        ("x - 1 < 9", True),
        ("-x > -10", True),
        ("x * 2 > 1000", False),  # not analysed: conservative
        ("CAST(x AS DOUBLE) > 100.5", True),
        ("x > 60.5", True),
        ("x > 1e3", True),
        ("f > 2.5", False),  # NaN > 2.5: statistics leave NaN out
        ("f < 0.5", True),
        ("f = 1", False),
        ("f != 1", False),
        ("d > 10", True),
        ("d = 5.5", False),
        ("d < 1", True),
        ("country IN ('FR', 'DE')", True),
        ("country IN ('FR', 'IT')", False),
        ("country = 'FR'", True),
        ("country NOT IN ('FR')", False),
        ("s LIKE 'c%'", True),
        ("s LIKE 'a%'", False),
        ("s LIKE 'b%'", False),
        ("s LIKE 'bz%'", True),
        ("s LIKE 'aa%'", True),
        ("s LIKE 'app%'", False),
        ("s LIKE 'apple'", False),
        ("s LIKE 'zebra'", True),
        ("s LIKE '_pple'", False),
        ("s LIKE '%'", False),
        ("s NOT LIKE '%'", True),
        ("s ILIKE 'Z%'", False),
        ("flag", True),
        ("NOT flag", False),
        ("flag = TRUE", True),
        ("flag IS TRUE", True),
        ("flag IS NOT TRUE", False),
        ("flag IS FALSE", False),
        ("flag IS NOT FALSE", True),
        ("day > '2024-02-01'", True),
        ("day < DATE '2024-01-01'", True),
        ("day = '2024-01-15'", False),
        ("day >= TIMESTAMP '2024-01-31 00:00:01'", True),
        ("ts > '2024-01-01 12:00'", True),
        ("ts >= '2024-01-01 12:00'", False),
        ("ts < DATE '2024-01-01'", True),
        ("tz > '2024-01-01 12:00:00'", True),
        ("tz > '2024-01-01 13:00:00+02:00'", False),  # 11:00 UTC
        ("tz > '2024-01-01 14:00:00+02:00'", True),  # 12:00 UTC
        ("x = y", True),
        ("x > y", False),
        ("x < y", True),
        ("unknown_col > 1", False),
        ("lower(s) = 'zzz'", False),
        ("TRUE", False),
        ("FALSE", True),
        ("NULL", True),
        ("x = NULL", True),
        ("x > 100 IS NULL", True),
        ("(x > 100) IS NOT TRUE", False),
        ("(x > 100) IS TRUE", True),
    ],
)
def test_prunes(sql, pruned):
    if "unknown_col" in sql:
        schema = SCHEMA.append(pa.field("unknown_col", pa.int64()))
        assert may_match(bind(parse(sql), schema), FILE, 100) is not pruned
        return
    assert prunes(sql, FILE) is pruned


def test_null_facts():
    all_null = {"x": ColumnRange(None, None, 100, 100)}
    assert prunes("x > 1", all_null)
    assert prunes("NOT (x > 1)", all_null)
    assert prunes("x IS NOT NULL", all_null)
    assert not prunes("x IS NULL", all_null)
    assert prunes("x IN (1, 2)", all_null)
    assert not prunes("x IS NULL OR x > 1", all_null)
    unknown_nulls = {"x": ColumnRange(1, 5, None, 100)}
    assert not prunes("x IS NULL", unknown_nulls)
    assert prunes("x > 5", unknown_nulls)
    unknown_bounds = {"x": ColumnRange(None, None, 0, 100)}
    assert not prunes("x > 5", unknown_bounds)
    assert prunes("x IS NULL", unknown_bounds)
    only_min = {"x": ColumnRange(10, None, 0, 100)}
    assert prunes("x < 5", only_min)
    assert not prunes("x > 5000", only_min)


def test_partition_values():
    fr = {"country": ColumnRange("FR", "FR", 0, 10)}
    assert not prunes("country = 'FR'", fr)
    assert prunes("country = 'DE'", fr)
    assert prunes("country != 'FR'", fr)
    assert prunes("country NOT IN ('FR', 'DE')", fr)
    assert not prunes("country IN ('FR', 'DE')", fr)
    assert prunes("country IS NULL", fr)
    null_partition = {"country": ColumnRange(None, None, 10, 10)}
    assert prunes("country = 'FR'", null_partition)
    assert prunes("country != 'FR'", null_partition)
    assert not prunes("country IS NULL", null_partition)


def test_empty_file_never_matches():
    assert not may_match(bind(parse("TRUE"), SCHEMA), {}, 0)


def test_float_nan_is_respected():
    # Statistics ignore NaN, and NaN is above every number: a NaN row satisfies !=,
    # NOT (=), > and >= even outside min/max, but never < or =.
    file = {"f": ColumnRange(1.0, 1.0, 0, 10)}
    assert not prunes("f != 1", file)
    assert not prunes("NOT (f = 1)", file)
    assert not prunes("NOT (f < 5)", file)
    assert not prunes("f > 1", file)
    assert not prunes("f >= 1e308", file)
    assert prunes("f < 1", file)
    assert prunes("f = 2", file)
    assert prunes("f IN (2, 3)", file)
    assert not prunes("f IN (2, CAST('NaN' AS DOUBLE))", file)
    nan_bounds = {"f": ColumnRange(float("nan"), float("nan"), 0, 10)}
    assert not prunes("f > 1", nan_bounds)
    assert not prunes("f < 1", nan_bounds)


def test_type_mismatched_facts_are_ignored_not_fatal():
    odd = {"x": ColumnRange("a", "b", 0, 10), "s": ColumnRange(1, 2, 0, 10)}
    assert not prunes("x > 1", odd)
    assert not prunes("s LIKE 'a%'", odd)
    assert not prunes("x IN (1, 2)", odd)


# --- it is sound ------------------------------------------------------------------------------

SOUND_SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("j", pa.int8()),
        ("f", pa.float64()),
        ("d", pa.decimal128(6, 2)),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("day", pa.date32()),
        ("tz", pa.timestamp("s", "UTC")),
    ]
)
DAY0 = dt.date(2024, 1, 1)
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)

VALUES = {
    "i": st.integers(-4, 4),
    "j": st.integers(-3, 3),
    "f": st.sampled_from([-1.5, -0.0, 0.0, 1.0, 2.5, math.nan, math.inf]),
    "d": st.integers(-8, 8).map(lambda n: Decimal(n) / 4),
    "s": st.text(alphabet="abc", max_size=3),
    "b": st.booleans(),
    "day": st.integers(-3, 3).map(lambda n: DAY0 + dt.timedelta(days=n)),
    "tz": st.integers(-3, 3).map(lambda n: T0 + dt.timedelta(hours=n)),
}


@st.composite
def files(draw) -> pa.Table:
    rows = draw(st.integers(1, 5))
    columns = {}
    for name, values in VALUES.items():
        constant = draw(st.booleans()) and draw(st.booleans())
        if constant:  # like a partition column
            value = draw(st.none() | values)
            columns[name] = [value] * rows
        else:
            columns[name] = [draw(st.none() | values) for _ in range(rows)]
    return pa.Table.from_pydict(columns, schema=SOUND_SCHEMA)


def facts(table: pa.Table, forget: set[str], vague: set[str]) -> dict[str, ColumnRange]:
    """What a writer records: min/max of the non-null, non-NaN values, null and NaN counts."""
    out = {}
    for name in table.column_names:
        if name in forget:
            continue
        values = [v for v in table[name].to_pylist() if v is not None]
        ordered = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
        lo, hi = (min(ordered), max(ordered)) if ordered else (None, None)
        nulls = table.num_rows - len(values)
        nans = len(values) - len(ordered) if pa.types.is_floating(table[name].type) else None
        if name in vague:
            out[name] = ColumnRange(None, hi, None, table.num_rows)
        else:
            out[name] = ColumnRange(lo, hi, nulls, table.num_rows, nans)
    return out


def _lit(name: str, value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return f"CAST('{value}' AS DOUBLE)" if not math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return "'" + value + "'"
    if isinstance(value, dt.datetime):
        return "'" + value.strftime("%Y-%m-%d %H:%M:%S") + "'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return str(value)


ORDERED = ["i", "j", "f", "d", "s", "day", "tz"]
NUMERIC = ["i", "j", "f", "d"]
OPS = ["=", "!=", "<", "<=", ">", ">="]


@st.composite
def leaf(draw) -> str:
    kind = draw(st.integers(0, 13))
    col = draw(st.sampled_from(ORDERED))
    value = _lit(
        col, draw(st.none() | VALUES[col]) if draw(st.integers(0, 9)) == 0 else draw(VALUES[col])
    )
    op = draw(st.sampled_from(OPS))
    if kind == 0:
        return f"{col} {op} {value}"
    if kind == 1:
        return f"{value} {op} {col}"
    if kind == 2:
        a, b = draw(st.sampled_from(NUMERIC)), draw(st.sampled_from(NUMERIC))
        return f"{a} {op} {b}"
    if kind == 3:
        items = [_lit(col, draw(st.none() | VALUES[col])) for _ in range(draw(st.integers(1, 3)))]
        neg = "NOT " if draw(st.booleans()) else ""
        return f"{col} {neg}IN ({', '.join(items)})"
    if kind == 4:
        low, high = _lit(col, draw(VALUES[col])), _lit(col, draw(VALUES[col]))
        neg = "NOT " if draw(st.booleans()) else ""
        return f"{col} {neg}BETWEEN {low} AND {high}"
    if kind == 5:
        any_col = draw(st.sampled_from([*ORDERED, "b"]))
        return f"{any_col} IS {'NOT ' if draw(st.booleans()) else ''}NULL"
    if kind == 6:
        pattern = draw(st.text(alphabet="abc%_", max_size=3))
        neg = "NOT " if draw(st.booleans()) else ""
        return f"s {neg}{draw(st.sampled_from(['LIKE', 'ILIKE']))} '{pattern}'"
    if kind == 7:
        return draw(st.sampled_from(["b", "NOT b", "b = TRUE", "b IS NOT TRUE", "b IS FALSE"]))
    if kind == 8:
        num = draw(st.sampled_from(NUMERIC))
        arith = draw(st.sampled_from(["+", "-"]))
        other = draw(st.sampled_from([*NUMERIC, "1", "-2", "0.5"]))
        return f"{num} {arith} {other} {op} {_lit(num, draw(VALUES[num]))}"
    if kind == 9:
        return f"-{draw(st.sampled_from(NUMERIC))} {op} {_lit('i', draw(VALUES['i']))}"
    if kind == 10:
        operand = draw(st.sampled_from(["i", "j", "d", "f"]))
        return f"CAST({operand} AS DOUBLE) {op} {value if col in NUMERIC else '1.5'}"
    if kind == 11:
        return f"day {op} tz" if draw(st.booleans()) else f"tz {op} DATE '2024-01-01'"
    if kind == 12:
        neg = "NOT " if draw(st.booleans()) else ""
        other = draw(st.sampled_from([value, *ORDERED]))
        other = other if other in ORDERED and _family(other) == _family(col) else value
        return f"{col} IS {neg}DISTINCT FROM {other}"
    return draw(
        st.sampled_from(
            [
                "isnan(f)",
                "NOT isnan(f)",
                "starts_with(s, 'a')",
                "starts_with(s, 'ab')",
                "s LIKE 'ab%'",
                f"year(day) {op} 2024",
                f"date_trunc('day', tz) {op} '2024-01-01 00:00:00'",
                f"date_trunc('month', day) {op} DATE '2024-01-01'",
                f"CAST(f AS BIGINT) {op} 1",
                f"CAST(d AS INTEGER) {op} 1",
                "f > CAST('inf' AS DOUBLE)",
                "f = CAST('NaN' AS DOUBLE)",
            ]
        )
    )


def _family(col: str) -> str:
    return "number" if col in NUMERIC else col


predicates = st.recursive(
    leaf(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: " AND ".join(f"({x})" for x in xs)),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: " OR ".join(f"({x})" for x in xs)),
        inner.map(lambda x: f"NOT ({x})"),
        inner.map(lambda x: f"({x}) IS {'NOT ' if len(x) % 2 else ''}TRUE"),
    ),
    max_leaves=4,
)


#: Random files, predicates and facts with some statistics forgotten or made vague.
random_files_and_predicates = given(
    table=files(),
    sql=predicates,
    forget=st.sets(st.sampled_from(list(VALUES))),
    vague=st.sets(st.sampled_from(list(VALUES)), max_size=2),
)
many_examples = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@many_examples
@random_files_and_predicates
def test_may_match_is_sound(table, sql, forget, vague):
    predicate = bind(parse(sql), table.schema)
    try:
        matching = table.filter(to_arrow(predicate)).num_rows
    except pa.ArrowInvalid:  # a cast of NaN to an integer: no rows to compare
        reject()
    if matching:
        assert may_match(predicate, facts(table, forget, vague), table.num_rows), sql


def test_soundness_check_also_sees_pruning():
    """The random check above is only meaningful if pruning actually happens on such files."""
    rng = random.Random(7)
    pruned = 0
    for _ in range(300):
        rows = rng.randint(1, 5)
        x = [rng.randint(-4, 4) for _ in range(rows)]
        table = pa.table({"i": pa.array(x, pa.int64())})
        ranges = facts(table, set(), set())
        bound = rng.randint(-6, 6)
        predicate = bind(parse(f"i > {bound} AND NOT (i = {bound + 1})"), table.schema)
        matches = table.filter(to_arrow(predicate)).num_rows > 0
        possible = may_match(predicate, ranges, rows)
        assert possible or not matches
        pruned += not possible
    assert pruned > 50


# --- must_match: every row matches ----------------------------------------------------------


def covers(sql: str, ranges: dict[str, ColumnRange], rows: int = 100) -> bool:
    return must_match(bind(parse(sql), SCHEMA), ranges, rows)


@pytest.mark.parametrize(
    ("sql", "covered"),
    [
        ("x >= 10", True),
        ("x > 10", False),
        ("x BETWEEN 0 AND 50", True),
        ("x IN (1, 2)", False),
        ("x IS NOT NULL", True),
        ("y > -10", False),  # y has nulls: NULL is possible
        ("y > -10 OR y IS NULL", False),  # sub-predicates taken as independent: conservative
        ("country >= 'GB' AND x < 51", True),
        ("NOT (x > 50)", True),
        ("f < 3", False),  # a float may hold NaN, which is not < 3
        ("f > 0", True),  # ... but is > 0
        ("s LIKE 'a%'", False),  # 'banana' does not
        ("starts_with(country, 'G') OR starts_with(country, 'U')", False),
        ("s LIKE '%'", True),
        ("x * 2 > 0", False),  # not analysed
    ],
)
def test_must_match(sql: str, covered: bool) -> None:
    assert covers(sql, FILE) is covered


def test_nan_counts_sharpen_float_skipping() -> None:
    no_nan = {"f": ColumnRange(0.5, 2.5, 0, 100, nan_count=0)}
    assert prunes("f > 2.5", no_nan)
    assert prunes("isnan(f)", no_nan)
    assert covers("f < 3", no_nan)
    assert covers("NOT isnan(f)", no_nan)
    all_nan = {"f": ColumnRange(None, None, 0, 100, nan_count=100)}
    assert prunes("f < 1e308", all_nan)
    assert prunes("f = 1", all_nan)
    assert covers("f > CAST('inf' AS DOUBLE)", all_nan)
    assert covers("f = CAST('NaN' AS DOUBLE)", all_nan)
    assert not prunes("f > 1", {"f": ColumnRange(0.5, 0.5, 0, 100, nan_count=None)})


def test_starts_with_and_prefix_like_cover_a_file_between_prefixed_bounds() -> None:
    names = {"s": R("apple", "apricot")}
    assert covers("starts_with(s, 'ap')", names)
    assert covers("s LIKE 'ap%'", names)
    assert not covers("s LIKE 'app%'", names)
    assert prunes("starts_with(s, 'b')", names)


def test_must_match_on_partition_values() -> None:
    part = {"country": R("FR", "FR"), "x": R(1, 9)}
    assert covers("country = 'FR'", part)
    assert not covers("country = 'DE'", part)
    assert covers("country IN ('FR', 'DE') AND x > 0", part)
    null_part = {"country": ColumnRange(None, None, 100, 100)}
    assert covers("country IS NULL", null_part)
    assert not covers("country = 'FR'", null_part)
    assert not covers("country = 'FR'", part, rows=0)  # an empty file holds nothing to delete


@many_examples
@random_files_and_predicates
def test_must_match_is_sound(table, sql, forget, vague):
    predicate = bind(parse(sql), table.schema)
    if must_match(predicate, facts(table, forget, vague), table.num_rows):
        # Every row matches, and none fails: a delete drops such a file unread.
        assert table.filter(to_arrow(predicate)).num_rows == table.num_rows, sql


def test_soundness_check_also_sees_covering():
    """The random check above is only meaningful if must_match does say yes on such files."""
    rng = random.Random(11)
    covered = 0
    for _ in range(300):
        rows = rng.randint(1, 5)
        table = pa.table({"i": pa.array([rng.randint(-4, 4) for _ in range(rows)], pa.int64())})
        bound = rng.randint(-6, 6)
        predicate = bind(parse(f"i > {bound}"), table.schema)
        every = table.filter(to_arrow(predicate)).num_rows == rows
        sure = must_match(predicate, facts(table, set(), set()), rows)
        assert every or not sure
        covered += sure
    assert covered > 50
