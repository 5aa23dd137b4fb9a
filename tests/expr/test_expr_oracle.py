"""Row filtering checked against DuckDB as the reference implementation.

Random predicates from a small grammar are run twice over the same Arrow tables:
through ``table.filter(to_arrow(bind(parse(sql), schema)))`` and through DuckDB's
``SELECT rid FROM t WHERE sql``; the selected row ids must be identical.

The generator emits a pair of texts. They are the same except where this module
deliberately differs from DuckDB, which is only division by zero: ``x / 0`` is NULL
here and infinity in DuckDB, so DuckDB gets ``x / NULLIF(y, 0)``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mere.expr import bind, parse, to_arrow, to_sql

UTC = dt.UTC
CHARS = ["a", "b", "B", "'", "\\", "%", "_", "é", "😀", " "]
SCHEMA = pa.schema(
    [
        ("rid", pa.int64()),
        ("i", pa.int64()),
        ("j", pa.int32()),
        ("f", pa.float64()),
        ("d", pa.decimal128(10, 2)),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("us", "UTC")),
        ("Odd Col", pa.int16()),
    ]
)
BASE = dt.datetime(2024, 1, 1)


def _maybe_null(rng: random.Random, value: object) -> object:
    return None if rng.random() < 0.15 else value


def make_table(seed: int, rows: int = 40) -> pa.Table:
    """A table of small values with NULLs everywhere, so comparisons often tie."""
    rng = random.Random(seed)

    def column(make):
        return [_maybe_null(rng, make()) for _ in range(rows)]

    def moment() -> dt.datetime:
        return BASE + dt.timedelta(
            hours=rng.randint(-30, 30),
            seconds=rng.choice([0, 0, 1, 59]),
            microseconds=rng.choice([0, 0, 1]),
        )

    data = {
        "rid": list(range(rows)),
        "i": column(lambda: rng.randint(-12, 12)),
        "j": column(lambda: rng.randint(-4, 4)),
        "f": column(
            lambda: rng.choice(
                [-2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.25, 10.0, 1e-3, math.nan, math.inf, -math.inf]
            )
        ),
        "d": column(lambda: Decimal(rng.randint(-40, 40)) / 4),
        "s": column(lambda: "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 4)))),
        "b": column(lambda: rng.random() < 0.5),
        "day": column(lambda: dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(-5, 5))),
        "ts": column(moment),
        "tz": [None if v is None else v.replace(tzinfo=UTC) for v in column(moment)],
        "Odd Col": column(lambda: rng.randint(-3, 3)),
    }
    return pa.Table.from_pydict(data, schema=SCHEMA)


TABLES = [make_table(seed) for seed in range(4)]


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    try:
        connection.execute("SET error_on_division_by_zero = false")
    except duckdb.Error:  # older DuckDB: division by zero is NULL anyway
        pass
    for n, table in enumerate(TABLES):
        connection.register(f"t{n}", table)
    yield connection
    connection.close()


# --- the grammar ----------------------------------------------------------------------------

Pair = tuple[str, str]


def same(text: str) -> Pair:
    return (text, text)


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


int_literals = st.integers(-13, 13).map(lambda v: same(str(v)))
dec_literals = st.sampled_from(["1.5", "-0.25", "2.75", "0.00", "10.01", "3.3", "-2.5"]).map(same)
float_literals = st.sampled_from(
    ["1e1", "2.5e0", "-1E0", "CAST('NaN' AS DOUBLE)", "'inf'::DOUBLE", "'-inf'::DOUBLE"]
).map(same)
num_literals = st.one_of(int_literals, dec_literals, float_literals)
int_columns = st.sampled_from(["i", "j", '"Odd Col"']).map(same)
num_columns = st.one_of(int_columns, st.sampled_from(["f", "d"]).map(same))


def _binary(op: str):
    def build(pair: tuple[Pair, Pair]) -> Pair:
        (a1, a2), (b1, b2) = pair
        return (f"({a1} {op} {b1})", f"({a2} {op} {b2})")

    return build


def _divide(pair: tuple[Pair, Pair]) -> Pair:
    (a1, a2), (b1, b2) = pair
    return (f"({a1} / {b1})", f"({a2} / NULLIF({b2}, 0))")


int_exprs = st.recursive(
    st.one_of(int_columns, int_literals),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(_binary("+")),
        st.tuples(inner, inner).map(_binary("-")),
        st.tuples(inner, int_literals).map(_binary("*")),
        st.tuples(inner, inner).map(_binary("//")),
        st.tuples(inner, inner).map(_binary("%")),
        inner.map(lambda p: (f"-({p[0]})", f"-({p[1]})")),
        inner.map(lambda p: (f"abs({p[0]})", f"abs({p[1]})")),
        st.tuples(inner, int_literals).map(
            lambda p: tuple(f"coalesce({a}, {b})" for a, b in zip(*p, strict=True))
        ),
    ),
    max_leaves=3,
)
num_exprs = st.one_of(
    int_exprs,
    num_columns,
    num_literals,
    st.tuples(num_columns, num_literals).map(_binary("+")),
    st.tuples(num_columns, num_columns).map(_binary("-")),
    st.tuples(st.sampled_from(["f", "d"]).map(same), int_literals).map(_binary("*")),
    st.tuples(
        st.sampled_from(["i", "j", "f"]).map(same),
        st.sampled_from(["i", "j", "f", "2", "0"]).map(same),
    ).map(_divide),
    st.sampled_from(
        [
            "d % 2",
            "CAST(i AS DOUBLE)",
            "CAST(j AS DECIMAL(10, 2))",
            "-d",
            "abs(f)",
            "CAST(d AS INTEGER)",
            "CAST(d AS DECIMAL(4, 1))",
            "CAST(d * 2 AS BIGINT)",
            "CAST(CAST(d AS DOUBLE) * 2 AS BIGINT)",
            "year(day)",
            "month(ts)",
            "day(tz)",
            "hour(ts)",
            "quarter(day)",
            "length(trim(s))",
        ]
    ).map(same),
)

strings = st.text(alphabet=CHARS, max_size=3).map(lambda t: same(sql_string(t)))
str_exprs = st.one_of(
    st.just(same("s")),
    st.sampled_from(
        [
            "lower(s)",
            "upper(s)",
            "s || 'a'",
            "substring(s, 2, 2)",
            "substring(s, 1)",
            "coalesce(s, '')",
            "trim(s)",
            "ltrim(s)",
            "rtrim(s)",
            "trim(s, 'a')",
        ]
    ).map(same),
    strings,
)
patterns = st.lists(st.sampled_from([*CHARS[:3], "%", "_", "é", "'"]), max_size=4).map(
    lambda cs: "".join(cs)
)

date_literals = st.integers(-6, 6).map(
    lambda n: sql_string((dt.date(2024, 1, 1) + dt.timedelta(days=n)).isoformat())
)
ts_texts = st.builds(
    lambda h, s, us: (BASE + dt.timedelta(hours=h, seconds=s, microseconds=us)).isoformat(sep=" "),
    st.integers(-31, 31),
    st.sampled_from([0, 1, 59]),
    st.sampled_from([0, 1]),
)
comparisons = st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">="])
distinct_words = st.sampled_from(["IS DISTINCT FROM", "IS NOT DISTINCT FROM"])


def _compare(parts: tuple[Pair, str, Pair]) -> Pair:
    (a1, a2), op, (b1, b2) = parts
    return (f"{a1} {op} {b1}", f"{a2} {op} {b2}")


def _in_list(parts) -> Pair:
    (x1, x2), items, negated = parts
    word = "NOT IN" if negated else "IN"
    return (f"{x1} {word} ({', '.join(items)})", f"{x2} {word} ({', '.join(items)})")


def _between(parts) -> Pair:
    (x1, x2), (lo1, lo2), (hi1, hi2), negated = parts
    word = "NOT BETWEEN" if negated else "BETWEEN"
    return (f"{x1} {word} {lo1} AND {hi1}", f"{x2} {word} {lo2} AND {hi2}")


temporal = st.one_of(
    st.tuples(st.just(same("day")), comparisons, date_literals.map(same)).map(_compare),
    st.tuples(st.just(same("ts")), comparisons, ts_texts.map(sql_string).map(same)).map(_compare),
    st.tuples(st.just(same("tz")), comparisons, ts_texts.map(sql_string).map(same)).map(_compare),
    st.tuples(st.just(same("ts")), comparisons, date_literals.map(lambda t: same("DATE " + t))).map(
        _compare
    ),
    st.tuples(
        st.just(same("day")),
        comparisons,
        ts_texts.map(lambda t: same("TIMESTAMP " + sql_string(t))),
    ).map(_compare),
    st.tuples(st.just(same("day")), comparisons, st.just(same("ts"))).map(_compare),
    st.tuples(
        st.just(same("day")), st.lists(date_literals, min_size=1, max_size=3), st.booleans()
    ).map(_in_list),
    st.tuples(
        st.just(same("ts")), date_literals.map(same), date_literals.map(same), st.booleans()
    ).map(_between),
    st.tuples(
        st.sampled_from(
            [
                "date_trunc('month', ts)",
                "date_trunc('day', day)",
                "date_trunc('hour', ts)",
                "date_trunc('week', day)",
                "date_trunc('minute', ts)",
            ]
        ).map(same),
        comparisons,
        ts_texts.map(lambda t: same("TIMESTAMP " + sql_string(t))),
    ).map(_compare),
    st.tuples(
        st.just(same("date_trunc('day', tz)")),
        comparisons,
        ts_texts.map(sql_string).map(same),
    ).map(_compare),
)

leaves = st.one_of(
    st.tuples(num_exprs, comparisons, num_exprs).map(_compare),
    st.tuples(str_exprs, comparisons, str_exprs).map(_compare),
    st.tuples(
        st.one_of(int_columns, st.sampled_from(["f", "d"]).map(same)),
        st.lists(
            st.one_of(int_literals, dec_literals, st.just("NULL")).map(
                lambda p: p if isinstance(p, str) else p[0]
            ),
            min_size=1,
            max_size=4,
        ),
        st.booleans(),
    ).map(_in_list),
    st.tuples(
        st.just(same("s")),
        st.lists(strings.map(lambda p: p[0]) | st.just("NULL"), min_size=1, max_size=3),
        st.booleans(),
    ).map(_in_list),
    st.tuples(num_exprs, num_literals, num_literals, st.booleans()).map(_between),
    st.tuples(
        st.one_of(num_exprs, str_exprs, st.sampled_from(["b", "day", "ts", "tz"]).map(same)),
        st.booleans(),
    ).map(lambda p: tuple(f"{x} IS {'NOT ' if p[1] else ''}NULL" for x in p[0])),
    st.tuples(
        st.sampled_from(["s", "lower(s)"]),
        st.sampled_from(["LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE"]),
        patterns,
    ).map(lambda p: same(f"{p[0]} {p[1]} {sql_string(p[2])}")),
    st.tuples(num_exprs, distinct_words, st.one_of(num_exprs, st.just(same("NULL")))).map(_compare),
    st.tuples(str_exprs, distinct_words, st.one_of(str_exprs, st.just(same("NULL")))).map(_compare),
    st.sampled_from(
        [
            "isnan(f)",
            "NOT isnan(f)",
            "isinf(f)",
            "isfinite(f)",
            "isnan(i)",
            "starts_with(s, 'a')",
            "starts_with(s, '')",
            "ends_with(s, 'b')",
            "contains(s, '%')",
            "b",
            "NOT b",
            "b = TRUE",
            "b != FALSE",
            "b IS TRUE",
            "b IS NOT TRUE",
            "b IS FALSE",
            "b IS NOT FALSE",
            "TRUE",
            "FALSE",
            "NULL",
            "b AND NULL",
            "b OR NULL",
            "i = NULL",
        ]
    ).map(same),
    temporal,
)


def _join(word: str):
    def build(items: list[Pair]) -> Pair:
        return (
            f" {word} ".join(f"({a})" for a, _ in items),
            f" {word} ".join(f"({b})" for _, b in items),
        )

    return build


predicates = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(_join("AND")),
        st.lists(inner, min_size=2, max_size=3).map(_join("OR")),
        inner.map(lambda p: (f"NOT ({p[0]})", f"NOT ({p[1]})")),
        inner.map(lambda p: (f"({p[0]}) IS NULL", f"({p[1]}) IS NULL")),
    ),
    max_leaves=4,
)


def mere_rows(sql: str, table: pa.Table) -> list[int]:
    predicate = bind(parse(sql), table.schema)
    return sorted(table.filter(to_arrow(predicate))["rid"].to_pylist())


def duck_rows(con, sql: str, n: int) -> list[int]:
    return sorted(r[0] for r in con.execute(f"SELECT rid FROM t{n} WHERE {sql}").fetchall())


@settings(
    max_examples=600,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(pair=predicates, n=st.integers(0, len(TABLES) - 1))
def test_filter_matches_duckdb(con, pair, n):
    ours, theirs = pair
    expected = duck_rows(con, theirs, n)
    got = mere_rows(ours, TABLES[n])
    assert got == expected, f"{ours}  (bound: {to_sql(bind(parse(ours), SCHEMA))})"


@pytest.mark.parametrize(
    "sql",
    [
        "i > 3 AND s IN ('a', 'b')",
        "NOT (i > 3) OR s IS NULL",
        "i NOT IN (1, 2, NULL)",
        "(i IN (1, NULL)) IS NULL",
        "d > 1.5 AND f <= 3.25",
        '"Odd Col" * 2 = j',
        "i // j = 1 OR i % j = 0",
        "s LIKE '%''%' OR s LIKE '%\\%'",
        "s > 'a' AND s < 'b'",
        "lower(s) = upper(s)",
        "length(s) >= 2",
        "tz BETWEEN '2024-01-01 00:00:00' AND '2024-01-01 12:00:00'",
        "ts >= DATE '2024-01-01' AND ts < '2024-01-02'",
        "day = TIMESTAMP '2024-01-01 00:00:00'",
        "NOT b AND NOT (b IS NULL)",
        "coalesce(b, FALSE) = FALSE",
        "i = f OR d = f OR i = d",
        "i BETWEEN j AND 5",
        # constants and NULL corner cases
        "'abc' LIKE 'a%'",
        "NULL IS TRUE",
        "NULL IS NOT FALSE",
        "i IN (NULL)",
        "i NOT IN (NULL)",
        "NULL IN (1)",
        "coalesce(NULL, NULL) IS NULL",
        "coalesce(NULL, i) = 1",
        "substring(s, 5) = ''",
        "substring(s, 2, 0) = ''",
        "NOT NULL",
        "NULL AND FALSE",
        "NULL OR TRUE",
        "1 = 1.0",
        "i + NULL IS NULL",
        "2 // 0 IS NULL",
        "(i = 1) = TRUE",
        "i BETWEEN NULL AND 5",
        "s || NULL IS NULL",
        "DATE '2024-01-01' < TIMESTAMP '2024-01-01 00:00:01'",
        "'2024-01-01' = DATE '2024-01-01'",
        "length(NULL) IS NULL",
    ],
)
def test_examples_match_duckdb(con, sql):
    for n, table in enumerate(TABLES):
        assert mere_rows(sql, table) == duck_rows(con, sql, n), sql
