"""Column types DuckDB cannot take from Arrow as they are: SQL reads them as types that
hold every value exactly, or fails; never a raw DuckDB error, never a changed value."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

import mere
from mere.sql import SQLError, UnsupportedSQL


def test_half_floats_and_narrow_wide_decimals_at_any_depth(db: mere.Database) -> None:
    """INSERT into them, and SELECT of a list of half floats, raised DuckDB's
    NotImplementedException."""
    db.create_table("h", pa.schema([("id", pa.int64()), ("v", pa.float16())]))
    db.create_table("d", pa.schema([("id", pa.int64()), ("v", pa.decimal256(20, 2))]))
    nested = pa.list_(pa.struct([("x", pa.float16())]))
    db.create_table("l", pa.schema([("id", pa.int64()), ("v", nested)]))
    db.sql("INSERT INTO h VALUES (1, 1.5), (2, NULL)")
    db.sql("INSERT INTO d VALUES (1, 2.50), (2, -123456789012345678.99)")
    db.sql("INSERT INTO l VALUES (1, [{'x': 0.25}, NULL]), (2, [])")
    assert db.table("h").scan().sort_by("id").column("v").to_pylist() == [1.5, None]
    assert db.table("d").scan().sort_by("id").column("v").to_pylist() == [
        Decimal("2.50"),
        Decimal("-123456789012345678.99"),
    ]
    assert db.sql("SELECT v FROM l ORDER BY id").column("v").to_pylist() == [
        [{"x": 0.25}, None],
        [],
    ]
    assert db.sql("SELECT sum(v) AS s FROM d").column("s").to_pylist() == [
        Decimal("-123456789012345676.49")
    ]


def test_nanosecond_durations_are_exact_or_an_error(db: mere.Database) -> None:
    """DuckDB's INTERVAL holds microseconds: 1 ns read as 0 and a filter lost the row."""
    db.create_table("t", pa.schema([("id", pa.int64()), ("v", pa.duration("ns"))]))
    db.table("t").append(
        pa.table({"id": [1, 2], "v": pa.array([1_000, 1_500_000_000], pa.duration("ns"))})
    )
    got = db.sql("SELECT count(*) AS n FROM t WHERE v > INTERVAL 0 SECOND").to_pylist()
    assert got == [{"n": 2}]
    db.table("t").append(pa.table({"id": [3], "v": pa.array([1], pa.duration("ns"))}))
    with pytest.raises(SQLError, match="would lose data"):
        db.sql("SELECT * FROM t WHERE v > INTERVAL 0 SECOND")


@pytest.mark.parametrize("unit", ["s", "us", "ns"])
def test_insert_into_a_table_with_a_duration_is_refused_clearly(
    db: mere.Database, unit: str
) -> None:
    """DuckDB hands a duration back as an INTERVAL, which does not cast to a duration: a raw
    ArrowNotImplementedError (or a SchemaMismatch about types the user never wrote)."""
    db.create_table("t", pa.schema([("i", pa.int64()), ("d", pa.duration(unit))]))
    v = db.version
    with pytest.raises(UnsupportedSQL, match="duration"):
        db.sql("INSERT INTO t (i) VALUES (1)")
    assert db.version == v
    db.table("t").append(pa.table({"i": [1], "d": pa.array([5], pa.duration(unit))}))
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 1}]
