"""The native read (Spark's Parquet reader on the snapshot's files) against the other reads."""

from __future__ import annotations

import pyarrow as pa
import pytest
from spark_helpers import ORDERS, orders

import mere
import mere.spark


def rows(table_or_df, key: str = "id") -> list[dict]:
    table = table_or_df if isinstance(table_or_df, pa.Table) else table_or_df.toArrow()
    return table.sort_by(key).to_pylist()


def evolved_table(uri: str) -> mere.Database:
    """A partitioned table with a renamed column, an added column, null and '' partitions."""
    db = mere.connect(uri)
    db.create_table("orders", ORDERS, partition_by=["country"])
    db.table("orders").append(orders(0, 30, countries=("FR", "DE", "")))
    with db.transaction() as tx:
        tx.alter_table("orders").rename_column("amount", "total")
    with db.transaction() as tx:
        tx.alter_table("orders").add_column("amount", pa.string())
    later = orders(30, 10).rename_columns(["id", "customer_id", "total", "country"])
    later = later.append_column("amount", pa.array([f"n{i}" for i in range(10)]))
    db.table("orders").append(later)
    db.table("orders").append(
        pa.table(
            {"id": [99], "customer_id": [1], "total": [1.0], "country": [None], "amount": ["x"]}
        )
    )
    return db


def test_native_equals_data_source_and_mere_scan(spark, uri):
    db = evolved_table(uri)
    expected = rows(db.table("orders").scan())
    assert {r["country"] for r in expected} == {"FR", "DE", "IT", "", None}

    native = mere.spark.read(spark, uri, "orders")
    assert native.columns == ["id", "customer_id", "total", "country", "amount"]
    assert rows(native) == expected
    assert rows(mere.spark.read(spark, uri, "orders", method="datasource")) == expected

    first = db.snapshot(version=2)  # before the rename: time travel reads the old schema
    old = mere.spark.read(spark, uri, "orders", version=2)
    assert old.columns == first.table("orders").schema.names
    assert rows(old) == rows(first.table("orders").scan())


def test_native_read_of_an_empty_table(spark, uri):
    mere.connect(uri).create_table("orders", ORDERS, partition_by=["country"])
    df = mere.spark.read(spark, uri, "orders")
    assert df.count() == 0
    assert df.columns == ORDERS.names
    assert [f.dataType.simpleString() for f in df.schema] == [
        "bigint",
        "bigint",
        "double",
        "string",
    ]


def test_native_filter_prunes_files(spark, uri):
    db = mere.connect(uri)
    db.create_table("orders", ORDERS, partition_by=["country"])
    for start in range(0, 300, 100):
        db.table("orders").append(orders(start, 100))
    assert len(mere.spark.read(spark, uri, "orders").inputFiles()) == 9

    where = "\"country\" = 'FR' AND id >= 200"  # mere's dialect: "country" is a column
    df = mere.spark.read(spark, uri, "orders", filter=where)
    assert len(df.inputFiles()) == 1
    expected = db.table("orders").scan(filter=where)
    assert rows(df) == rows(expected)


def test_native_read_of_every_partition_type_and_escaped_values(spark, uri):
    import datetime as dt

    db = mere.connect(uri)
    table = pa.table(
        {
            "id": [1, 2, 3, 4],
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, h, 30, tzinfo=dt.UTC) for h in (1, 2, 3, 3)],
                pa.timestamp("us", tz="UTC"),
            ),
            "day": pa.array([dt.date(2024, 1, d) for d in (1, 2, 3, 3)]),
            "price": pa.array(["1.5", "2.25", "-3.0", None]).cast(pa.decimal128(6, 2)),
            "flag": [True, False, None, True],
            "tag": ["a/b", "c=d", "x}y{z", "50% [ok]?"],
            "value": [1.0, 2.0, 3.0, 4.0],
        }
    )
    db.create_table("t", table.schema, partition_by=["ts", "day", "price", "flag", "tag"])
    db.table("t").append(table)
    assert rows(mere.spark.read(spark, uri, "t")) == rows(db.table("t").scan())


def test_tables_spark_parquet_cannot_read_are_read_through_the_data_source(spark, uri):
    """Nanosecond timestamps: Spark's Parquet reader refuses them, the data source truncates."""
    import pytest

    db = mere.connect(uri)
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns", tz="UTC"))])
    db.create_table("t", schema)
    db.table("t").append(
        pa.table({"id": [1], "at": pa.array([1_500], pa.timestamp("ns", tz="UTC"))}, schema=schema)
    )
    (row,) = mere.spark.read(spark, uri, "t").collect()  # the default: auto
    assert row["id"] == 1
    assert row["at"].microsecond == 1  # 1,500 ns, truncated to Spark's microseconds
    with pytest.raises(ValueError, match="nanoseconds"):
        mere.spark.read(spark, uri, "t", method="native")
    with pytest.raises(ValueError, match="method must be"):
        mere.spark.read(spark, uri, "t", method="jvm")  # type: ignore[arg-type]


