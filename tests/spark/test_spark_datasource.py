"""The ``mere`` data source: writes in every mode, reads with time travel and pushdown."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, WriterCommitMessage
from spark_helpers import ORDERS, data_files, orders

import mere
from mere.spark.datasource import MereDataSource

SparkError = (PySparkException, Py4JJavaError)


def save(df, uri: str, table: str = "orders", mode: str = "append", **options: str) -> None:
    writer = df.write.format("mere").option("database", uri).mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(table)


def load(spark, uri: str, table: str = "orders", **options: object):
    reader = spark.read.format("mere").option("database", uri)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(table)


def rows(table_or_df) -> list[dict]:
    table = table_or_df if isinstance(table_or_df, pa.Table) else table_or_df.toArrow()
    return table.sort_by("id").to_pylist()


def referenced(db: mere.Database, table: str = "orders") -> set[str]:
    snapshot = db.snapshot()
    prefix = f"tables/{snapshot.table(table).id}/"
    return {prefix + f.path for f in snapshot.table(table).files}


def on_disk(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in data_files(uri)}


def frame(spark, table: pa.Table, partitions: int = 2):
    return spark.createDataFrame(table.to_pandas()).repartition(partitions)


def test_append_creates_the_table_and_reads_back_equal(spark, uri):
    save(frame(spark, orders(0, 300)), uri)
    save(frame(spark, orders(300, 200)), uri)

    db = mere.connect(uri)
    table = db.table("orders")
    assert table.schema.names == ORDERS.names
    assert all(f.nullable for f in table.schema)
    expected = orders(0, 500).to_pylist()
    assert rows(table.scan()) == expected
    assert rows(load(spark, uri)) == expected
    assert on_disk(uri) == referenced(db)


def test_one_commit_per_write_with_large_row_groups(spark, uri):
    import pyarrow.parquet as pq

    before = mere.connect(uri).version
    save(spark.range(0, 50_000, 1, 1).select(F.col("id"), (F.col("id") * 2).alias("x")), uri)
    db = mere.connect(uri)
    assert db.version == before + 1  # the table is created by the commit of its data
    [path] = data_files(uri)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1  # not one per 10k-row batch


def test_overwrite_replaces_every_row(spark, uri):
    save(frame(spark, orders(0, 100)), uri)
    save(frame(spark, orders(1000, 10)), uri, mode="overwrite")
    db = mere.connect(uri)
    assert rows(db.table("orders").scan()) == orders(1000, 10).to_pylist()
    assert db.history(1)[0]["metrics"]["numRemovedRows"] == 100


def test_replace_where_replaces_only_matching_rows(spark, uri):
    save(frame(spark, orders(0, 90)), uri, partitionBy="country")
    fr = orders(1000, 30, countries=("FR",))
    save(frame(spark, fr), uri, mode="overwrite", replaceWhere="country = 'FR'")

    db = mere.connect(uri)
    kept = [r for r in orders(0, 90).to_pylist() if r["country"] != "FR"]
    assert rows(db.table("orders").scan()) == sorted(kept + fr.to_pylist(), key=lambda r: r["id"])


def test_replace_where_refuses_rows_outside_the_condition(spark, uri):
    save(frame(spark, orders(0, 90)), uri, partitionBy="country")
    db = mere.connect(uri)
    version, files = db.version, on_disk(uri)
    with pytest.raises(SparkError, match="replaceWhere"):
        save(frame(spark, orders(1000, 30)), uri, mode="overwrite", replaceWhere="country = 'FR'")
    assert db.version == version
    assert on_disk(uri) == files


def test_partition_by_writes_hive_directories(spark, uri):
    save(frame(spark, orders(0, 60)), uri, partitionBy="country")
    db = mere.connect(uri)
    assert db.table("orders").partition_by == ["country"]
    assert {p.parent.name for p in data_files(uri)} == {"country=FR", "country=DE", "country=IT"}
    with pytest.raises(SparkError, match="partitioned by"):
        save(frame(spark, orders(60, 6)), uri, partitionBy="customer_id")


def test_failing_task_leaves_nothing(spark, uri):
    save(frame(spark, orders(0, 40)), uri)
    db = mere.connect(uri)
    version, files = db.version, on_disk(uri)

    @F.udf("long")
    def explode_on_one_row(value):
        if value == 399:
            time.sleep(1.5)  # let the other tasks finish and report their files
            raise ValueError("boom")
        return value

    df = spark.range(0, 400, 1, 4).select(
        explode_on_one_row("id").alias("id"),
        F.lit(1).cast("long").alias("customer_id"),
        F.lit(2.0).alias("amount"),
        F.lit("FR").alias("country"),
    )
    with pytest.raises(SparkError, match="boom"):
        save(df, uri)
    assert db.version == version
    assert on_disk(uri) == files
    assert db.table("orders").scan().num_rows == 40


def _write_locally(uri: str, table: pa.Table, **options: str) -> tuple:
    """Run a data-source write in this process: writer(), one task's write(), no commit yet."""
    source = MereDataSource({"database": uri, "path": "orders", **options})
    schema = spark_schema_of(table)
    writer = source.writer(schema, False)
    message = writer.write(iter(table.to_batches(max_chunksize=10)))
    return writer, [message, None]


