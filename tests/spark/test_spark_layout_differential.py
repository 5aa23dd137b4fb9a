"""Spark's reads of a mere table give DuckDB's answer, whatever the layout of files.

The Spark leg of ``tests/expr/test_layout_differential.py`` (issue 12), with a smaller
example budget: Hypothesis builds a table of awkward values (NaN, ±inf, -0.0, NULLs,
integers at their limits, empty and non-ASCII strings, decimals, a partition column),
writes it as random appends with random file and row-group sizes, and asks random
filters from a grammar whose text means the same in Spark SQL and DuckDB. DuckDB's
``SELECT k FROM t WHERE <filter>`` over the same Arrow table is the reference for:

* the data source read, filtered by Spark (``df.where``: Spark pushes what it can into
  the source);
* the native read (Spark's own Parquet reader), filtered by Spark: the NaN row that its
  Parquet pushdown used to drop is among the examples;
* both reads given the filter as mere's ``filter=`` (files skipped by mere's statistics
  before Spark filters the rows);
* some or all files inlined in the log (``inline_limit``, docs/format.md §2.5): the
  native read hands their rows to Spark from the driver.

Left out of the grammar: ``isnan`` (Spark's is false on NULL, DuckDB's NULL, which ``NOT``
tells apart), arithmetic (Spark's ANSI overflow rules), and dates before 1900.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import tempfile
from dataclasses import dataclass
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mere
import mere.spark
from layout_helpers import (
    CMP,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    append_in_slices,
    make_table,
    row_group_bytes,
    rows_of,
)
from layout_helpers import SCHEMA as ALL_COLUMNS

pytestmark = pytest.mark.spark

NAN, INF = math.nan, math.inf

#: The core test's columns but for ``n`` (its arithmetic) and the timestamps.
SCHEMA = pa.schema([f for f in ALL_COLUMNS if f.name not in ("n", "ts", "tz")])
VALUES: dict[str, list[object]] = {
    "p": ["x", "", "ü", "__HIVE_DEFAULT_PARTITION__"],
    "i64": [I64_MIN, -1, 0, 7, I64_MAX],
    "i32": [I32_MIN, -5, 0, 3, I32_MAX],
    "f": [NAN, INF, -INF, -0.0, 0.0, 1.5, 5.0, 1e308],
    "g": [NAN, INF, -0.0, 1.5, -2.0],
    "s": ["", "a", "A", "ab", "é", "😀", "a_b"],
    "b": [True, False],
    "d": [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)],
    "dec": [Decimal("-99999999.99"), Decimal("-2.25"), Decimal("0.00"), Decimal("1.50")],
}
LITERALS: dict[str, list[str]] = {
    "p": ["'x'", "''", "'ü'", "'__HIVE_DEFAULT_PARTITION__'"],
    "i64": [str(I64_MIN + 1), "-1", "0", "7", str(I64_MAX)],
    "i32": ["-5", "0", "3", "2147483647", "2147483648"],
    "f": ["CAST('NaN' AS DOUBLE)", "CAST('inf' AS DOUBLE)", "0.0", "-0.0", "1.5", "5", "1e308"],
    "g": ["CAST('NaN' AS FLOAT)", "CAST('inf' AS FLOAT)", "-0.0", "1.5", "-2"],
    "s": ["''", "'a'", "'A'", "'ab'", "'é'", "'😀'", "'b'"],
    "d": ["DATE '1970-01-01'", "DATE '2024-02-29'", "DATE '9999-12-31'"],
    "dec": ["1.5", "-2.25", "0", "99999999.99"],
}
PEERS = {"i64": ["i32"], "i32": ["i64"], "f": ["g"], "g": ["f"], "s": ["p"], "p": ["s"]}


@st.composite
def comparisons(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(sorted(LITERALS)))
    other = draw(st.sampled_from(LITERALS[column] + PEERS.get(column, [])))
    left, right = (column, other) if draw(st.booleans()) else (other, column)
    return f"{left} {draw(CMP)} {right}"


@st.composite
def leaves(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(sorted(LITERALS)))
    literals = LITERALS[column]
    kind = draw(st.sampled_from(["in", "between", "null", "distinct"]))
    if kind == "in":
        items = draw(st.lists(st.sampled_from([*literals, "NULL"]), min_size=1, max_size=3))
        return f"{column} {draw(st.sampled_from(['IN', 'NOT IN']))} ({', '.join(items)})"
    if kind == "between":
        low, high = draw(st.sampled_from(literals)), draw(st.sampled_from(literals))
        return f"{column} {draw(st.sampled_from(['BETWEEN', 'NOT BETWEEN']))} {low} AND {high}"
    if kind == "null":
        return f"{column} {draw(st.sampled_from(['IS NULL', 'IS NOT NULL']))}"
    right = draw(st.sampled_from([*literals, "NULL"]))
    return f"{column} {draw(st.sampled_from(['IS DISTINCT FROM', 'IS NOT DISTINCT FROM']))} {right}"


LEAVES = st.one_of(
    comparisons(),
    comparisons(),
    leaves(),
    st.sampled_from(["b", "NOT b", "s LIKE 'a%'", "s NOT LIKE '%b'"]),
)
FILTERS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: " AND ".join(f"({x})" for x in xs)),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: " OR ".join(f"({x})" for x in xs)),
        inner.map(lambda x: f"NOT ({x})"),
    ),
    max_leaves=3,
)
ROW = rows_of(VALUES)


@dataclass(frozen=True)
class Case:
    rows: list[dict[str, object]]
    cuts: list[int]  # append boundaries
    target_file_size: int
    row_group_bytes: int
    filters: list[str]
    inline_limit: int = 0  # files of at most this many bytes are inlined in the log (0: none)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    rows = draw(st.lists(ROW, min_size=1, max_size=20))
    return Case(
        rows,
        sorted(set(draw(st.lists(st.integers(0, len(rows)), max_size=3)))),
        draw(st.sampled_from([1, 4000, 1 << 20])),
        draw(st.sampled_from([1, 600, 64 << 20])),
        draw(st.lists(FILTERS, min_size=1, max_size=2)),
        inline_limit=draw(st.sampled_from([0, 0, 2600, 65536])),  # 2600: some files of 2-3 kB
    )


def spark_keys(df) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(row[0] for row in df.select("k").collect())


#: One file holding 5.0 and NaN (footer min = max = 5 without NaN): ``f <> 5`` keeps NaN.
NAN_CASE = Case(
    rows=[{**dict.fromkeys(VALUES), "f": f} for f in (5.0, NAN, 7.0)],
    cuts=[2],
    target_file_size=1 << 20,
    row_group_bytes=64 << 20,
    filters=["f <> 5", "NOT (f = 5)"],
)

#: Every file skipped by the pushed filter: Spark hands the reader a partition with no value.
ALL_SKIPPED = Case(
    rows=[dict.fromkeys(VALUES)],
    cuts=[],
    target_file_size=1 << 20,
    row_group_bytes=64 << 20,
    filters=["DATE '1970-01-01' = d"],
)

#: One DataFrame read with two filters in turn: Spark 4.3 reused the first pushdown's plan.
REUSED = Case(
    rows=[dict.fromkeys(VALUES) for _ in range(3)] + [{**dict.fromkeys(VALUES), "i32": -(2**31)}],
    cuts=[],
    target_file_size=1,
    row_group_bytes=1,
    filters=["DATE '1970-01-01' = d", "(DATE '1970-01-01' = d) OR (-5 <> i32)"],
)


@settings(
    max_examples=int(os.environ.get("MERE_SPARK_DIFF_EXAMPLES", "6")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
@example(case=NAN_CASE)
@example(case=ALL_SKIPPED)
@example(case=REUSED)
@example(case=dataclasses.replace(NAN_CASE, inline_limit=65536))  # NaN rows inlined
def test_spark_reads_agree_with_duckdb_on_any_layout(spark, case: Case) -> None:
    data = make_table(case.rows, SCHEMA)
    con = duckdb.connect()
    con.register("t", data)
    with tempfile.TemporaryDirectory() as root, row_group_bytes(case.row_group_bytes):
        db = mere.connect(root, target_file_size=case.target_file_size)
        db.create_table("t", SCHEMA, partition_by=["p"])
        if case.inline_limit:
            db.set_properties({"inlineLimit": str(case.inline_limit)})
        append_in_slices(db.table("t"), data, case.cuts)
        errors: list[str] = []
        reads = {
            method: mere.spark.read(spark, root, "t", method=method)
            for method in ("datasource", "native")
        }
        for sql in case.filters:
            expected = sorted(r[0] for r in con.execute(f"SELECT k FROM t WHERE {sql}").fetchall())
            for method, df in reads.items():
                got = spark_keys(df.where(sql))
                if got != expected:
                    errors.append(f"{method} .where: {got} != DuckDB's {expected} for {sql!r}")
                pushed = spark_keys(mere.spark.read(spark, root, "t", method=method, filter=sql))
                if pushed != expected:
                    errors.append(f"{method} filter=: {pushed} != DuckDB's {expected} for {sql!r}")
        db.close()
    assert not errors, "\n".join(errors)
