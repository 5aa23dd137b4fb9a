"""Edge cases of Spark writes that extend a table's schema (``schema_mode="merge"``).

Every merge must land whole (new columns, widenings and rows in one commit)
or change nothing, and every reader (the core scan, Spark's Parquet reader
and the ``mere`` data source) must agree on what landed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

import mere
import mere.spark
from mere.errors import ConcurrentMetadataChange, MereError, SchemaMismatch
from mere.spark._write import Method, commit_write, prepare_write

BASE = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int32())])
METHODS = ["native", "arrow"]

Row = dict[str, Any]


def _db(
    uri: str, schema: pa.Schema = BASE, rows: list[Row] | None = None, **kw: Any
) -> mere.Database:
    """A database with table ``t`` of ``schema`` holding ``rows`` (two rows of BASE by default)."""
    db = mere.connect(uri)
    db.create_table("t", schema, **kw)
    db.table("t").append(rows if rows is not None else _base_rows())
    return db


def _base_rows(*new: str) -> list[Row]:
    """The two rows :func:`_db` writes by default, holding NULL in the ``new`` columns."""
    return [{"id": 1, "v": 10, **dict.fromkeys(new)}, {"id": 2, "v": 20, **dict.fromkeys(new)}]


def _sorted(rows: list[Row]) -> list[Row]:
    """Rows in a stable order: by id, then by every value (ids may repeat)."""
    return sorted(rows, key=lambda r: (r["id"], repr(r)))


def _spark_rows(df: DataFrame) -> list[Row]:
    """A DataFrame's rows as dicts (nested rows too), in :func:`_sorted` order."""
    return _sorted([r.asDict(recursive=True) for r in df.collect()])


def _reads(spark: SparkSession, uri: str, version: int | None = None) -> list[list[Row]]:
    """Table ``t`` read by the core, Spark's Parquet reader and the data source (same order)."""
    db = mere.connect(uri)
    core = db.snapshot(version=version).table("t").scan().to_pylist()
    native = mere.spark.read(spark, uri, "t", version, method="native")
    source = mere.spark.read(spark, uri, "t", version, method="datasource")
    return [_sorted(core), _spark_rows(native), _spark_rows(source)]


def _assert_reads(spark: SparkSession, uri: str, expected: list[Row], **kw: Any) -> None:
    """Every reader returns exactly ``expected`` (sorted by id)."""
    core, native, source = _reads(spark, uri, **kw)
    assert core == _sorted(expected)
    assert native == core
    assert source == core


def _unchanged(db: mere.Database, version: int, schema: pa.Schema) -> None:
    """Nothing was committed and the table kept its schema."""
    assert db.version == version
    assert db.table("t").schema.equals(schema, check_metadata=True)


def _files(uri: str) -> set[Path]:
    """Every data file of the database (to check a failed write left none behind)."""
    return set((Path(uri) / "tables").rglob("*.parquet"))


@contextlib.contextmanager
def _changes_nothing(db: mere.Database, uri: str, schema: pa.Schema = BASE) -> Iterator[None]:
    """The block commits nothing, leaves table ``t`` with ``schema`` and no new data file."""
    version, before = db.version, _files(uri)
    yield
    _unchanged(db, version, schema)
    assert _files(uri) == before


def _refused(
    db: mere.Database,
    uri: str,
    df: DataFrame,
    error: type[Exception],
    match: str,
    schema: pa.Schema = BASE,
    **options: Any,
) -> None:
    """A merging write of ``df`` into ``t`` raises ``error``: the caller's transaction keeps
    ``schema``, and nothing is committed or left behind (:func:`_changes_nothing`)."""
    with _changes_nothing(db, uri, schema), db.transaction() as tx:
        with pytest.raises(error, match=match):
            mere.spark.write(tx, df, "t", schema_mode="merge", **options)
        assert tx.table("t").schema == schema  # the transaction is untouched too


# --- partitioned tables and names that differ only in case -----------------------------


