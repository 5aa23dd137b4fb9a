"""Spark-side DELETE and UPDATE give exactly what the pyarrow-side operations give."""

from __future__ import annotations

import pytest
from spark_helpers import ORDERS, data_files, orders

import mere
import mere.spark


def twin_tables(uri: str) -> mere.Database:
    """Two identical partitioned tables, ``spark_side`` and ``arrow_side``, of three files each."""
    db = mere.connect(uri)
    for name in ("spark_side", "arrow_side"):
        db.create_table(name, ORDERS, partition_by=["country"])
        db.table(name).append(orders(0, 300))
    return db


def content(db: mere.Database, name: str) -> list[dict]:
    return db.table(name).scan().sort_by("id").to_pylist()


def test_delete_equals_the_pyarrow_delete(spark, uri):
    db = twin_tables(uri)
    where = "amount > 100 AND customer_id IN (1, 2) OR id = 7"
    deleted = mere.spark.delete(spark, uri, "spark_side", where)
    assert deleted == db.table("arrow_side").delete(where)
    assert deleted > 0
    assert content(db, "spark_side") == content(db, "arrow_side")
    assert db.history(1)[0]["operation"] == "DELETE"


def test_delete_leaves_files_without_matches_alone(spark, uri):
    db = twin_tables(uri)
    before = {f.path for f in db.snapshot().table("spark_side").files}
    assert mere.spark.delete(spark, uri, "spark_side", "country = 'FR' AND id < 10") == 4
    after = {f.path for f in db.snapshot().table("spark_side").files}
    assert len(before - after) == 1  # only the FR file was rewritten
    assert mere.spark.delete(spark, uri, "spark_side", "id > 100000") == 0


def test_update_equals_the_pyarrow_update(spark, uri):
    db = twin_tables(uri)
    changes = {"amount": "amount * 2 + 1", "customer_id": 42}
    where = "country IN ('DE', 'IT') AND id % 3 = 0"
    updated = mere.spark.update(spark, uri, "spark_side", where, changes)
    assert updated == db.table("arrow_side").update(where, changes)
    assert content(db, "spark_side") == content(db, "arrow_side")


def test_update_moves_rows_between_partitions(spark, uri):
    db = twin_tables(uri)
    where, changes = "id < 30", {"country": "'ES'"}
    assert mere.spark.update(spark, uri, "spark_side", where, changes) == 30
    db.table("arrow_side").update(where, changes)
    assert content(db, "spark_side") == content(db, "arrow_side")
    spark_files = db.snapshot().table("spark_side").files
    assert {"ES"} <= {f.partition_values["country"] for f in spark_files}


def test_dml_inside_a_transaction_with_other_writes(spark, uri):
    db = twin_tables(uri)
    version = db.version
    with db.transaction() as tx:
        mere.spark.delete(spark, tx, "spark_side", "country = 'IT'")
        tx.table("arrow_side").delete("country = 'IT'")
    assert db.version == version + 1
    assert content(db, "spark_side") == content(db, "arrow_side")
    live = {f.path for n in ("spark_side", "arrow_side") for f in db.snapshot().table(n).files}
    assert len(data_files(uri)) == len(live) + 2  # the two removed files stay for time travel


def test_bad_expressions_fail_before_any_job(spark, uri):
    twin_tables(uri)
    with pytest.raises(mere.InvalidExpression):
        mere.spark.delete(spark, uri, "spark_side", "no_such_column = 1")
    with pytest.raises(mere.SchemaMismatch):
        mere.spark.update(spark, uri, "spark_side", None, {"no_such_column": 1})