def spark_schema_of(table: pa.Table):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(table.schema)


def test_abort_after_a_landed_commit_deletes_nothing(uri):
    mere.connect(uri).create_table("orders", ORDERS)
    writer, messages = _write_locally(uri, orders(0, 50))
    writer.commit(messages)
    writer.abort(messages)  # what Spark does when commit() raises after its commit landed

    db = mere.connect(uri)
    assert rows(db.table("orders").scan()) == orders(0, 50).to_pylist()
    assert on_disk(uri) == referenced(db)


def test_abort_without_commit_deletes_the_files(uri):
    mere.connect(uri).create_table("orders", ORDERS)
    writer, messages = _write_locally(uri, orders(0, 50))
    assert on_disk(uri)
    writer.abort(messages)
    assert on_disk(uri) == set()
    assert isinstance(messages[0], WriterCommitMessage)


def test_idempotent_writes_skip_a_retried_version(spark, uri):
    df = frame(spark, orders(0, 20))
    save(df, uri, txnAppId="nightly", txnVersion="1")
    db = mere.connect(uri)
    version, files = db.version, on_disk(uri)

    save(df, uri, txnAppId="nightly", txnVersion="1")  # a retry: nothing committed
    assert db.version == version
    assert on_disk(uri) == files
    save(frame(spark, orders(20, 5)), uri, txnAppId="nightly", txnVersion="2")
    assert db.version == version + 1
    assert db.snapshot().app_version("nightly") == 2
    assert db.table("orders").scan().num_rows == 25


def test_version_and_timestamp_as_of(spark, uri):
    save(frame(spark, orders(0, 10)), uri)
    db = mere.connect(uri)
    first = db.snapshot()
    time.sleep(0.01)
    save(frame(spark, orders(10, 10)), uri)

    assert load(spark, uri).count() == 20
    assert rows(load(spark, uri, versionAsOf=first.version)) == orders(0, 10).to_pylist()
    at = first.timestamp.astimezone(UTC).replace(tzinfo=None).isoformat()
    assert load(spark, uri, timestampAsOf=at).count() == 10
    ms = int(first.timestamp.timestamp() * 1000)
    assert load(spark, uri, timestampAsOf=ms).count() == 10
    assert datetime.fromisoformat(at).tzinfo is None


def test_a_dataframe_stays_on_its_snapshot(spark, uri):
    save(frame(spark, orders(0, 10)), uri)
    df = load(spark, uri)
    save(frame(spark, orders(10, 10)), uri)
    assert df.count() == 10


def _reader(uri: str):
    source = MereDataSource({"database": uri, "path": "orders"})
    return source.reader(source.schema())