@pytest.mark.parametrize("method", METHODS)
def test_merge_into_a_partitioned_table_matches_the_partition_column_ignoring_case(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """``P`` in the DataFrame is the partition column ``p``, not a new column; rows land in their
    partitions."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", pa.string())])
    db = _db(uri, schema, [{"id": 1, "p": "a"}, {"id": 2, "p": "b"}], partition_by=["p"])
    df = spark.createDataFrame([(3, "a", "x"), (4, "c", None)], "id long, P string, note string")
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t", schema_mode="merge", method=method) == 2
    meta = db.table("t")
    assert meta.schema.names == ["id", "p", "note"]
    assert db.version == 3
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "p": "a", "note": None},
            {"id": 2, "p": "b", "note": None},
            {"id": 3, "p": "a", "note": "x"},
            {"id": 4, "p": "c", "note": None},
        ],
    )
    assert db.table("t").scan(filter="p = 'a'").num_rows == 2


@pytest.mark.parametrize("method", METHODS)
def test_a_column_differing_only_in_case_is_the_existing_column(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """Names are unique ignoring case: ``ID`` writes into ``id`` instead of adding a column."""
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, "x")], "ID long, V int, note string")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert db.table("t").schema.names == ["id", "v", "note"]
    _assert_reads(spark, uri, [*_base_rows("note"), {"id": 3, "v": 30, "note": "x"}])


def test_two_columns_equal_ignoring_case_are_refused_and_change_nothing(
    spark: SparkSession, uri: str
) -> None:
    """``note`` and ``NOTE`` cannot both be added: refused on the driver, nothing changed."""
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, "x", "y")], "id long, v int, note string, NOTE string")
    version = db.version
    with db.transaction() as tx:
        with pytest.raises(SchemaMismatch, match="NOTE"):
            mere.spark.write(tx, df, "t", schema_mode="merge")
        assert tx.table("t").schema == BASE
    _unchanged(db, version, BASE)


# --- widenings and what is not one ---------------------------------------------------


WIDENINGS = [
    # (table type, value in the table, DataFrame type, value written, widened Arrow type)
    (pa.int32(), 10, "long", 2**40, pa.int64()),
    (pa.int16(), 10, "int", 2**20, pa.int32()),
    (pa.float32(), 1.5, "double", 0.1, pa.float64()),
    (pa.int32(), 10, "double", 0.25, pa.float64()),
    (
        pa.decimal128(10, 2),
        Decimal("12345678.91"),
        "decimal(12,2)",
        Decimal("9999999999.99"),
        pa.decimal128(12, 2),
    ),
    (
        pa.decimal128(10, 2),
        Decimal("1.25"),
        "decimal(12,3)",
        Decimal("123456789.125"),
        pa.decimal128(12, 3),
    ),
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("old", "old_value", "spark_type", "new_value", "widened"), WIDENINGS)
def test_a_safe_widening_reads_back_everywhere(
    spark: SparkSession,
    uri: str,
    method: Method,
    old: pa.DataType,
    old_value: Any,
    spark_type: str,
    new_value: Any,
    widened: pa.DataType,
) -> None:
    """Old files keep the narrow type: every reader widens them and prunes by their stats."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", old)])
    db = _db(uri, schema, [{"id": 1, "v": old_value}])
    df = spark.createDataFrame([(2, new_value)], f"id long, v {spark_type}")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert db.table("t").schema.field("v").type == widened
    _assert_reads(spark, uri, [{"id": 1, "v": old_value}, {"id": 2, "v": new_value}])
    # statistics of the old files prune under the wider type
    for value, ids in ((old_value, [1]), (new_value, [2])):
        found = db.table("t").scan(filter=f"v = {value}").column("id").to_pylist()
        assert found == ids
        spark_found = mere.spark.read(spark, uri, "t", filter=f"v = {value}").collect()
        assert [r["id"] for r in spark_found] == ids
    # the version before the merge still reads with the narrower type
    assert db.snapshot(version=2).table("t").schema == schema
    before = mere.spark.read(spark, uri, "t", 2).schema["v"].dataType
    assert before == mere.spark._types.spark_type(old)


@pytest.mark.parametrize("method", ["auto", "arrow"])
def test_a_narrower_dataframe_type_leaves_the_table_type(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """long in the table, int in the DataFrame: written as long, the table is not narrowed."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])
    db = _db(uri, schema)
    df = spark.createDataFrame([(3, 30, "x")], "id long, v int, note string")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert db.table("t").schema.field("v").type == pa.int64()
    assert db.table("t").schema.names == ["id", "v", "note"]
    _assert_reads(spark, uri, [*_base_rows("note"), {"id": 3, "v": 30, "note": "x"}])


REFUSED_TYPES = [
    # (table type, DataFrame type, DataFrame value): no value of one fits the other
    (pa.int32(), "string", "7"),
    (pa.string(), "int", 7),
    (pa.int32(), "boolean", True),
    (pa.binary(), "string", "x"),
    (pa.struct([("a", pa.int32())]), "struct<a:int,b:string>", (1, "x")),  # no nested merge
    (pa.list_(pa.int32()), "array<long>", [1]),
]


@pytest.mark.parametrize("method", ["auto", "native", "arrow"])
@pytest.mark.parametrize(("old", "spark_type", "value"), REFUSED_TYPES)
def test_a_type_of_another_family_is_refused_before_the_job(
    spark: SparkSession, uri: str, method: Method, old: pa.DataType, spark_type: str, value: Any
) -> None:
    """No value of one type fits the other: refused on the driver, before any file is written."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", old)])
    db = _db(uri, schema, [{"id": 1, "v": None}])
    df = spark.createDataFrame([(2, value, "x")], f"id long, v {spark_type}, note string")
    _refused(db, uri, df, SchemaMismatch, "'v'", schema, method=method)