def test_widened_columns_spark_parquet_misreads_go_through_the_data_source(spark, uri):
    """Spark's Parquet reader read old UINT32 files of a column widened to DOUBLE as -1.0
    and failed on INT16 files of one widened to REAL: such tables take the data source."""
    import pytest

    db = mere.connect(uri)
    widenings = {"u": (pa.uint32(), pa.float64()), "s": (pa.int16(), pa.float32())}
    widenings["i"] = (pa.int8(), pa.int64())  # one Spark reads right
    schema = pa.schema([("id", pa.int64())] + [(n, old) for n, (old, _) in widenings.items()])
    db.create_table("t", schema)
    db.table("t").append(
        pa.table({"id": [1], "u": [4294967295], "s": [-7], "i": [-3]}, schema=schema)
    )
    for name, (_, new) in widenings.items():
        with db.transaction() as tx:
            tx.alter_table("t").widen_column(name, new)
    db.table("t").append([{"id": 2, "u": 0.5, "s": 1.5, "i": 2**40}])
    expected = sorted(db.table("t").scan().to_pylist(), key=lambda r: r["id"])
    assert expected[0] == {"id": 1, "u": 4294967295.0, "s": -7.0, "i": -3}
    assert rows(mere.spark.read(spark, uri, "t")) == rows(db.table("t").scan())  # auto
    with pytest.raises(ValueError, match="'u' was widened from uint32"):
        mere.spark.read(spark, uri, "t", method="native")

    db.create_table("ok", pa.schema([("i", pa.int8()), ("f", pa.float32())]))
    db.table("ok").append([{"i": 1, "f": 0.5}])
    with db.transaction() as tx:
        tx.alter_table("ok").widen_column("i", pa.int32()).widen_column("f", pa.float64())
    with db.transaction() as tx:
        tx.alter_table("ok").widen_column("i", pa.float64())
    native = mere.spark.read(spark, uri, "ok", method="native")  # int8 -> int32 -> double
    assert [(r["i"], r["f"]) for r in native.collect()] == [(1.0, 0.5)]


def test_a_naive_timestamp_is_utc_on_every_read_path(spark, uri, monkeypatch):
    """As everywhere in mere: the data source path read it in the driver's zone."""
    import datetime as dt
    import time

    db = mere.connect(uri)
    db.create_table("t", pa.schema([("id", pa.int64())]))
    db.table("t").append(pa.table({"id": [1]}))
    first = db.snapshot(db.version).timestamp  # an aware datetime
    db.table("t").append(pa.table({"id": [2]}))
    naive = first.astimezone(dt.UTC).replace(tzinfo=None) + dt.timedelta(microseconds=500)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        for method in ("auto", "native", "datasource"):
            df = mere.spark.read(spark, uri, "t", timestamp=naive, method=method)
            assert sorted(r.id for r in df.collect()) == [1], method
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_filter_keeps_the_rows_mere_keeps_on_both_paths(spark, uri):
    """Spark's SQL read these conditions otherwise (a REAL literal, LIKE's escape, text
    against a zoned timestamp, division by zero): the rows are mere's."""
    import datetime as dt

    utc = dt.UTC
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("f32", pa.float32()),
            ("s", pa.string()),
            ("tz", pa.timestamp("us", tz="Europe/Paris")),
            ("u", pa.uint32()),
            ("f64", pa.float64()),
        ]
    )
    db = mere.connect(uri)
    db.create_table("t", schema)
    moments = [dt.datetime(2024, 1, 1, h, m, tzinfo=utc) for h, m in ((9, 30), (8, 30), (9, 0))]
    db.table("t").append(
        pa.table(
            {
                "id": [1, 2, 3, 4],
                "f32": pa.array([0.1, 0.5, 2.7, None], pa.float32()),
                "s": ["a\\b", "a%", "abc", "a\\%x"],
                "tz": [*moments, dt.datetime(2024, 1, 1, 10, 0, tzinfo=utc)],
                "u": pa.array([4294967295, 0, 7, None], pa.uint32()),
                "f64": [float("nan"), -0.0, 5.0, None],
            },
            schema=schema,
        )
    )
    conditions = [
        "f32 = 0.1",
        "f32 IN (0.1, 0.5)",
        "NOT (f32 = 2.7)",
        "s LIKE 'a\\%'",
        "tz < '2024-01-01 10:00:00'",
        "hour(tz) = 10",
        "u / 0 IS NULL",
        "u > 4000000000",
        "true",
        "f64 = 'NaN'::double",  # handed to Spark: NaN equals NaN and sorts above, there too
        "f64 > 5",
        "f64 = 0 AND s <> 'zz'",
        "f64 IN (0, 5)",
        "f64 <> 5 AND f32 > 0.2",
        "s LIKE 'a%' AND u IS NOT NULL AND id >= 2",
    ]
    for condition in conditions:
        expected = sorted(db.table("t").scan(filter=condition).column("id").to_pylist())
        for method in ("native", "datasource"):
            df = mere.spark.read(spark, uri, "t", filter=condition, method=method)
            assert sorted(r.id for r in df.collect()) == expected, (condition, method)
    with pytest.raises(mere.InvalidExpression, match="nope"):
        mere.spark.read(spark, uri, "t", filter="nope = 1")  # on the driver, before a job


def test_conjuncts_spark_reads_alike_are_spark_s_and_the_rest_mere_s(spark, uri):
    """Spark skips row groups by what it is handed; only the rest runs in Python."""
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("id", pa.int64()), ("s", pa.string())]))
    db.table("t").append(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}))

    def plan(condition: str) -> str:
        df = mere.spark.read(spark, uri, "t", filter=condition, method="native")
        return str(df._jdf.queryExecution().executedPlan().toString())

    only_spark = plan("id = 2 AND s IN ('a', 'b')")
    assert "EqualTo(id,2)" in only_spark and "MapInArrow" not in only_spark
    assert "MapInArrow" not in plan("s LIKE 'b%'")
    mixed = plan("id >= 2 AND s LIKE 'b\\%'")  # a backslash: no escape in mere's LIKE
    assert "GreaterThanOrEqual(id,2)" in mixed and "MapInArrow" in mixed