def test_pushed_filters_prune_no_file_and_a_reused_dataframe_reads_every_row(spark, uri):
    """Spark 4.3 keeps a pushdown's planned partitions for every later scan of the DataFrame."""
    for start in range(0, 300, 100):  # three appends: ids 0-99, 100-199, 200-299 per country
        save(frame(spark, orders(start, 100), partitions=1), uri, partitionBy="country")
    reader = _reader(uri)
    assert len(reader.planned_files()) == 9
    by_partition = _reader(uri)
    pushed = [EqualTo(("country",), "FR"), GreaterThan(("id",), 250)]
    assert list(by_partition.pushFilters(pushed)) == pushed  # Spark evaluates them all
    assert len(by_partition.planned_files()) == 9

    every = orders(0, 300).to_pylist()
    base = load(spark, uri)
    assert base.where("country = 'FR'").count() == sum(r["country"] == "FR" for r in every)
    # The same DataFrame, another filter: rows of files the first filter excluded.
    others = [r for r in every if r["country"] != "FR" and r["id"] < 10]
    assert rows(base.where("country <> 'FR' AND id < 10")) == others

    df = load(spark, uri).where("country = 'FR' AND id > 250")
    expected = [r for r in orders(0, 300).to_pylist() if r["country"] == "FR" and r["id"] > 250]
    assert rows(df) == expected


def test_data_source_reads_every_type(spark, uri):
    db = mere.connect(uri)
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "small": pa.array([1, None, 3], pa.uint8()),
            "big": pa.array([2**63, 0, None], pa.uint64()),
            "text": pa.array(["a", None, "c"], pa.large_string()),
            "ts": pa.array([1_000_000_123, None, 5], pa.timestamp("ns", tz="UTC")),
            "day": pa.array([19000, 19001, None], pa.date32()),
            "price": pa.array(["1.25", None, "3.50"], pa.string()).cast(pa.decimal128(10, 2)),
            "tags": pa.array([["x"], [], None], pa.list_(pa.string())),
        }
    )
    db.create_table("orders", table.schema)
    db.table("orders").append(table)
    got = load(spark, uri).where("id >= 1").toArrow().sort_by("id")
    assert got.column("small").to_pylist() == [1, None, 3]
    assert got.column("big").to_pylist()[0] == 2**63
    assert got.column("text").to_pylist() == ["a", None, "c"]
    assert got.column("ts").to_pylist()[0] == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert got.column("tags").to_pylist() == [["x"], [], None]
    assert str(got.column("price")[0].as_py()) == "1.25"


def test_create_on_write_is_atomic_with_its_data(spark, uri):
    @F.udf("long")
    def boom(value):
        raise ValueError("boom")

    with pytest.raises(SparkError, match="boom"):
        save(spark.range(0, 10, 1, 1).select(boom("id").alias("id")), uri, table="fresh")
    assert "fresh" not in mere.connect(uri).tables()


def test_a_table_altered_during_the_job_fails_the_commit_and_abort_cleans_up(uri):
    mere.connect(uri).create_table("orders", ORDERS)
    writer, messages = _write_locally(uri, orders(0, 50))
    with mere.connect(uri).transaction() as tx:
        tx.alter_table("orders").add_column("note", pa.string())
    with pytest.raises(mere.ConcurrentMetadataChange, match="altered"):
        writer.commit(messages)
    writer.abort(messages)
    assert on_disk(uri) == set()
    assert mere.connect(uri).table("orders").scan().num_rows == 0


def test_a_table_dropped_during_the_job_fails_the_commit_as_a_conflict(uri):
    mere.connect(uri).create_table("orders", ORDERS)
    writer, messages = _write_locally(uri, orders(0, 50))
    mere.connect(uri).drop_table("orders")
    with pytest.raises(mere.ConcurrentMetadataChange, match="dropped"):
        writer.commit(messages)
    writer.abort(messages)
    assert on_disk(uri) == set()
    assert "orders" not in mere.connect(uri).tables()


def test_register_turns_on_the_filter_pushdown_the_reader_needs(spark, uri):
    """Without the setting Spark refuses the source; register() turns it on."""
    from mere.spark import PUSHDOWN_CONF

    save(frame(spark, orders(0, 5)), uri)
    spark.conf.set(PUSHDOWN_CONF, "false")
    try:
        with pytest.raises(PySparkException, match="PUSHDOWN"):
            load(spark, uri).collect()
        mere.spark.register(spark)
        assert spark.conf.get(PUSHDOWN_CONF) == "true"
        assert sorted(r["id"] for r in load(spark, uri).collect()) == list(range(5))
    finally:
        spark.conf.set(PUSHDOWN_CONF, "true")