LOSSY = [
    # (table type, DataFrame type, a value that does not fit, one that does)
    (pa.int64(), "double", 0.5, 2.0),
    (pa.decimal128(10, 2), "decimal(10,3)", Decimal("1.125"), Decimal("1.120")),
    (pa.decimal128(10, 2), "decimal(12,1)", Decimal("123456789.5"), Decimal("1.5")),
]


@pytest.mark.parametrize(("old", "spark_type", "lossy", "exact"), LOSSY)
def test_a_narrowing_is_no_widening_and_a_lost_value_changes_nothing(
    spark: SparkSession, uri: str, old: pa.DataType, spark_type: str, lossy: Any, exact: Any
) -> None:
    """Not a widening: the table keeps its type; values that fit exactly are written,
    one that would lose data fails the write (on the executors), and the failed write
    leaves the caller's transaction as it was (no new column without its rows)."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", old)])
    db = _db(uri, schema, [{"id": 1, "v": None}])
    bad = spark.createDataFrame([(2, lossy, "x")], f"id long, v {spark_type}, note string")
    _refused(db, uri, bad, Exception, "without loss", schema, method="auto")
    good = spark.createDataFrame([(2, exact, "x")], f"id long, v {spark_type}, note string")
    with db.transaction() as tx:
        mere.spark.write(tx, good, "t", schema_mode="merge", method="auto")
    assert db.table("t").schema.field("v").type == old
    assert db.table("t").scan(filter="id = 2").column("v").to_pylist() != [None]


@pytest.mark.parametrize("method", METHODS)
def test_a_write_that_fails_leaves_the_transaction_without_the_new_column(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """A CHECK constraint fails the job: the caller's transaction must not keep the
    merged schema (committing it would add a column with none of the rows)."""
    db = _db(uri)
    with db.transaction() as tx:
        tx.alter_table("t").add_check("positive", "v > 0")
    version, before = db.version, _files(uri)
    df = spark.createDataFrame([(3, -1, "x")], "id long, v int, note string")
    with db.transaction() as tx:
        with pytest.raises(Exception, match="positive"):
            mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
        assert tx.table("t").schema == BASE
        tx.table("t").append([{"id": 4, "v": 40}])  # the transaction goes on
    assert db.version == version + 1
    assert db.table("t").schema == BASE
    assert len(_files(uri) - before) == 1


@pytest.mark.parametrize("method", METHODS)
def test_a_write_that_fails_leaves_no_new_table_in_the_transaction(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """A failed job must not leave its planned table in the caller's transaction (an empty table
    would be committed)."""
    db = mere.connect(uri)
    with db.transaction() as tx:
        tx.create_table("u", BASE)
    df = spark.createDataFrame([(1, 1)], "id long, v int").where(
        "id = 0 OR raise_error('boom') IS NULL"
    )
    with db.transaction() as tx:
        with pytest.raises(Exception, match="boom"):
            mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
        assert not tx.has_table("t")
    assert not db.snapshot().has_table("t")
    assert _files(uri) == set()


def test_a_timestamp_with_a_time_of_day_is_not_truncated_into_a_date_column(
    spark: SparkSession, uri: str
) -> None:
    """Timestamp to date is no widening; a time of day must not be dropped silently."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.date32())])
    db = _db(uri, schema, [{"id": 1, "v": None}])
    df = spark.createDataFrame(
        [(2, datetime(2024, 1, 2, 3, 4, tzinfo=UTC), "x")], "id long, v timestamp, note string"
    )
    version = db.version
    with pytest.raises(Exception, match="without loss"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", schema_mode="merge", method="arrow")
    _unchanged(db, version, schema)


# --- nested new columns ----------------------------------------------------------------

NESTED = "id long, v int, s struct<a:int,b:string>, arr array<int>, m map<string,int>"


def test_nested_new_columns_go_through_the_arrow_method_with_auto(
    spark: SparkSession, uri: str
) -> None:
    """Spark's Parquet writer takes flat columns only: ``auto`` falls back to the Arrow method."""
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, (1, "x"), [1, 2], {"k": 5})], NESTED)
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method="auto")
    schema = db.table("t").schema
    assert schema.names == ["id", "v", "s", "arr", "m"]
    assert pa.types.is_struct(schema.field("s").type)
    assert pa.types.is_map(schema.field("m").type)
    core, native, source = _reads(spark, uri)
    expected = [
        {"id": 1, "v": 10, "s": None, "arr": None, "m": None},
        {"id": 2, "v": 20, "s": None, "arr": None, "m": None},
        {"id": 3, "v": 30, "s": {"a": 1, "b": "x"}, "arr": [1, 2], "m": {"k": 5}},
    ]
    assert native == expected and source == expected
    assert core[2]["m"] == [("k", 5)]  # Arrow's form of a map


