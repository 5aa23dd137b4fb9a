"""Casts and typed literals in mere's own engine, held to DuckDB's answers.

A filter, ``delete`` and ``update`` run in mere's engine; a SQL ``SELECT`` runs
in DuckDB. The same text must pick the same rows and store the same values in
both, or mere must refuse it with a clear error: an answer that differs is
never given. Each case below is checked against DuckDB over the same rows.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import mere
from mere.errors import InvalidExpression, SchemaMismatch

UTC = dt.UTC
MOMENTS = [
    dt.datetime(2024, 1, 1, 12, 0, 0),
    dt.datetime(2024, 1, 1, 12, 0, 0, 900000),
    dt.datetime(2024, 1, 1, 12, 0, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59),
]
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "bn": pa.array([b"\x00", b"\\x00", b"\xff", b"aAb"], pa.binary()),
        "s": pa.array(["a", "\\x41", "b", "c"], pa.string()),
        "ts_s": pa.array(MOMENTS[:1] + MOMENTS[2:3] + MOMENTS[2:], pa.timestamp("s")),
        "ts_ms": pa.array(MOMENTS, pa.timestamp("ms")),
        "ts_us": pa.array(
            [m + dt.timedelta(microseconds=500) for m in MOMENTS], pa.timestamp("us")
        ),
        "ts_tz": pa.array([m.replace(tzinfo=UTC) for m in MOMENTS], pa.timestamp("us", "UTC")),
        "tz_s": pa.array(
            [m.replace(tzinfo=UTC, microsecond=0) for m in MOMENTS], pa.timestamp("s", "UTC")
        ),
        "big": pa.array([2**53 + 1, 1, -(2**62), 0], pa.int64()),
        "u64": pa.array([2**64 - 1, 0, 1, 2**63], pa.uint64()),
        "i32": pa.array([16777217, 1, -16777217, 0], pa.int32()),
        "dec": pa.array(
            [Decimal("1.005"), Decimal("-0.1"), Decimal("2.675"), None], pa.decimal128(5, 3)
        ),
    }
)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> mere.Table:
    db = mere.connect(tmp_path_factory.mktemp("casts") / "db")
    db.create_table("t", ROWS.schema)
    db.table("t").append(ROWS)
    return db.table("t")


def duckdb_ids(where: str) -> list[int]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("t", ROWS)
    return sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())


SAME_AS_DUCKDB = [
    # A BLOB literal's text reads \xHH as one byte, as DuckDB reads it.
    "bn = '\\x00'::BLOB",
    "bn = '\\xFF'::BLOB",
    "bn = 'a\\x41b'::BLOB",
    "bn = '\\x00'",
    "bn > 'a'::BLOB",
    "bn IN ('\\x00', '\\xff')",
    # Text compared with a coarser timestamp column is read in the column's unit,
    # rounding half away from zero, as DuckDB casts it.
    "ts_ms = '2024-01-01 12:00:00.9001'",
    "ts_ms < '2024-01-01 12:00:00.9001'",
    "ts_ms = '2024-01-01 12:00:00.8995'",
    "ts_s = '2024-01-01 12:00:00.5'",
    "ts_s = '2024-01-01 12:00:00.4'",
    "ts_s = '1969-12-31 23:59:59.5'",
    "ts_s >= '2024-01-01 12:00:00.5'",
    # DuckDB has TIMESTAMPTZ in microseconds only: text is not rounded for a zoned column.
    "tz_s = '2024-01-01 12:00:00.5'",
    "tz_s = '2024-01-01 12:00:00.5+00'",
    "tz_s < '2024-01-01 12:00:00.5'",
    # A typed TIMESTAMP literal keeps its microseconds: the column is widened instead.
    "ts_s = TIMESTAMP '2024-01-01 12:00:00.5'",
    "ts_ms = TIMESTAMP '2024-01-01 12:00:00.9001'",
    # A cast to a coarser timestamp rounds half away from zero.
    "CAST(ts_us AS TIMESTAMP_S) = TIMESTAMP '2024-01-01 12:00:01'",
    "CAST(ts_us AS TIMESTAMP_MS) = TIMESTAMP '2024-01-01 12:00:00.901'",
    "CAST(ts_ms AS TIMESTAMP_S) = TIMESTAMP '2024-01-01 12:00:01'",
    # Integers past 2^53 (2^24 for REAL) become the nearest float.
    "CAST(big AS DOUBLE) > 0",
    "CAST(u64 AS DOUBLE) > 1e19",
    "CAST(i32 AS REAL) > 16777216",
    "CAST(big AS DOUBLE) = 9007199254740992e0",
    # A decimal becomes the nearest float (Arrow's own cast can miss it by one ulp).
    "CAST(dec AS DOUBLE) = 1.005e0",
    "CAST(dec AS DOUBLE) IN (-0.1e0, 2.675e0)",
    "dec = 1.005e0",
    "dec < 2.675e0",
    "CAST(dec AS REAL) = CAST(1.005e0 AS REAL)",
    # Text of a timestamp is DuckDB's: no trailing zeros in the fraction.
    "CAST(ts_us AS VARCHAR) = '2024-01-01 12:00:00.9005'",
    "CAST(ts_ms AS VARCHAR) = '2024-01-01 12:00:00.9'",
    "CAST(ts_ms AS VARCHAR) = '2024-01-01 12:00:01'",
    "CAST(ts_s AS VARCHAR) LIKE '%12:00:01'",
    "CAST(ts_tz AS VARCHAR) = '2024-01-01 12:00:00.9+00'",
    "CAST(ts_tz AS VARCHAR) = '1969-12-31 23:59:59+00'",
    "CAST(big AS VARCHAR) = '9007199254740993'",
]


@pytest.mark.parametrize("where", SAME_AS_DUCKDB)
def test_filter_picks_the_rows_duckdb_picks(table: mere.Table, where: str) -> None:
    expected = duckdb_ids(where)
    assert sorted(table.scan(filter=where).column("id").to_pylist()) == expected


@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        # DuckDB writes bytes as \xHH escapes and reads them back: Arrow does neither.
        ("CAST(s AS BLOB) = 'a'::BLOB", "BLOB"),
        ("CAST(bn AS VARCHAR) = 'a'", "BLOB"),
        # Float text differs from DuckDB's (1e+10 against 10000000000.0).
        ("CAST(CAST(big AS DOUBLE) AS VARCHAR) = '1.0'", "DOUBLE"),
        ("'\\x4'::BLOB = bn", "escape"),
        ("bn = 'é'::BLOB", "ASCII"),
    ],
)
def test_casts_duckdb_answers_otherwise_are_refused(
    table: mere.Table, where: str, fragment: str
) -> None:
    with pytest.raises(InvalidExpression, match=fragment):
        table.scan(filter=where)
    with pytest.raises(InvalidExpression, match=fragment):
        table.delete(where)
    assert table.scan().num_rows == ROWS.num_rows


def test_delete_removes_what_the_same_select_picks(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "db")
    db.create_table("t", ROWS.schema)
    db.table("t").append(ROWS)
    where = "bn = '\\x00'::BLOB"
    picked = db.sql(f"SELECT id FROM t WHERE {where}").column("id").to_pylist()
    assert db.sql(f"DELETE FROM t WHERE {where}").column("count").to_pylist() == [len(picked)]
    left = set(db.table("t").scan().column("id").to_pylist())
    assert left == {1, 2, 3, 4} - set(picked)


DECIMALS = pa.schema(
    [
        ("id", pa.int64()),
        ("d", pa.decimal128(5, 2)),
        ("f", pa.float32()),
        ("i", pa.int8()),
        ("ts", pa.timestamp("s")),
    ]
)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("d", "1.005"),
        ("d", "-1.005"),
        ("d", "1.015"),
        ("d", "1.239"),
        ("d", "CAST(1.005 AS DOUBLE)"),
        ("d", "2.675e0"),
        ("i", "1.5"),
        ("i", "-2.5"),
        ("i", "2.5e0"),
        ("ts", "'2024-01-01 12:00:00.5'"),
        ("ts", "TIMESTAMP '2024-01-01 12:00:00.4'"),
    ],
)
def test_update_stores_what_duckdb_stores(tmp_path: Path, column: str, value: str) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id BIGINT, d DECIMAL(5, 2), f REAL, i TINYINT, ts TIMESTAMP_S)")
    con.execute("INSERT INTO t VALUES (1, 0, 0, 0, TIMESTAMP '2000-01-01')")
    con.execute(f"UPDATE t SET {column} = {value}")
    expected = con.execute(f"SELECT {column} FROM t").fetchall()[0][0]

    db = mere.connect(tmp_path / "db")
    db.create_table("t", DECIMALS)
    row = {"id": 1, "d": Decimal(0), "f": 0.0, "i": 0, "ts": dt.datetime(2000, 1, 1)}
    db.table("t").append([row])
    db.table("t").update(None, {column: value})
    assert db.table("t").scan().column(column).to_pylist() == [expected]
    db.sql(f"UPDATE t SET {column} = {value}")  # the same through SQL
    assert db.table("t").scan().column(column).to_pylist() == [expected]


def test_update_refuses_a_float_beyond_real(tmp_path: Path) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (f REAL)")
    con.execute("INSERT INTO t VALUES (0)")
    with pytest.raises(duckdb.ConversionException, match="out of range"):
        con.execute("UPDATE t SET f = 1e300")

    db = mere.connect(tmp_path / "db")
    db.create_table("t", DECIMALS)
    row = {"id": 1, "d": Decimal(0), "f": 0.0, "i": 0, "ts": dt.datetime(2000, 1, 1)}
    db.table("t").append([row])
    with pytest.raises(SchemaMismatch, match="out of range"):
        db.table("t").update(None, {"f": "1e300"})
    assert db.table("t").scan().column("f").to_pylist() == [0.0]
    db.table("t").update(None, {"f": "CAST('inf' AS DOUBLE)"})  # infinity itself is a value
    assert db.table("t").scan().column("f").to_pylist() == [float("inf")]


TEXTS = pa.schema(
    [("id", pa.int64()), ("bn", pa.binary()), ("s", pa.string()), ("f", pa.float64())]
)


@pytest.mark.parametrize(
    ("column", "value"),
    [("bn", "'a\\x00'"), ("bn", "'\\xFF'"), ("bn", "s"), ("bn", "'plain'")],
)
def test_update_stores_blob_text_as_duckdb_reads_it(
    tmp_path: Path, column: str, value: str
) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id BIGINT, bn BLOB, s VARCHAR, f DOUBLE)")
    con.execute("INSERT INTO t VALUES (1, 'x', 'a\\x00', 1e10)")
    con.execute(f"UPDATE t SET {column} = {value}")
    expected = con.execute(f"SELECT {column} FROM t").fetchall()[0][0]

    db = mere.connect(tmp_path / "db")
    db.create_table("t", TEXTS)
    db.table("t").append([{"id": 1, "bn": b"x", "s": "a\\x00", "f": 1e10}])
    db.sql(f"UPDATE t SET {column} = {value}")
    assert db.table("t").scan().column(column).to_pylist() == [expected]
    if value.startswith("'"):  # the same text in a filter finds what was stored
        assert db.table("t").scan(filter=f"bn = {value}").num_rows == 1


@pytest.mark.parametrize(("column", "value"), [("s", "f"), ("s", "bn"), ("bn", "'\\x4'")])
def test_update_refuses_text_duckdb_would_write_otherwise(
    tmp_path: Path, column: str, value: str
) -> None:
    db = mere.connect(tmp_path / "db")
    db.create_table("t", TEXTS)
    db.table("t").append([{"id": 1, "bn": b"x", "s": "y", "f": 1e10}])
    with pytest.raises(SchemaMismatch, match=column):
        db.table("t").update(None, {column: value})
    assert db.table("t").scan().to_pylist() == [{"id": 1, "bn": b"x", "s": "y", "f": 1e10}]
