"""SQL over local tables with inlined data files (docs/format.md §2.5, issue 17).

DuckDB's own Parquet reader keeps reading the stored files; the inlined ones
(bytes in the log, no file to name) are one more ``UNION ALL`` branch over a
pyarrow dataset registered beside the view. Every query must return what
``scan()`` and DuckDB over the scanned rows return.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from sql_helpers import rows
from test_sql_queries import FILTERS, ODD, odd_rows

import mere
from mere.sql.errors import UnsupportedSQL
from mere.sql.native import native_view

SCHEMA = pa.schema([f for f in ODD if f.name != "f"])  # floats take the dataset path anyway


def kinds(db: mere.Database, name: str) -> tuple[int, int]:
    """(stored files, inlined files) of the table's latest version."""
    files = db.snapshot().table(name).files
    inlined = sum(1 for f in files if f.inline is not None)
    return len(files) - inlined, inlined


def agree(db: mere.Database, name: str, filters: list[str]) -> None:
    """SELECT * and every filter give what DuckDB gives over the table's scan."""
    expected = db.table(name).scan()
    got = db.sql(f"SELECT * FROM {name}")
    assert got.schema == db.sql(f"SELECT * FROM {name} WHERE FALSE").schema
    assert got.schema.names == expected.schema.names
    assert rows(got) == rows(expected)
    reference = duckdb.connect()
    reference.register(name, expected)
    for where in filters:
        query = f"SELECT * FROM {name} WHERE {where}"
        assert rows(db.sql(query)) == rows(reference.sql(query).to_arrow_table()), where


@pytest.mark.parametrize("partition_by", [[], ["p"], ["b"]])
def test_stored_files_stay_on_duckdbs_reader_beside_inlined_ones(
    tmp_path: Path, partition_by: list[str]
) -> None:
    db = mere.connect(tmp_path / "db")
    db.create_table("odd", SCHEMA, partition_by=partition_by)
    db.table("odd").append(odd_rows(0, 40, 0).drop_columns(["f"]))
    db.set_properties({"inlineLimit": "65536"})
    for seed in (1, 2, 3):
        db.table("odd").append(odd_rows(seed * 100, 15, seed).drop_columns(["f"]))
    stored, inlined = kinds(db, "odd")
    assert stored >= 1 and inlined >= 3
    snap = db.snapshot().table("odd")
    assert native_view(db.store, snap.meta, snap.files) is None  # no name for the dataset
    view = native_view(db.store, snap.meta, snap.files, "inl")
    assert view is not None and "read_parquet" in view and 'FROM "inl"' in view
    agree(db, "odd", [w for w in FILTERS if not w.startswith(("f ", "NOT (f", "f =", "f I"))])
    counted = db.sql("SELECT count(*) AS n, count(DISTINCT id) AS k FROM odd WHERE id >= 100")
    assert counted.to_pylist() == [{"n": 45, "k": 45}]


def test_only_inlined_files_renamed_widened_and_added_columns(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "db")
    db.sql("CREATE TABLE t (k INTEGER, v DECIMAL(5, 1), s VARCHAR) PARTITIONED BY (s)")
    db.set_properties({"inlineLimit": "3000"})
    db.sql("INSERT INTO t VALUES (1, 1.5, 'a'), (2, NULL, NULL)")
    assert kinds(db, "t") == (0, 2)
    agree(db, "t", ["k = 1", "s IS NULL", "v > 1"])
    db.sql("ALTER TABLE t RENAME COLUMN v TO amount")
    db.sql("ALTER TABLE t ALTER COLUMN k TYPE BIGINT")
    db.sql("ALTER TABLE t ALTER COLUMN amount TYPE DECIMAL(12, 1)")
    db.sql("INSERT INTO t SELECT range + 1099511627776, range / 2, 'b' FROM range(3000)")
    db.sql("INSERT INTO t VALUES (3, 12345678901.5, 'a')")
    stored, inlined = kinds(db, "t")
    assert stored == 1 and inlined == 3
    snap = db.snapshot().table("t")
    assert native_view(db.store, snap.meta, snap.files, "inl") is not None
    agree(db, "t", ["k < 10", "amount > 1000", "s = 'a'", "amount IS NULL", "k > 1099511627776"])
    assert db.sql("SELECT sum(k) AS s FROM t WHERE s = 'a'").to_pylist() == [{"s": 4}]
    db.sql("ALTER TABLE t ADD COLUMN extra INT")  # the stored file lacks it: a dataset
    db.sql("INSERT INTO t VALUES (4, NULL, 'c', 7)")
    snap = db.snapshot().table("t")
    assert native_view(db.store, snap.meta, snap.files, "inl") is None
    agree(db, "t", ["extra = 7", "extra IS NULL AND k < 5"])