def test_nested_new_columns_refuse_the_native_method_and_change_nothing(
    spark: SparkSession, uri: str
) -> None:
    """``method='native'`` says why it cannot apply, before the schema or transaction changes."""
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, (1, "x"), [1, 2], {"k": 5})], NESTED)
    _refused(db, uri, df, ValueError, "nested", method="native")


# --- renamed columns: a new column under an old physical name ---------------------------


@pytest.mark.parametrize("method", METHODS)
def test_a_new_column_with_a_renamed_columns_old_name(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """``v`` renamed to ``w`` keeps ``v`` in its files: a new ``v`` needs a fresh physical name."""
    db = _db(uri)
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("v", "w")
    renamed = db.version
    df = spark.createDataFrame([(300, 3, 30)], "v long, id long, w int")  # any column order
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    schema = db.table("t").schema
    assert schema.names == ["id", "w", "v"]
    assert mere.schema.physical_name(schema.field("v")) != "v"  # "v" holds w's old values
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "w": 10, "v": None},
            {"id": 2, "w": 20, "v": None},
            {"id": 3, "w": 30, "v": 300},
        ],
    )
    # the version before the merge reads as it did
    _assert_reads(spark, uri, [{"id": 1, "w": 10}, {"id": 2, "w": 20}], version=renamed)
    assert db.table("t").scan(filter="v = 300").num_rows == 1
    assert db.table("t").scan(filter="w = 30").num_rows == 1


@pytest.mark.parametrize("method", ["auto", "arrow"])
def test_a_new_column_named_like_a_renamed_columns_old_name_in_another_case(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """``v`` renamed to ``w`` (files keep ``v``), then ``V`` added: Spark reads
    Parquet columns ignoring case, so ``V`` must not be stored as ``V`` next to ``v``."""
    db = _db(uri)
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("v", "w")
    df = spark.createDataFrame([(3, 30, 300)], "id long, w int, V long")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert db.table("t").schema.names == ["id", "w", "V"]
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "w": 10, "V": None},
            {"id": 2, "w": 20, "V": None},
            {"id": 3, "w": 30, "V": 300},
        ],
    )


# --- overwrite, replace_where, idempotent writes ----------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_merge_with_overwrite_replaces_the_rows_in_one_commit(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """Overwrite and merge: the new schema, only the new rows, one commit."""
    db = _db(uri)
    df = spark.createDataFrame([(5, 2**40, "x")], "id long, v long, note string")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", mode="overwrite", schema_mode="merge", method=method)
    assert db.version == 3
    assert db.table("t").schema.field("v").type == pa.int64()
    _assert_reads(spark, uri, [{"id": 5, "v": 2**40, "note": "x"}])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("where", ["id = 1", "note = 'x'", "note IS NOT NULL"])
def test_merge_with_replace_where(
    spark: SparkSession, uri: str, method: Method, where: str
) -> None:
    """The condition may name the new column: rows written before hold nulls in it."""
    db = _db(uri)
    df = spark.createDataFrame([(1, 11, "x")], "id long, v int, note string")
    with db.transaction() as tx:
        mere.spark.write(
            tx, df, "t", mode="overwrite", replace_where=where, schema_mode="merge", method=method
        )
    kept = [{"id": 2, "v": 20, "note": None}]
    if where != "id = 1":
        kept.append({"id": 1, "v": 10, "note": None})
    _assert_reads(spark, uri, [{"id": 1, "v": 11, "note": "x"}, *kept])


