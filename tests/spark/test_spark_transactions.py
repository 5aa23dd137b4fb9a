"""Spark writes inside a mere transaction: several tables, one commit; idempotent retries."""

from __future__ import annotations

import time

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from spark_helpers import data_files, orders

import mere
import mere.spark


def test_two_tables_commit_in_one_version(spark, uri):
    db = mere.connect(uri)
    before = db.version
    items = spark.range(0, 200).select(
        (F.col("id") % 50).alias("order_id"), (F.col("id") * 0.5).alias("price")
    )
    with db.transaction() as tx:
        assert mere.spark.write(tx, spark.createDataFrame(orders(0, 50)), "orders") == 50
        assert mere.spark.write(tx, items, "lineitem", partition_by=["order_id"]) == 200
        assert db.version == before  # nothing visible before the commit

    assert db.version == before + 1
    assert db.history(1)[0]["metrics"]["tables"] == ["lineitem", "orders"]
    assert db.table("orders").scan().sort_by("id").to_pylist() == orders(0, 50).to_pylist()
    assert db.table("lineitem").scan().num_rows == 200
    assert db.table("lineitem").partition_by == ["order_id"]


def test_a_failing_write_commits_neither_table(spark, uri):
    db = mere.connect(uri)
    db.create_table("orders", orders(0, 1).schema)
    version = db.version

    @F.udf("double")
    def fail_on_last(value):
        if value == 99:
            time.sleep(1.5)
            raise ValueError("boom")
        return float(value)

    bad = spark.range(0, 100, 1, 4).select(
        F.col("id").alias("order_id"), fail_on_last("id").alias("price")
    )
    with pytest.raises(PySparkException, match="boom"):
        with db.transaction() as tx:
            mere.spark.write(tx, spark.createDataFrame(orders(0, 50)), "orders")
            mere.spark.write(tx, bad, "lineitem")
    assert db.version == version
    assert db.tables() == ["orders"]
    assert data_files(uri) == []


def test_idempotent_write_in_a_transaction(spark, uri):
    db = mere.connect(uri)
    df = spark.createDataFrame(orders(0, 10))
    for _ in range(2):  # the second run is a retry of the same app version
        with db.transaction() as tx:
            mere.spark.write(tx, df, "orders", app_id="loader", app_version=7)
    assert db.table("orders").scan().num_rows == 10
    assert db.snapshot().app_version("loader") == 7
    assert len(data_files(uri)) == len(db.snapshot().table("orders").files)


def test_overwrite_with_replace_where_in_a_transaction(spark, uri):
    db = mere.connect(uri)
    db.create_table("orders", orders(0, 1).schema, partition_by=["country"])
    db.table("orders").append(orders(0, 30))
    fr = orders(100, 5, countries=("FR",))
    with db.transaction() as tx:
        removed_before = tx.table("orders").scan(filter="country = 'FR'").num_rows
        mere.spark.write(
            tx,
            spark.createDataFrame(fr),
            "orders",
            mode="overwrite",
            replace_where="country = 'FR'",
        )
    got = db.table("orders").scan()
    assert got.num_rows == 30 - removed_before + 5
    fr_ids = [r["id"] for r in got.to_pylist() if r["country"] == "FR"]
    assert sorted(fr_ids) == list(range(100, 105))


def test_memory_stores_are_refused(spark):
    db = mere.connect("memory://spark-refused")
    with db.transaction() as tx, pytest.raises(ValueError, match="other processes"):
        mere.spark.write(tx, spark.range(1), "t")