def test_a_transaction_reads_its_own_inlined_writes_and_dml_rewrites_them(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "db")
    db.sql("CREATE TABLE t (k BIGINT, s VARCHAR)")
    db.sql("INSERT INTO t SELECT range, 'x' FROM range(5000)")  # stored
    db.set_properties({"inlineLimit": "65536"})
    with db.transaction() as tx:
        tx.sql("INSERT INTO t VALUES (-1, 'mine')")
        assert tx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 5001}]
        assert tx.sql("SELECT k FROM t WHERE s = 'mine'").to_pylist() == [{"k": -1}]
    db.sql("UPDATE t SET s = 'changed' WHERE k IN (-1, 4999)")
    db.sql("DELETE FROM t WHERE k < 4000")
    assert db.sql("SELECT k, s FROM t WHERE s = 'changed' ORDER BY k").to_pylist() == [
        {"k": 4999, "s": "changed"}
    ]
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 1000}]
    agree(db, "t", ["s = 'x'", "k > 4990"])


@pytest.mark.parametrize("inline_limit", [None, 65536])
def test_half_float_columns_are_written_and_queried_as_real(
    tmp_path: Path, inline_limit: int | None
) -> None:
    """DuckDB reads no Arrow half float: SQL sees the column as REAL (exact)."""
    db = mere.connect(tmp_path / "db", inline_limit=inline_limit)
    db.create_table("h", pa.schema([("id", pa.int64()), ("x", pa.float16())]))
    halves = pa.array([1.5, None, -2.25], pa.float32()).cast(pa.float16())
    db.table("h").append(pa.table({"id": [1, 2, 3], "x": halves}))
    assert db.table("h").scan(filter="x > 0").column("id").to_pylist() == [1]
    got = db.sql("SELECT sum(x) AS s, count(x) AS n, max(id) AS m FROM h").to_pylist()
    assert got == [{"s": -0.75, "n": 2, "m": 3}]
    assert db.sql("SELECT x FROM h WHERE id = 3").schema.field("x").type == pa.float32()


@pytest.mark.parametrize("inline_limit", [None, 65536])
def test_wide_decimals_are_queried_or_refused_clearly(
    tmp_path: Path, inline_limit: int | None
) -> None:
    """DuckDB reads no Arrow DECIMAL256: up to 38 digits SQL sees a DECIMAL128 (exact);
    wider, a query of the table is an UnsupportedSQL naming the column, not DuckDB's error."""
    db = mere.connect(tmp_path / "db", inline_limit=inline_limit)
    values = [Decimal("123456789012345678901234567890.12"), None, Decimal("-0.50")]
    db.create_table("n", pa.schema([("id", pa.int64()), ("x", pa.decimal256(38, 2))]))
    db.table("n").append(pa.table({"id": [1, 2, 3], "x": pa.array(values, pa.decimal256(38, 2))}))
    got = db.sql("SELECT id, x FROM n WHERE x < 0 OR x > 1 ORDER BY id").to_pylist()
    assert got == [{"id": 1, "x": values[0]}, {"id": 3, "x": values[2]}]
    assert db.sql("SELECT count(x) AS c FROM n").to_pylist() == [{"c": 2}]

    db.create_table("w", pa.schema([("id", pa.int64()), ("x", pa.decimal256(40, 2))]))
    wide = pa.array([Decimal("12345678901234567890123456789012345678.12")], pa.decimal256(40, 2))
    db.table("w").append(pa.table({"id": [1], "x": wide}))
    with pytest.raises(UnsupportedSQL, match=r"column 'x' of table 'w' is DECIMAL\(40, 2\)"):
        db.sql("SELECT id FROM w")
    assert db.table("w").scan(filter="x > 0").column("id").to_pylist() == [1]


@pytest.mark.parametrize("column", [pa.string(), pa.float64()], ids=["duckdb-reader", "dataset"])
def test_a_query_over_a_missing_or_damaged_file_names_it(
    tmp_path: Path, column: pa.DataType
) -> None:
    """As scans and DML do: DataFileMissing / CorruptDataFile naming the file, not
    DuckDB's I/O error."""
    db = mere.connect(tmp_path / "db")
    db.create_table("t", pa.schema([("id", pa.int64()), ("v", column)]))
    db.table("t").append(pa.table({"id": [1], "v": pa.array([None], column)}))
    db.table("t").append(pa.table({"id": [2], "v": pa.array([None], column)}))
    first, second = sorted(db.snapshot().table("t").files, key=lambda f: f.modification_time)
    table_dir = tmp_path / "db" / db.latest_state().table_by_name("t").meta.prefix  # type: ignore[union-attr]
    (table_dir / second.path).write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(mere.CorruptDataFile, match=second.path):
        db.sql("SELECT count(*) FROM t")
    (table_dir / first.path).unlink()
    with pytest.raises(mere.DataFileMissing, match=first.path):
        db.sql("SELECT count(*) FROM t")