@pytest.mark.parametrize("method", METHODS)
def test_a_merge_that_breaks_replace_where_changes_nothing(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """A row outside ``replace_where`` fails the write: no schema change survives it."""
    db = _db(uri)
    df = spark.createDataFrame([(1, 11, None)], "id long, v int, note string")
    options = {"mode": "overwrite", "replace_where": "note = 'x'", "method": method}
    _refused(db, uri, df, Exception, "replaceWhere", **options)


@pytest.mark.parametrize("method", METHODS)
def test_a_skipped_duplicate_does_not_change_the_schema(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """An idempotent write already recorded is skipped whole: its new columns are not added."""
    db = _db(uri)
    first = spark.createDataFrame([(3, 30, "x")], "id long, v int, note string")
    with db.transaction() as tx:
        assert mere.spark.write(
            tx, first, "t", schema_mode="merge", app_id="job", app_version=1, method=method
        )
    again = spark.createDataFrame(
        [(4, 2**40, "y", 1.5)], "id long, v long, note string, extra double"
    )
    with _changes_nothing(db, uri, db.table("t").schema):
        for app_version in (0, 1):
            with db.transaction() as tx:
                written = mere.spark.write(
                    tx,
                    again,
                    "t",
                    schema_mode="merge",
                    app_id="job",
                    app_version=app_version,
                    method=method,
                )
                assert written == 0


def test_a_skipped_duplicate_through_the_data_source_does_not_change_the_schema(
    spark: SparkSession, uri: str
) -> None:
    """The data source plans the merge, then skips the commit: the schema stays, the files go."""
    db = _db(uri)

    def save(df: DataFrame) -> None:
        (
            df.write.format("mere")
            .option("database", uri)
            .option("mergeSchema", "true")
            .option("txnAppId", "job")
            .option("txnVersion", 1)
            .mode("append")
            .save("t")
        )

    save(spark.createDataFrame([(3, 30, "x")], "id long, v int, note string"))
    schema = db.table("t").schema
    assert schema.names == ["id", "v", "note"]
    with _changes_nothing(db, uri, schema):
        save(
            spark.createDataFrame(
                [(4, 2**40, "y", 1.5)], "id long, v long, note string, extra double"
            )
        )


# --- transactions and concurrency ----------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_a_merge_in_a_failed_multi_table_transaction_leaves_nothing(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """A merge and a table creation in a transaction that fails later: nothing visible, no file
    left."""
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, "x")], "id long, v int, note string")
    with _changes_nothing(db, uri), pytest.raises(RuntimeError, match="later step"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
            mere.spark.write(tx, df, "u", schema_mode="merge", method=method)  # created
            assert tx.table("t").schema.names == ["id", "v", "note"]
            raise RuntimeError("a later step fails")
    assert not db.snapshot().has_table("u")
    _assert_reads(spark, uri, _base_rows())


@pytest.mark.parametrize("method", METHODS)
def test_two_concurrent_merges_of_different_columns(
    spark: SparkSession, uri: str, method: Method
) -> None:
    """Two transactions extend the same table differently: the second conflicts, its file is
    deleted."""
    db = _db(uri)
    a = spark.createDataFrame([(3, 30, "x")], "id long, v int, a string")
    b = spark.createDataFrame([(4, 40, 1.5)], "id long, v int, b double")
    first, second = db.transaction(), db.transaction()
    mere.spark.write(first, a, "t", schema_mode="merge", method=method)
    mere.spark.write(second, b, "t", schema_mode="merge", method=method)
    first.commit()
    with pytest.raises(ConcurrentMetadataChange):
        second.commit()
    assert db.table("t").schema.names == ["id", "v", "a"]
    _assert_reads(spark, uri, [*_base_rows("a"), {"id": 3, "v": 30, "a": "x"}])
    assert len(_files(uri)) == 2  # the loser's file is gone


def test_two_planned_data_source_merges_of_different_columns(spark: SparkSession, uri: str) -> None:
    """Two data-source jobs planned against one schema extend it differently: the later commit
    conflicts."""
    db = _db(uri)
    a = spark.createDataFrame([], "id long, v int, a string").schema
    b = spark.createDataFrame([], "id long, v int, b double").schema
    job_a = prepare_write(db.uri, "t", a, overwrite=False, merge_schema=True)
    job_b = prepare_write(db.uri, "t", b, overwrite=False, merge_schema=True)
    commit_write(job_a, [])
    with pytest.raises(ConcurrentMetadataChange):
        commit_write(job_b, [])
    assert db.table("t").schema.names == ["id", "v", "a"]


def test_two_planned_data_source_merges_of_the_same_column_both_land(
    spark: SparkSession, uri: str
) -> None:
    """Two jobs adding the same column: the second finds the schema it planned and lands too."""
    db = _db(uri)
    schema = spark.createDataFrame([], "id long, v int, note string").schema
    jobs = [prepare_write(db.uri, "t", schema, overwrite=False, merge_schema=True) for _ in "ab"]
    for job in jobs:
        assert commit_write(job, []) is not None
    assert db.table("t").schema.names == ["id", "v", "note"]


def test_two_planned_data_source_merges_of_one_name_with_two_types_conflict(
    spark: SparkSession, uri: str
) -> None:
    """Two jobs adding one name with different types: the later commit conflicts, no type flip."""
    db = _db(uri)
    text = spark.createDataFrame([], "id long, v int, note string").schema
    number = spark.createDataFrame([], "id long, v int, note long").schema
    job_text = prepare_write(db.uri, "t", text, overwrite=False, merge_schema=True)
    job_number = prepare_write(db.uri, "t", number, overwrite=False, merge_schema=True)
    commit_write(job_text, [])
    with pytest.raises(ConcurrentMetadataChange):
        commit_write(job_number, [])
    assert db.table("t").schema.field("note").type == pa.string()


# --- the data source -------------------------------------------------------------------


def _writer(df: DataFrame, uri: str, mode: str = "append") -> Any:
    """A data-source writer of ``df`` with ``mergeSchema`` on."""
    return df.write.format("mere").option("database", uri).option("mergeSchema", "true").mode(mode)


def test_the_data_source_merges_with_overwrite(spark: SparkSession, uri: str) -> None:
    """``mergeSchema`` with ``overwrite``; the version before it still reads with the old schema."""
    db = _db(uri)
    df = spark.createDataFrame([(5, 2**40, "x")], "id long, v long, note string")
    _writer(df, uri, "overwrite").save("t")
    assert db.version == 3
    assert db.table("t").schema.field("v").type == pa.int64()
    _assert_reads(spark, uri, [{"id": 5, "v": 2**40, "note": "x"}])
    # time travel: the version before the merge, through the data source too
    old = spark.read.format("mere").option("database", uri).option("versionAsOf", 2).load("t")
    assert old.columns == ["id", "v"] and old.count() == 2
    _assert_reads(spark, uri, _base_rows(), version=2)


def test_the_data_source_merges_with_replace_where_on_the_new_column(
    spark: SparkSession, uri: str
) -> None:
    """``replaceWhere`` may name the new column; a second run replaces the first run's rows."""
    db = _db(uri)
    df = spark.createDataFrame([(1, 11, "x")], "id long, v int, note string")
    _writer(df, uri, "overwrite").option("replaceWhere", "note = 'x'").save("t")
    _writer(df, uri, "overwrite").option("replaceWhere", "note = 'x'").save("t")  # replaces
    assert db.table("t").schema.names == ["id", "v", "note"]
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "v": 10, "note": None},
            {"id": 1, "v": 11, "note": "x"},
            {"id": 2, "v": 20, "note": None},
        ],
    )


