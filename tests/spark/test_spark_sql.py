"""Spark SQL over mere: ``USING mere`` views, pinned views, and Spark SQL transactions.

The README's seed scenario (an order and the customer's last order date, in
one transaction; a failure in the second statement changing neither table)
runs here through Spark SQL.
"""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, PythonException

import mere
import mere.spark
import mere.sql

CUSTOMERS = pa.schema(
    [
        pa.field("cid", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("last_order", pa.date32()),
    ]
)
ORDERS = pa.schema(
    [
        pa.field("oid", pa.int64(), nullable=False),
        pa.field("cid", pa.int64(), nullable=False),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("day", pa.date32()),
    ]
)
DAY = dt.date(2024, 5, 1)


def shop(uri: str) -> mere.Database:
    """The README's shop: two customers, no orders; orders must have a positive amount."""
    db = mere.connect(uri)
    with db.transaction() as tx:
        tx.create_table("customers", CUSTOMERS)
        tx.create_table("orders", ORDERS, partition_by=["day"])
        tx.alter_table("orders").add_check("positive", "amount > 0")
        tx.table("customers").append(
            pa.table({"cid": [1, 2], "name": ["Ann", "Bob"], "last_order": [None, None]}, CUSTOMERS)
        )
    return db


def rows(db: mere.Database, table: str, key: str) -> list[dict]:
    return sorted(db.table(table).scan().to_pylist(), key=lambda r: r[key])


def files_under(uri: str) -> set[str]:
    root = Path(uri) / "tables"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_the_seed_scenario_commits_both_tables_in_one_version(spark, uri):
    db = shop(uri)
    before = db.version
    spark.createDataFrame(
        [(10, 1, "12.50")], "oid BIGINT, cid BIGINT, amount STRING"
    ).createOrReplaceTempView("new_orders")
    with mere.spark.transaction(spark, uri) as tx:
        inserted = tx.sql(
            "INSERT INTO orders SELECT oid, cid, amount, DATE'2024-05-01' FROM new_orders"
        )
        assert inserted.collect()[0]["count"] == 1
        # reads inside see the transaction's own writes; outside, nothing yet
        seen = tx.sql("SELECT o.oid, c.name FROM orders o JOIN customers c USING (cid)")
        assert [tuple(r) for r in seen.collect()] == [(10, "Ann")]
        assert db.table("orders").scan().num_rows == 0
        updated = tx.sql("UPDATE customers AS c SET last_order = DATE'2024-05-01' WHERE c.cid = 1")
        assert updated.collect()[0]["count"] == 1
    assert tx.version == before + 1 == db.version
    assert rows(db, "orders", "oid") == [
        {"oid": 10, "cid": 1, "amount": Decimal("12.50"), "day": DAY}
    ]
    assert rows(db, "customers", "cid") == [
        {"cid": 1, "name": "Ann", "last_order": DAY},
        {"cid": 2, "name": "Bob", "last_order": None},
    ]


def test_a_failing_second_statement_leaves_both_tables_unchanged(spark, uri):
    db = shop(uri)
    before, files = db.version, files_under(uri)
    # the UPDATE's values are evaluated on the executors: Spark wraps mere's error
    with pytest.raises(PythonException, match=r"SchemaMismatch.*'soon'"):
        with mere.spark.transaction(spark, uri) as tx:
            tx.sql("INSERT INTO orders VALUES (11, 2, 5.00, DATE'2024-05-02')")
            tx.sql("UPDATE customers SET last_order = 'soon' WHERE cid = 2")
    assert tx.transaction.status == "aborted"
    assert db.version == before
    assert db.table("orders").scan().num_rows == 0
    assert files_under(uri) == files  # the INSERT's data files are gone too


def test_statements_are_atomic_and_unsupported_ones_are_named(spark, uri):
    db = shop(uri)
    with mere.spark.transaction(spark, uri) as tx:
        tx.sql("INSERT INTO orders (oid, cid, amount, day) VALUES (1, 1, 3.5, DATE'2024-05-01')")
        with pytest.raises(mere.ConstraintViolation):  # the CHECK: amount > 0
            tx.sql("INSERT INTO orders VALUES (2, 1, -1, DATE'2024-05-01'), (3, 1, 2, NULL)")
        with pytest.raises(mere.SchemaMismatch, match="2 values per row for 4 columns"):
            tx.sql("INSERT INTO orders VALUES (4, 1)")
        with pytest.raises(mere.sql.UnsupportedSQL, match="CREATE TABLE"):
            tx.sql("CREATE TABLE t (a INT) USING parquet")
        with pytest.raises(mere.sql.UnsupportedSQL, match="qualified"):
            tx.sql("DELETE FROM other.orders WHERE oid = 1")
        with pytest.raises(mere.sql.SQLError, match="one statement"):
            tx.sql("SELECT 1; SELECT 2")
        deleted = tx.sql("DELETE FROM customers WHERE cid = 2")
        assert deleted.collect()[0]["count"] == 1
        tx.sql("INSERT OVERWRITE orders SELECT oid + 1, cid, amount, day FROM orders")
    assert [r["oid"] for r in rows(db, "orders", "oid")] == [2]  # only the good INSERT, moved
    assert [r["cid"] for r in rows(db, "customers", "cid")] == [1]
    assert db.history(1)[0]["version"] == tx.version


def test_merge_in_a_spark_sql_transaction(spark, uri):
    db = shop(uri)
    with mere.spark.transaction(spark, uri) as tx:
        merged = tx.sql(
            "MERGE INTO customers AS t USING (SELECT * FROM VALUES (2, 'Bo'), (3, 'Cy') "
            "AS v(cid, name)) AS s ON t.cid = s.cid "
            "WHEN MATCHED THEN UPDATE SET name = s.name "
            "WHEN NOT MATCHED THEN INSERT (cid, name) VALUES (s.cid, s.name)"
        )
        assert [tuple(r) for r in merged.collect()] == [(2, 1, 1, 0)]
        with pytest.raises(mere.sql.UnsupportedSQL, match="NOT MATCHED BY SOURCE"):
            tx.sql(
                "MERGE INTO customers t USING customers s ON t.cid = s.cid "
                "WHEN NOT MATCHED BY SOURCE THEN DELETE"
            )
    assert [(r["cid"], r["name"]) for r in rows(db, "customers", "cid")] == [
        (1, "Ann"),
        (2, "Bo"),
        (3, "Cy"),
    ]


def test_views_read_every_table_at_one_version(spark, uri):
    db = shop(uri)
    db.table("orders").append(
        pa.table({"oid": [1], "cid": [1], "amount": [Decimal("2.00")], "day": [DAY]}, ORDERS)
    )
    pinned = mere.spark.views(spark, uri)
    assert pinned == mere.spark.PinnedViews(db.version, ("customers", "orders"))
    # a commit between registration and the query changes both tables
    with db.transaction() as tx:
        tx.table("orders").append(
            pa.table({"oid": [2], "cid": [2], "amount": [Decimal("3.00")], "day": [DAY]}, ORDERS)
        )
        tx.table("customers").delete("cid = 1")
    joined = spark.sql(
        "SELECT c.name, count(*) AS n FROM orders o JOIN customers c USING (cid) GROUP BY c.name"
    )
    assert [tuple(r) for r in joined.collect()] == [("Ann", 1)]
    older = mere.spark.views(spark, uri, version=pinned.version - 1)
    assert spark.sql("SELECT count(*) FROM orders").collect()[0][0] == 0
    assert older.version == pinned.version - 1


def test_using_mere_in_spark_sql(spark, uri, tmp_path):
    db = shop(uri)
    location = os.fspath(uri).replace("'", "\\'")
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW shop_customers USING mere "
        f"OPTIONS (database '{location}', table 'customers')"
    )
    assert spark.sql("SELECT count(*) FROM shop_customers").collect()[0][0] == 2
    spark.sql("INSERT INTO shop_customers VALUES (3, 'Cy', DATE'2024-05-01')")
    assert [r["cid"] for r in rows(db, "customers", "cid")] == [1, 2, 3]
    # the view reads the version it was created at: re-create it to see newer commits
    assert spark.sql("SELECT count(*) FROM shop_customers").collect()[0][0] == 2


