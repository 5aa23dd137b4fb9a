"""Spark over tables with inlined data files (docs/format.md §2.5, issue 17).

Each table mixes stored files (written before the database turned inlining on)
and inlined ones (small appends after); Spark's reads, filters, DML, MERGE,
writes and SQL views must see exactly what mere's own scan sees.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from spark_helpers import ORDERS, orders

import mere
import mere.spark

NAN = math.nan


def with_nans(start: int, count: int) -> pa.Table:
    """Orders whose amounts include NaN next to 5.0 (a footer's min = max = 5 leaves NaN out)."""
    table = orders(start, count)
    amounts = [[5.0, NAN, None, -0.0][i % 4] for i in range(count)]
    return table.set_column(2, "amount", pa.array(amounts, pa.float64()))


def mixed(uri: str, name: str = "t", *, partitioned: bool = True) -> mere.Database:
    """A table of two stored files and three inlined ones (NaN amounts among them)."""
    db = mere.connect(uri)
    db.create_table(name, ORDERS, partition_by=["country"] if partitioned else [])
    if partitioned:
        db.table(name).append(orders(0, 60))
    else:
        db.table(name).append(orders(0, 30))
        db.table(name).append(orders(30, 30))
    db.set_properties({"inlineLimit": "65536"})
    db.table(name).append(with_nans(60, 8))
    db.table(name).append(orders(68, 3))
    db.table(name).append(with_nans(71, 5))
    return db


def kinds(db: mere.Database, name: str = "t") -> tuple[int, int]:
    """(stored files, inlined files) of the table's latest version."""
    files = db.snapshot().table(name).files
    inlined = sum(1 for f in files if f.inline is not None)
    return len(files) - inlined, inlined


def mere_rows(
    db: mere.Database, name: str = "t", version: int | None = None, **kw: object
) -> list[tuple]:
    table = db.snapshot(version=version).table(name).scan(**kw)  # type: ignore[arg-type]
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def spark_rows(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((tuple(r) for r in df.select(*ORDERS.names).collect()), key=repr)


def same(a: list[tuple], b: list[tuple]) -> bool:
    """Equal rows, NaN equal to NaN (repr-sorted lists compared by repr)."""
    return [repr(r) for r in a] == [repr(r) for r in b]


@pytest.mark.parametrize(
    ("method", "partitioned"),
    [("native", True), ("datasource", False)],
    ids=["native-partitioned", "datasource-flat"],  # the other two: CI time (20-minute budget)
)
def test_reads_see_stored_and_inlined_files(spark, uri, method, partitioned):
    db = mixed(uri, partitioned=partitioned)
    stored, inlined = kinds(db)
    assert stored >= 2 and inlined >= 3
    df = mere.spark.read(spark, uri, "t", method=method)
    assert df.schema.names == ORDERS.names
    assert same(spark_rows(df), mere_rows(db))
    older = mere.spark.read(spark, uri, "t", version=db.version - 1, method=method)
    assert same(spark_rows(older), mere_rows(db, version=db.version - 1))


FILTERS = [
    "amount <> 5",
    "NOT (amount = 5)",
    "amount IS NULL OR country = 'DE'",
    "country = 'IT' AND id < 70",
]


@pytest.mark.parametrize("method", ["native", "datasource"])
def test_filters_agree_with_mere_nan_included(spark, uri, method):
    db = mixed(uri)
    df = mere.spark.read(spark, uri, "t", method=method)
    for sql in FILTERS:
        expected = mere_rows(db, filter=sql)
        assert same(spark_rows(df.where(sql)), expected), sql
        pushed = mere.spark.read(spark, uri, "t", method=method, filter=sql)
        assert same(spark_rows(pushed), expected), sql
    # the NaN rows are inlined, and 'amount <> 5' keeps them (NaN is above every number)
    assert any(
        isinstance(r[2], float) and math.isnan(r[2]) for r in mere_rows(db, filter=FILTERS[0])
    )


def twins(uri: str) -> mere.Database:
    """``spark_side`` and ``arrow_side``: the same mixed layout, for Spark vs pyarrow DML."""
    db = mere.connect(uri)
    for name in ("spark_side", "arrow_side"):
        db.create_table(name, ORDERS, partition_by=["country"])
        db.table(name).append(orders(0, 60))
    db.set_properties({"inlineLimit": "65536"})
    for name in ("spark_side", "arrow_side"):
        db.table(name).append(with_nans(60, 8))
        db.table(name).append(orders(68, 4))
    return db


def same_sides(db: mere.Database) -> None:
    assert same(mere_rows(db, "spark_side"), mere_rows(db, "arrow_side"))


def test_delete_and_update_rewrite_inlined_files(spark, uri):
    db = twins(uri)
    where = "id >= 58 AND id % 2 = 0"  # stored and inlined files alike
    deleted = mere.spark.delete(spark, uri, "spark_side", where)
    assert deleted == db.table("arrow_side").delete(where) > 0
    same_sides(db)
    where, changes = "amount IS NULL OR id = 3", {"amount": "1.25", "country": "'ES'"}
    updated = mere.spark.update(spark, uri, "spark_side", where, changes)
    assert updated == db.table("arrow_side").update(where, changes) > 0
    same_sides(db)
    assert same(spark_rows(mere.spark.read(spark, uri, "spark_side")), mere_rows(db, "spark_side"))


def test_merge_rewrites_inlined_files(spark, uri):
    db = twins(uri)
    source = pa.table({"id": [1, 61, 63, 70, 500], "amount": [9.0, NAN, 2.5, 5.0, 7.0]})
    df = spark.createDataFrame(source.to_pylist(), "id long, amount double")
    for merger in (
        mere.spark.merge(spark, uri, "spark_side", df, "t.id = s.id"),
        db.table("arrow_side").merge(source, "t.id = s.id"),
    ):
        merger.when_matched_update({"amount": "s.amount"}).when_not_matched_insert(
            {"id": "s.id", "amount": "s.amount", "country": "'NL'"}
        ).execute()
    same_sides(db)
    assert same(
        spark_rows(mere.spark.read(spark, uri, "spark_side", method="datasource")),
        mere_rows(db, "spark_side"),
    )


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_spark_writes_into_an_inlining_database_store_their_files(spark, uri, method):
    db = mixed(uri)
    before = {f.path for f in db.snapshot().table("t").files}
    df = spark.createDataFrame(
        orders(1000, 5).to_pylist(), "id long, customer_id long, amount double, country string"
    )
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t", method=method) == 5
    new = [f for f in db.snapshot().table("t").files if f.path not in before]
    assert new and all(f.inline is None for f in new)  # executors' files are objects
    assert db.table("t").scan(filter="id >= 1000").num_rows == 5
    assert same(spark_rows(mere.spark.read(spark, uri, "t")), mere_rows(db))
    kept = [r for r in mere_rows(db) if r[0] < 60]  # stored; 60.. are inlined, 1000.. stored
    with db.transaction() as tx:  # replaceWhere takes rows out of stored and inlined files
        fresh = df.withColumn("id", df["id"] + 1000)
        mere.spark.write(tx, fresh, "t", mode="overwrite", replace_where="id >= 60", method=method)
    assert same([r for r in mere_rows(db) if r[0] < 60], kept)
    assert sorted(r[0] for r in mere_rows(db) if r[0] >= 60) == list(range(2000, 2005))
    with db.transaction() as tx:  # an overwrite removes inlined files too
        mere.spark.write(tx, df, "t", mode="overwrite", method=method)
    assert kinds(db) == (len(db.snapshot().table("t").files), 0)
    assert sorted(r[0] for r in mere_rows(db)) == list(range(1000, 1005))


def test_views_and_spark_sql_over_inlined_files(spark, uri):
    db = mixed(uri)
    mere.spark.views(spark, uri)
    got = spark.sql(
        "SELECT country, count(*) AS n, count(amount) AS a FROM t GROUP BY country ORDER BY 1"
    ).collect()
    expected = db.sql(
        "SELECT country, count(*) AS n, count(amount) AS a FROM t GROUP BY country ORDER BY 1"
    ).to_pylist()
    assert [r.asDict() for r in got] == expected
    with mere.spark.transaction(spark, uri) as tx:
        assert tx.sql("SELECT count(*) FROM t WHERE id >= 60").collect()[0][0] == 16
        tx.sql("DELETE FROM t WHERE id IN (1, 61)")
    assert len(mere_rows(db)) == 74


@pytest.mark.parametrize("method", ["native", "datasource"])
def test_inlined_files_of_older_schemas(spark, uri, method):
    """Inlined files written before a rename, a widening and an added column read as stored ones."""
    db = mere.connect(uri)
    db.sql("CREATE TABLE t (k INTEGER, v DOUBLE, s VARCHAR) PARTITIONED BY (s)")
    db.sql("INSERT INTO t SELECT range, range / 2, 'a' FROM range(3000)")  # stored
    db.set_properties({"inlineLimit": "4000"})
    db.sql("INSERT INTO t VALUES (-1, 'NaN'::DOUBLE, 'b'), (-2, NULL, NULL)")  # inlined
    db.sql("ALTER TABLE t RENAME COLUMN v TO amount")
    db.sql("ALTER TABLE t ALTER COLUMN k TYPE BIGINT")
    db.sql("ALTER TABLE t ADD COLUMN extra VARCHAR")
    db.sql("INSERT INTO t VALUES (1099511627776, 5, 'b', 'x')")  # inlined
    assert kinds(db) == (1, 3)
    df = mere.spark.read(spark, uri, "t", method=method)
    expected = sorted(tuple(r.values()) for r in db.table("t").scan().to_pylist() if r["k"] < 0)
    assert df.schema.names == ["k", "amount", "s", "extra"]
    got = sorted(tuple(r) for r in df.where("k < 0 OR extra IS NOT NULL").collect())
    assert repr(got) == repr(sorted([*expected, (1099511627776, 5.0, "b", "x")]))
    assert df.where("amount <> 5 AND k < 0").count() == 1  # the NaN row, inlined


@pytest.mark.parametrize("inline", [False, True], ids=["stored", "inlined"])
def test_a_naive_timestamp_reads_as_written_whatever_the_session_zone(spark, uri, inline):
    """Inlined rows were handed to Spark without their schema: a naive timestamp became a
    zoned one in the session's zone (10:00 read as 15:00 in New York), and a filter on
    it found nothing."""
    import datetime as dt

    db = mere.connect(uri)
    if inline:
        db.set_properties({"inlineLimit": "65536"})
    naive = pa.timestamp("us")
    db.create_table("n", pa.schema([("id", pa.int64()), ("tn", naive)]))
    moment = dt.datetime(2024, 1, 1, 10, 0)
    db.table("n").append(pa.table({"id": [1], "tn": pa.array([moment], naive)}))
    assert kinds(db, "n") == ((0, 1) if inline else (1, 0))
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        for method in ("native", "datasource"):
            df = mere.spark.read(spark, uri, "n", method=method)
            assert df.schema["tn"].dataType.typeName() == "timestamp_ntz", method
            assert [tuple(r) for r in df.collect()] == [(1, moment)], method
            found = mere.spark.read(
                spark, uri, "n", method=method, filter="tn = TIMESTAMP '2024-01-01 10:00:00'"
            )
            assert found.count() == 1, method
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