def test_the_data_source_merge_creates_a_missing_partitioned_table(
    spark: SparkSession, uri: str
) -> None:
    """``mergeSchema`` creating a table with ``partitionBy``, then extending it; another
    ``partitionBy`` is refused."""
    df = spark.createDataFrame([(1, "a", 1.5), (2, None, None)], "id long, p string, x double")
    _writer(df, uri).option("partitionBy", "p").save("t")
    db = mere.connect(uri)
    assert db.version == 1  # table and rows: one commit
    assert db.table("t").schema.names == ["id", "p", "x"]
    more = spark.createDataFrame([(3, "b", 2.5, "n")], "id long, P string, x double, note string")
    _writer(more, uri).option("partitionBy", "p").save("t")
    assert db.version == 2
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "p": "a", "x": 1.5, "note": None},
            {"id": 2, "p": None, "x": None, "note": None},
            {"id": 3, "p": "b", "x": 2.5, "note": "n"},
        ],
    )
    with pytest.raises(Exception, match="partitioned by"):
        _writer(more.withColumnRenamed("note", "other"), uri).option("partitionBy", "id").save("t")
    assert db.version == 2 and "other" not in db.table("t").schema.names


def test_the_data_source_refuses_a_non_widening_and_changes_nothing(
    spark: SparkSession, uri: str
) -> None:
    """A string DataFrame column for an int table column is refused before the job."""
    db = _db(uri)
    df = spark.createDataFrame([(3, "x", "y")], "id long, v string, note string")
    with _changes_nothing(db, uri), pytest.raises(Exception, match="'v'"):
        _writer(df, uri).save("t")