def test_create_table_using_mere_fails_with_a_hint(spark, uri, tmp_path):
    """Spark's session catalog keeps no options for a Python data source's table."""
    shop(uri)
    location = os.fspath(uri).replace("'", "\\'")
    try:
        with pytest.raises(AnalysisException, match="use CREATE TEMPORARY VIEW"):
            spark.sql(
                f"CREATE TABLE shop_orders USING mere LOCATION '{tmp_path / 'spark'}' "
                f"OPTIONS (database '{location}', table 'orders')"
            )
        with pytest.raises(AnalysisException, match=r"got no options: .* CREATE TEMPORARY VIEW"):
            # with its columns given, Spark creates the table without asking the source
            spark.sql(
                f"CREATE TABLE shop_orders (oid BIGINT) USING mere LOCATION '{tmp_path / 's2'}' "
                f"OPTIONS (database '{location}', table 'orders')"
            )
            spark.sql("SELECT * FROM shop_orders").collect()
    finally:
        spark.sql("DROP TABLE IF EXISTS shop_orders")


def test_a_query_in_a_serializable_transaction_is_a_read_for_conflicts(spark, uri):
    db = shop(uri)
    tx = mere.spark.transaction(spark, uri, isolation="serializable")
    try:
        assert tx.sql("SELECT count(*) FROM orders").collect()[0][0] == 0
        tx.sql("UPDATE customers SET name = 'Ann B' WHERE cid = 1")
        # another writer adds an order the query above would have counted
        db.table("orders").append(
            pa.table({"oid": [5], "cid": [1], "amount": [Decimal("1.00")], "day": [DAY]}, ORDERS)
        )
        with pytest.raises(mere.ConflictError):
            tx.commit()
    finally:
        tx.abort()
    assert [r["name"] for r in rows(db, "customers", "cid")] == ["Ann", "Bob"]


def test_a_spark_cast_in_a_dml_condition_is_mere_s_cast(spark, uri):
    """sqlglot reads Spark's CAST as TRY_CAST (Spark's non-ANSI meaning), which mere's
    engine refused, naming SQL the user never wrote; an explicit TRY_CAST still is."""
    db = shop(uri)
    db.table("orders").append(
        [{"oid": 7, "cid": 1, "amount": Decimal("2.5"), "day": dt.date(2024, 5, 1)}]
    )
    expected = db.table("orders").scan(filter="CAST(amount AS INT) = 3").num_rows
    assert expected == 1  # rounded half away from zero, as DuckDB does
    with mere.spark.transaction(spark, uri) as tx:
        deleted = tx.sql("DELETE FROM orders WHERE CAST(amount AS INT) = 3")
        assert deleted.collect()[0]["count"] == expected
        with pytest.raises(mere.InvalidExpression, match="TRY_CAST"):
            tx.sql("DELETE FROM orders WHERE TRY_CAST(amount AS INT) = 3")
    assert db.table("orders").scan(filter="oid = 7").num_rows == 0
