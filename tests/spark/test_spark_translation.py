"""Pushed-down filters to mere SQL, and Spark types for table types (no Spark session)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNull,
    LessThanOrEqual,
    Not,
    StringContains,
    StringStartsWith,
)
from pyspark.sql.types import DecimalType, LongType, ShortType, StringType, TimestampType

from mere.log.actions import AddFile, TableMeta
from mere.snapshot.scan import plan_scan
from mere.spark._filters import filter_to_sql, pruning_condition
from mere.spark._types import spark_arrow_schema, spark_schema, spark_type, to_spark_table
from mere.spark.datasource import parse_timestamp, plan_partitions

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("price", pa.decimal128(10, 2)),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
    ]
)
TABLE = TableMeta("0" * 32, "t", SCHEMA, (), {}, 0)


def file_with(**ranges: tuple) -> AddFile:
    """A file whose statistics say each column lies in ``(min, max)``."""
    mins = {k: v[0] for k, v in ranges.items()}
    maxs = {k: v[1] for k, v in ranges.items()}
    stats = {"numRecords": 10, "minValues": mins, "maxValues": maxs, "nullCount": {}}
    return AddFile(TABLE.id, "part-x.parquet", 1, 10, {}, stats, 0)


@pytest.mark.parametrize(
    ("spark_filter", "sql"),
    [
        (EqualTo(("id",), 3), '"id" = 3'),
        (GreaterThan(("name",), "it's"), "\"name\" > 'it''s'"),
        (LessThanOrEqual(("price",), Decimal("1.50")), '"price" <= 1.50'),
        (In(("id",), (1, 2, None)), '"id" IN (1, 2)'),
        (IsNull(("name",)), '"name" IS NULL'),
        (Not(EqualTo(("id",), 3)), 'NOT ("id" = 3)'),
        (EqualNullSafe(("id",), 3), '("id" IS NOT NULL AND "id" = 3)'),
        (StringStartsWith(("name",), "a_%"), "\"name\" LIKE 'a\\_\\%%' ESCAPE '\\'"),
        (StringContains(("name",), "x"), "\"name\" LIKE '%x%' ESCAPE '\\'"),
        (EqualTo(("day",), dt.date(2024, 1, 31)), "\"day\" = DATE '2024-01-31'"),
        (
            EqualTo(
                ("ts",), dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
            ),
            "\"ts\" = '2024-01-01 10:00:00+00:00'",
        ),
        (EqualTo(("a", "b"), 1), None),
        (EqualTo(("id",), [1, 2]), None),
        (In(("id",), (None,)), None),
    ],
)
def test_filters_translate(spark_filter, sql):
    assert filter_to_sql(spark_filter) == sql


def test_translated_filters_bind_and_prune():
    condition = pruning_condition(
        TABLE,
        [
            GreaterThan(("id",), 100),
            EqualTo(("name",), 5),  # a number against a string column: not used
            EqualTo(("ts",), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
        ],
    )
    assert condition is not None and "name" not in condition
    plan = plan_scan(TABLE, [], condition)
    low = file_with(id=(0, 50), ts=("2024-01-01 00:00:00.000000Z", "2024-01-01 00:00:00.000000Z"))
    high = file_with(
        id=(90, 150), ts=("2023-12-31 00:00:00.000000Z", "2024-01-02 00:00:00.000000Z")
    )
    assert plan.select([low, high]) == [high]


def test_null_safe_inequality_keeps_files_of_nulls():
    condition = pruning_condition(TABLE, [Not(EqualNullSafe(("id",), 3))])
    assert condition is not None
    only_nulls = AddFile(
        TABLE.id, "p.parquet", 1, 10, {}, {"numRecords": 10, "nullCount": {"id": 10}}, 0
    )
    assert plan_scan(TABLE, [], condition).select([only_nulls]) == [only_nulls]


def test_spark_types_of_table_types():
    assert spark_type(pa.uint8()) == ShortType()
    assert spark_type(pa.uint32()) == LongType()
    assert spark_type(pa.uint64()) == DecimalType(20, 0)
    assert spark_type(pa.large_string()) == StringType()
    assert spark_type(pa.timestamp("ns", tz="Europe/Paris")) == TimestampType()


def test_batches_match_the_arrow_schema_spark_expects():
    data = pa.table(
        {
            "n": pa.array([1, None], pa.uint16()),
            "s": pa.array(["a", "b"], pa.large_string()),
            "t": pa.array([1_500, None], pa.timestamp("ns", tz="Europe/Paris")),
        }
    )
    target = spark_arrow_schema(spark_schema(data.schema))
    converted = to_spark_table(data, target)
    assert converted.schema.equals(target)
    assert str(target.field("t").type) == "timestamp[us, tz=UTC]"
    assert converted.column("t")[0].as_py() == dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)


def test_timestamp_option_forms():
    assert parse_timestamp("1700000000000") == 1700000000000
    assert parse_timestamp("2024-01-01 10:00:00") == dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="timestampAsOf"):
        parse_timestamp("yesterday")


def test_files_are_split_and_packed_by_size():
    def sized(size: int) -> AddFile:
        return AddFile(TABLE.id, f"p{size}.parquet", size, 1, {}, None, 0)

    mib = 1024 * 1024
    small = plan_partitions([sized(s * mib) for s in (3, 2, 1, 1)])
    assert sorted(sorted(p[0].size // mib for p in g) for g in small) == [[1, 2], [1, 3]]
    big = plan_partitions([sized(400 * mib)], min_partitions=8)
    assert len(big) == 8  # 50 MiB splits: eight parts of one file
    assert sorted(part for [(_, part, parts)] in big if parts == 8) == list(range(8))