def _add_json(directory: Path, name: str, rows: list[Row]) -> None:
    """Write ``rows`` as the JSON-lines file ``name.json`` in ``directory`` (one stream input)."""
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _stream(spark: SparkSession, uri: str, source: Path, checkpoint: Path) -> None:
    """Run a ``mergeSchema`` stream into ``t`` over every new file (one per micro-batch)."""
    query = (
        spark.readStream.schema("id long, v long, note string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.format("mere")
        .option("database", uri)
        .option("table", "t")
        .option("txnAppId", "stream")
        .option("mergeSchema", "true")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def test_a_streaming_merge_over_micro_batches_and_a_restart(
    spark: SparkSession, uri: str, tmp_path: Path
) -> None:
    """A stream plans once: its first micro-batch extends the schema, later ones and a restart find
    it extended."""
    db = _db(uri)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    _add_json(source, "a", [{"id": 3, "v": 30, "note": "x"}])
    _add_json(source, "b", [{"id": 4, "v": 2**40, "note": None}])
    _stream(spark, uri, source, checkpoint)
    assert db.version == 4  # one commit per micro-batch, the first one extends the schema
    assert db.snapshot().app_version("stream") == 1
    schema = db.table("t").schema
    assert schema.names == ["id", "v", "note"] and schema.field("v").type == pa.int64()
    assert db.snapshot(version=2).table("t").schema == BASE
    _add_json(source, "c", [{"id": 5, "v": 50, "note": "z"}])
    _stream(spark, uri, source, checkpoint)  # a restart plans against the merged schema
    assert db.version == 5
    _assert_reads(
        spark,
        uri,
        [
            *_base_rows("note"),
            {"id": 3, "v": 30, "note": "x"},
            {"id": 4, "v": 2**40, "note": None},
            {"id": 5, "v": 50, "note": "z"},
        ],
    )


PARTITION_WIDENINGS = [
    # (partition type, its value, DataFrame type, the same value in it)
    (pa.int32(), 7, "long", 7),
    (pa.decimal128(10, 2), Decimal("1.50"), "decimal(12,3)", Decimal("1.500")),
]


@pytest.mark.parametrize("method", ["auto", "arrow"])
@pytest.mark.parametrize(("old", "value", "spark_type", "same"), PARTITION_WIDENINGS)
def test_a_merge_keeps_the_type_of_a_partition_column(
    spark: SparkSession,
    uri: str,
    method: Method,
    old: pa.DataType,
    value: Any,
    spark_type: str,
    same: Any,
) -> None:
    """Partition values are spelled in paths in the column type's text ("1.50" for a
    decimal(10, 2)); widened, Spark's Parquet reader would read "1.50" as a
    decimal(12, 3) of 0.150. So a merge keeps the partition column's type (as
    ``alter_table().widen_column`` does) and casts the values, as a strict write does."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", old)])
    db = _db(uri, schema, [{"id": 1, "p": value}], partition_by=["p"])
    df = spark.createDataFrame([(2, same, "x")], f"id long, p {spark_type}, note string")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert db.table("t").schema.field("p").type == old
    assert db.table("t").schema.names == ["id", "p", "note"]
    _assert_reads(
        spark, uri, [{"id": 1, "p": value, "note": None}, {"id": 2, "p": value, "note": "x"}]
    )
    literal = str(value)
    assert db.table("t").scan(filter=f"p = {literal}").num_rows == 2
    assert mere.spark.read(spark, uri, "t", filter=f"p = {literal}").count() == 2
    # the data source plans the same merge
    _writer(df, uri).save("t")
    assert db.table("t").schema.field("p").type == old
    assert mere.spark.read(spark, uri, "t").where(f"p = {literal}").count() == 3


# --- odd names and types, several writes in one transaction -------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_new_columns_with_names_spark_parses(spark: SparkSession, uri: str, method: Method) -> None:
    """Dots, spaces, backticks and the native writer's own alias for partition columns."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", pa.string())])
    db = _db(uri, schema, [{"id": 1, "p": "a"}], partition_by=["p"])
    names = ["a.b", "x y", "q`r", "__mere_partition_0"]
    columns = ", ".join(f"`{n.replace('`', '``')}` string" for n in names)
    df = spark.createDataFrame([(2, "b", *names)], f"id long, p string, {columns}")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert db.table("t").schema.names == ["id", "p", *names]
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "p": "a", **dict.fromkeys(names)},
            {"id": 2, "p": "b", **{n: n for n in names}},
        ],
    )


def test_the_mergeSchema_option_name_ignores_case(spark: SparkSession, uri: str) -> None:
    """Data source options ignore case, and the value is read trimmed and ignoring case."""
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, "x")], "id long, v int, note string")
    df.write.format("mere").option("database", uri).option("MERGESCHEMA", " True ").mode(
        "append"
    ).save("t")
    assert db.table("t").schema.names == ["id", "v", "note"]


