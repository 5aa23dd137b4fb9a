"""``mere.spark.write`` with Spark's own Parquet writer (``method="native"``)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from spark_helpers import data_files

import mere
import mere.maintain
import mere.spark
from mere.errors import ConstraintViolation
from mere.spark import _core
from mere.spark._native_write import TIMESTAMP_CONF
from mere.storage.local import TEMP_PREFIX

UTC = dt.UTC

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("small", ByteType()),
        StructField("flag", BooleanType()),
        StructField("name", StringType()),
        StructField("day", DateType()),
        StructField("at", TimestampType()),
        StructField("local", TimestampNTZType()),
        StructField("price", DecimalType(12, 3)),
        StructField("score", DoubleType()),
        StructField("n", IntegerType()),
    ]
)

#: Partition values that Spark's and mere's path escaping and text formats could garble.
NAMES = ["", None, "a/b:c=d%", "plain", "é ü", "#{x}", "v", "__HIVE_DEFAULT_PARTITION__"]


def _rows(count: int) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(count):
        rows.append(
            (
                i,
                (i % 200) - 100,
                None if i % 11 == 0 else i % 2 == 0,
                NAMES[i % len(NAMES)],
                dt.date(1969, 12, 25) + dt.timedelta(days=i % 9),
                dt.datetime(1960, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=i * 1_000_003),
                dt.datetime(2024, 2, 29, 23, 59) + dt.timedelta(microseconds=i),
                None if i % 13 == 0 else Decimal(i) / 1000 - 5,
                float("nan") if i == 7 else i / 3,
                None if i % 5 == 0 else -i,
            )
        )
    return rows


def _log_files(uri: str, table: str) -> list[tuple[Any, ...]]:
    """What the log records of each live file, except its name and size."""
    snapshot = mere.connect(uri).snapshot()
    out = []
    for add in snapshot.table(table).files:
        stats = add.stats or {}
        out.append(
            (
                sorted(add.partition_values.items()),
                add.rows,
                sorted(stats.get("nullCount", {}).items()),
                sorted(stats.get("minValues", {}).items()),
                sorted(stats.get("maxValues", {}).items()),
            )
        )
    return sorted(out, key=repr)


def _without_floats(files: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [
        (p, r, n, [kv for kv in lo if kv[0] != "score"], [kv for kv in hi if kv[0] != "score"])
        for p, r, n, lo, hi in files
    ]


@pytest.mark.parametrize("partition_by", [None, ["name"], ["day", "flag"], ["at", "price", "n"]])
def test_native_files_read_back_and_record_what_the_arrow_path_records(spark, uri, partition_by):
    df = spark.createDataFrame(_rows(300), SCHEMA).repartition(2, "id")
    db = mere.connect(uri)
    with db.transaction() as tx:
        mere.spark.write(tx, df, "native", partition_by=partition_by, method="native")
        mere.spark.write(tx, df, "arrow", partition_by=partition_by, method="arrow")
    native = db.table("native").scan().sort_by("id")
    arrow = db.table("arrow").scan().sort_by("id")
    assert native.schema == arrow.schema
    for name in native.column_names:  # repr: NaN equals NaN
        assert list(map(repr, native.column(name).to_pylist())) == list(
            map(repr, arrow.column(name).to_pylist())
        ), name
    assert native.num_rows == 300
    # Same tasks, same partitions: the same files, with the same log records
    # (floating-point min/max aside, which native writes leave out).
    assert _without_floats(_log_files(uri, "native")) == _without_floats(_log_files(uri, "arrow"))
    for _, _, _, lo, hi in _log_files(uri, "native"):
        assert "score" not in dict(lo) and "score" not in dict(hi)
    # The Spark reader sees the same rows through the native read.
    assert mere.spark.read(spark, uri, "native").count() == 300


def test_the_files_are_spark_parquet_with_microsecond_timestamps(spark, uri):
    spark.conf.unset(TIMESTAMP_CONF)
    df = spark.createDataFrame(_rows(20), SCHEMA)
    with mere.connect(uri).transaction() as tx:
        mere.spark.write(tx, df, "t", partition_by=["name"])  # auto: native applies
    files = data_files(uri)
    assert files
    for path in files:
        md = pq.read_metadata(path)
        assert "parquet-mr" in md.created_by
        assert pq.read_schema(path).field("at").type == pa.timestamp("us", tz="UTC")
        assert path.name.startswith("part-") and path.parent.name.startswith("name=")
    assert spark.conf.get(TIMESTAMP_CONF, None) is None  # the session's setting is back
    assert not list(Path(uri).rglob(f"{TEMP_PREFIX}*"))  # no staging directory left


def test_partition_directories_use_mere_escaping(spark, uri):
    df = spark.createDataFrame(_rows(len(NAMES)), SCHEMA)
    with mere.connect(uri).transaction() as tx:
        mere.spark.write(tx, df, "t", partition_by=["name"], method="native")
    table = mere.connect(uri).snapshot().table("t")
    values = sorted(
        (a.partition_values["name"] is None, a.partition_values["name"] or "") for a in table.files
    )
    assert values == sorted((n is None, n or "") for n in NAMES)
    dirs = {Path(a.path).parent.name for a in table.files}
    assert "name=a%2Fb%3Ac%3Dd%25" in dirs
    assert mere.connect(uri).table("t").scan(filter="name = ''").num_rows == 1
    assert mere.connect(uri).table("t").scan(filter="name IS NULL").num_rows == 1


def test_auto_falls_back_to_arrow_where_native_does_not_apply(spark, uri):
    db = mere.connect(uri)
    db.create_table(
        "t", pa.schema([pa.field("id", pa.int32()), pa.field("tags", pa.list_(pa.string()))])
    )
    df = spark.createDataFrame([(1, ["a"]), (2, None)], "id long, tags array<string>")
    with pytest.raises(ValueError, match="cannot use Spark's Parquet writer"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", method="native")
    assert db.table("t").scan().num_rows == 0
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t") == 2  # auto: the arrow path casts long -> int
    for path in data_files(uri):
        assert "parquet-cpp-arrow" in pq.read_metadata(path).created_by


def test_a_refused_native_write_creates_no_table(spark, uri):
    db = mere.connect(uri)
    df = spark.createDataFrame([(1, {"a": 1})], "id long, m map<string, int>")
    with db.transaction() as tx:
        with pytest.raises(ValueError, match="nested"):
            mere.spark.write(tx, df, "t", method="native")
        assert not tx.has_table("t")
    assert "t" not in db.tables()


def test_an_unknown_method_is_refused(spark, uri):
    df = spark.createDataFrame([(1,)], "id long")
    with mere.connect(uri).transaction() as tx:
        with pytest.raises(ValueError, match="method must be"):
            mere.spark.write(tx, df, "t", method="jvm")  # type: ignore[arg-type]
        assert not tx.has_table("t")


def _nothing_left(uri: str) -> None:
    assert data_files(uri) == []
    assert not list(Path(uri).rglob(f"{TEMP_PREFIX}*"))


def test_nulls_in_a_not_null_column_fail_and_leave_nothing(spark, uri):
    db = mere.connect(uri)
    db.create_table(
        "t", pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    )
    df = spark.createDataFrame([(1, 1), (None, 2)], "id long, v long")
    with pytest.raises(ConstraintViolation, match="NOT NULL column 'id'"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", method="native")
    assert db.table("t").scan().num_rows == 0
    _nothing_left(uri)


def test_a_null_partition_value_in_a_not_null_column_fails(spark, uri):
    db = mere.connect(uri)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", pa.string(), nullable=False)])
    db.create_table("t", schema, partition_by=["p"])
    df = spark.createDataFrame([(1, "a"), (2, None)], "id long, p string")
    with pytest.raises(ConstraintViolation, match="NOT NULL column 'p'"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", method="native")
    _nothing_left(uri)


def test_check_constraints_are_enforced(spark, uri):
    db = mere.connect(uri)
    db.create_table(
        "t",
        pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())]),
        properties={"mere.check.positive": "v > 0"},
    )
    good = spark.createDataFrame([(1, 5), (2, None)], "id long, v long")  # NULL passes
    with db.transaction() as tx:
        mere.spark.write(tx, good, "t", method="native")
    bad = spark.createDataFrame([(3, 5), (4, -1), (5, 0)], "id long, v long")
    with pytest.raises(ConstraintViolation, match=r"2 row\(s\).*positive"):
        with db.transaction() as tx:
            mere.spark.write(tx, bad, "t", method="native")
    assert sorted(db.table("t").scan().column("id").to_pylist()) == [1, 2]
    assert len(data_files(uri)) == len(db.snapshot().table("t").files)


def test_replace_where_with_the_native_writer(spark, uri):
    db = mere.connect(uri)
    df = spark.createDataFrame([(i, "a" if i < 5 else "b") for i in range(10)], "id long, p string")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", partition_by=["p"], method="native")
    replacement = spark.createDataFrame([(100, "a")], "id long, p string")
    with db.transaction() as tx:
        mere.spark.write(
            tx, replacement, "t", mode="overwrite", replace_where="p = 'a'", method="native"
        )
    assert sorted(db.table("t").scan().column("id").to_pylist()) == [5, 6, 7, 8, 9, 100]
    files = data_files(uri)
    outside = spark.createDataFrame([(200, "a"), (201, "c")], "id long, p string")
    with pytest.raises(ConstraintViolation, match="replaceWhere"):
        with db.transaction() as tx:
            mere.spark.write(
                tx, outside, "t", mode="overwrite", replace_where="p = 'a'", method="native"
            )
    assert sorted(db.table("t").scan().column("id").to_pylist()) == [5, 6, 7, 8, 9, 100]
    assert data_files(uri) == files


def test_a_failing_spark_job_leaves_nothing(spark, uri):
    @F.udf("long")
    def explode(x):
        if x == 37:
            raise RuntimeError("boom")
        return x

    df = spark.range(0, 100, 1, 2).select(explode("id").alias("id"))
    db = mere.connect(uri)
    with pytest.raises(Exception, match="boom"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", method="native")
    assert "t" not in db.tables()
    _nothing_left(uri)


def test_staging_leftovers_are_hidden_and_vacuum_sweeps_them(spark, uri):
    db = mere.connect(uri)
    with db.transaction() as tx:
        mere.spark.write(tx, spark.createDataFrame([(1,)], "id long"), "t", method="native")
    meta = _core.table_meta(db.snapshot().table("t"))
    store = db.store
    staging = store.temp_directory(meta.prefix, "spark")  # type: ignore[attr-defined]
    Path(staging, "part-0.parquet").write_bytes(b"x")
    assert all(TEMP_PREFIX not in o.key for o in store.list(""))
    old = 1_000_000_000
    os.utime(Path(staging, "part-0.parquet"), (old, old))
    os.utime(staging, (old, old))
    result = mere.maintain.vacuum(db, dt.timedelta(0), dry_run=True, force=True)
    assert result.temp_files_deleted == 1 and os.path.isdir(staging)
    mere.maintain.vacuum(db, dt.timedelta(0), force=True)
    assert not os.path.exists(staging)
    assert db.table("t").scan().num_rows == 1