def test_a_not_null_dataframe_column_is_added_nullable(spark: SparkSession, uri: str) -> None:
    """Spark marks literal columns NOT NULL; a new column must still be nullable (old rows have no
    value)."""
    from pyspark.sql import functions as F

    db = _db(uri)
    df = spark.createDataFrame([(3, 30)], "id long, v int").withColumn("note", F.lit("x"))
    assert not df.schema["note"].nullable
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge")
    assert db.table("t").schema.field("note").nullable
    db.table("t").append([{"id": 4, "v": 40, "note": None}])  # nulls still fit


@pytest.mark.parametrize("method", METHODS)
def test_several_merges_in_one_transaction(spark: SparkSession, uri: str, method: Method) -> None:
    """Create a table, extend it twice, widen it: one commit, every step visible to the next."""
    db = mere.connect(uri)
    steps = [
        ("id long, v int", (1, 10)),
        ("id long, v int, a string", (2, 20, "x")),
        ("id long, v long, a string, b double", (3, 2**40, "y", 1.5)),
    ]
    with db.transaction() as tx:
        for ddl, row in steps:
            mere.spark.write(
                tx, spark.createDataFrame([row], ddl), "t", schema_mode="merge", method=method
            )
        assert tx.table("t").scan().num_rows == 3
    assert db.version == 1
    assert db.table("t").schema.names == ["id", "v", "a", "b"]
    _assert_reads(
        spark,
        uri,
        [
            {"id": 1, "v": 10, "a": None, "b": None},
            {"id": 2, "v": 20, "a": "x", "b": None},
            {"id": 3, "v": 2**40, "a": "y", "b": 1.5},
        ],
    )


@pytest.mark.parametrize("merge_first", [True, False])
def test_a_merge_and_a_concurrent_plain_append(
    spark: SparkSession, uri: str, merge_first: bool
) -> None:
    """Whichever commits first, the table never holds rows its schema cannot read."""
    db = _db(uri)
    merging, appending = db.transaction(), db.transaction()
    df = spark.createDataFrame([(3, 2**40, "x")], "id long, v long, note string")
    mere.spark.write(merging, df, "t", schema_mode="merge")
    mere.spark.write(appending, spark.createDataFrame([(4, 40)], "id long, v int"), "t")
    first, second = (merging, appending) if merge_first else (appending, merging)
    first.commit()
    try:
        second.commit()
    except MereError:
        pass  # a conflict is fine; a corrupt table is not
    core, native, source = _reads(spark, uri)
    assert native == core and source == core
    ids = {r["id"] for r in core}
    assert {1, 2} <= ids
    if 3 in ids:
        assert db.table("t").schema.names == ["id", "v", "note"]
        assert {r["id"]: r["v"] for r in core}[3] == 2**40


def test_a_failed_data_source_merge_changes_nothing(spark: SparkSession, uri: str) -> None:
    """A data-source job failing a CHECK constraint: aborted, schema kept, files deleted."""
    db = _db(uri)
    with db.transaction() as tx:
        tx.alter_table("t").add_check("positive", "v > 0")
    version, before = db.version, _files(uri)
    df = spark.createDataFrame([(3, -1, "x")], "id long, v int, note string")
    with pytest.raises(Exception, match="positive"):
        _writer(df, uri).save("t")
    assert db.version == version and db.table("t").schema == BASE
    assert _files(uri) == before


FLAT = (
    "b boolean, i8 tinyint, i16 smallint, f float, d date, ts timestamp, ntz timestamp_ntz, "
    "bin binary, big decimal(38,10), small decimal(5,2)"
)


@pytest.mark.parametrize("method", METHODS)
def test_new_columns_of_every_flat_type(spark: SparkSession, uri: str, method: Method) -> None:
    """New columns of every flat Spark type, through both write methods and every reader."""
    db = _db(uri)
    row = (
        True,
        -3,
        300,
        1.5,
        date(2024, 2, 29),
        datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(2024, 1, 2, 3, 4, 5, 6),
        b"\x00\xff",
        Decimal("1234567890123456789012345678.0123456789"),
        Decimal("-1.25"),
    )
    df = spark.createDataFrame([(3, 30, *row)], f"id long, v int, {FLAT}")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    names = [c.split()[0] for c in FLAT.split(", ")]
    assert db.table("t").schema.names == ["id", "v", *names]
    core, native, source = _reads(spark, uri)
    assert [r["id"] for r in core] == [1, 2, 3]
    assert all(r[n] is None for r in core[:2] for n in names)
    new: dict[str, Any] = dict(zip(names, row, strict=True))
    new["ts"] = new["ts"].replace(tzinfo=None)  # Spark gives session-zone (UTC) naive values
    assert {n: native[2][n] for n in names} == new
    assert {n: source[2][n] for n in names} == new
