"""Edge cases of the native Spark write (``method="native"``), checked against the Arrow path.

Every test writes the same DataFrame twice in one transaction, once with
Spark's Parquet writer and once with the Arrow path (the reference), then
requires the same rows, partition values, null counts and min/max (native
writes leave floating-point min/max out). Independently of the Arrow path,
:func:`_assert_stats_match_data` recomputes each native file's statistics
from the rows the file holds, so a wrong statistic cannot hide behind the
same wrong statistic on both paths.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_helpers import data_files

import mere
import mere.schema
import mere.spark
from mere.data.values import MAX_STAT_STRING, stat_to_json
from mere.errors import ConstraintViolation, StorageError
from mere.schema import has_statistics, physical_name
from mere.spark import _core, _native_write
from mere.spark._native_write import REBASE_CONF, TIMESTAMP_CONF, _write_settings
from mere.storage.local import TEMP_PREFIX

UTC = dt.UTC


# --- helpers -------------------------------------------------------------------------


def _log_files(uri: str, table: str) -> list[tuple[Any, ...]]:
    """What the log records of each live file, except its name and size."""
    out = []
    for add in mere.connect(uri).snapshot().table(table).files:
        stats = add.stats or {}
        out.append(
            (
                sorted(add.partition_values.items(), key=repr),
                add.rows,
                sorted(stats.get("nullCount", {}).items()),
                sorted(stats.get("minValues", {}).items()),
                sorted(stats.get("maxValues", {}).items()),
            )
        )
    return sorted(out, key=repr)


def _without(files: list[tuple[Any, ...]], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The log records with the min/max of ``columns`` (floating point) left out."""
    return [
        (
            p,
            r,
            n,
            [kv for kv in lo if kv[0] not in columns],
            [kv for kv in hi if kv[0] not in columns],
        )
        for p, r, n, lo, hi in files
    ]


def _rows(uri: str, table: str, key: str = "id") -> dict[str, list[str]]:
    """Every column of ``table`` sorted by ``key``, as reprs (NaN equals NaN)."""
    data = mere.connect(uri).table(table).scan().sort_by(key)
    return {name: list(map(repr, data.column(name).to_pylist())) for name in data.column_names}


def _assert_stats_match_data(uri: str, table: str) -> None:
    """Each file's statistics are what its rows say (§7): exact, or left out where allowed."""
    db = mere.connect(uri)
    meta = db.snapshot().table(table)
    root = Path(uri)
    by_path = {p.relative_to(root).as_posix(): p for p in data_files(uri)}
    for add in meta.files:
        path = next(p for k, p in by_path.items() if k.endswith("/" + add.path))
        data = pq.ParquetFile(path).read()
        stats = add.stats or {}
        assert stats["numRecords"] == add.rows == data.num_rows
        for field in meta.schema:
            if field.name in meta.partition_by:
                continue
            name = physical_name(field)
            if name not in data.column_names:  # added after the file was written
                assert name not in stats["nullCount"] and name not in stats["minValues"]
                continue
            column = data.column(name)
            assert stats["nullCount"][name] == column.null_count, name
            lo = stats["minValues"].get(name)
            hi = stats["maxValues"].get(name)
            assert (lo is None) == (hi is None), name
            expected_lo = expected_hi = None
            if has_statistics(field.type) and column.null_count < len(column):
                mm = pc.min_max(column)
                expected_lo, expected_hi = stat_to_json(mm["min"]), stat_to_json(mm["max"])
            if pa.types.is_floating(field.type):
                assert lo is None, name  # native writes leave floating-point min/max out
            elif expected_lo is None or expected_hi is None:
                assert lo is None, (name, lo, hi)
            else:
                assert (lo, hi) == (expected_lo, expected_hi), name


def _no_staging_left(uri: str) -> None:
    assert not list(Path(uri).rglob(f"{TEMP_PREFIX}*"))


def _write_both(
    uri: str,
    df: DataFrame,
    partition_by: Sequence[str] | None = None,
    schema: pa.Schema | None = None,
) -> None:
    """Write ``df`` into tables ``native`` and ``arrow`` (created first if ``schema``)."""
    db = mere.connect(uri)
    if schema is not None:
        for name in ("native", "arrow"):
            db.create_table(name, schema, partition_by=partition_by or ())
        partition_by = None
    with db.transaction() as tx:
        mere.spark.write(tx, df, "native", partition_by=partition_by, method="native")
        mere.spark.write(tx, df, "arrow", partition_by=partition_by, method="arrow")


def _assert_same(uri: str, floats: Sequence[str] = (), key: str = "id") -> None:
    """Tables ``native`` and ``arrow`` hold the same rows and the same log records."""
    assert _rows(uri, "native", key) == _rows(uri, "arrow", key)
    assert _without(_log_files(uri, "native"), floats) == _without(_log_files(uri, "arrow"), floats)
    _assert_stats_match_data(uri, "native")
    _no_staging_left(uri)


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str | None) -> Iterator[None]:
    """Set (None: unset) one Spark SQL conf for the duration of a test, then restore it."""
    before = spark.conf.get(key, None)
    if value is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


# --- decimals ------------------------------------------------------------------------

DECIMALS = [
    (
        0,
        Decimal("-1234567890123456789012345678.1234567890"),
        Decimal("99999999999999999999"),
        Decimal("-999.99"),
    ),
    (1, Decimal("0.0000001"), Decimal("-99999999999999999999"), Decimal("0.01")),
    (2, Decimal("0"), Decimal("0"), Decimal("0")),
    (3, Decimal("9999999999999999999999999999.9999999999"), Decimal("1"), Decimal("999.99")),
    (4, Decimal("-0.0000000001"), None, None),
    (5, None, Decimal("-1"), Decimal("-0.5")),
    (6, Decimal("1E-10"), Decimal("12345678901234567890"), Decimal("-0.01")),
]
DECIMAL_DDL = "id long, d38 decimal(38,10), d20 decimal(20,0), d5 decimal(5,2)"


@pytest.mark.parametrize("partition_by", [None, ["d38"], ["d20", "d5"]])
def test_decimals_high_precision_and_negative(spark, uri, partition_by):
    """decimal(38,10) and (20,0) are FIXED_LEN_BYTE_ARRAY, (5,2) INT32: stats and partitions."""
    df = spark.createDataFrame(DECIMALS, DECIMAL_DDL).repartition(2, "id")
    _write_both(uri, df, partition_by)
    _assert_same(uri)
    db = mere.connect(uri)
    assert db.table("native").scan(filter="d20 = -99999999999999999999").num_rows == 1
    assert db.table("native").scan(filter="d38 < 0").num_rows == 2


# --- dates and timestamps ------------------------------------------------------------

INSTANTS = [
    dt.datetime(1, 1, 1, tzinfo=UTC),
    dt.datetime(1582, 10, 4, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(1899, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(1970, 1, 1, tzinfo=UTC),
    dt.datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=UTC),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    None,
]
DAYS = [
    dt.date(1, 1, 1),
    dt.date(1582, 10, 4),
    dt.date(1582, 10, 15),
    dt.date(1969, 12, 31),
    dt.date(1970, 1, 1),
    dt.date(2000, 2, 29),
    dt.date(9999, 12, 31),
    None,
]
TIME_DDL = "id long, at timestamp, day date, local timestamp_ntz"


def _times() -> list[tuple[Any, ...]]:
    return [
        (i, at, day, None if at is None else at.replace(tzinfo=None))
        for i, (at, day) in enumerate(zip(INSTANTS, DAYS, strict=True))
    ]


@pytest.mark.parametrize("partition_by", [None, ["day"], ["at"], ["day", "at"]])
def test_dates_and_timestamps_far_from_1970(spark, uri, partition_by):
    """Year 1 to 9999, either side of 1970 and of the Julian/Gregorian switch, to the µs."""
    df = spark.createDataFrame(_times(), TIME_DDL).repartition(2, "id")
    _write_both(uri, df, partition_by)
    _assert_same(uri)
    native = mere.connect(uri).table("native").scan().sort_by("id")
    assert native.column("at").to_pylist() == INSTANTS
    assert native.column("day").to_pylist() == DAYS


def test_legacy_datetime_rebase_in_the_session_does_not_shift_dates(spark, uri):
    """A session asking Spark to rebase old dates to the Julian calendar must not change them."""
    df = spark.createDataFrame(_times(), TIME_DDL)
    with (
        _session_conf(spark, REBASE_CONF, "LEGACY"),
        _session_conf(spark, "spark.sql.parquet.int96RebaseModeInWrite", "LEGACY"),
    ):
        _write_both(uri, df)
        assert spark.conf.get(REBASE_CONF) == "LEGACY"  # the session's own setting is back
    _assert_same(uri)
    native = mere.connect(uri).table("native").scan().sort_by("id")
    assert native.column("day").to_pylist() == DAYS
    assert native.column("at").to_pylist() == INSTANTS


def test_a_session_time_zone_other_than_utc(spark, uri):
    """Partition values come from epoch microseconds, never from the session's local text."""
    df = spark.createDataFrame(_times(), TIME_DDL)
    with _session_conf(spark, "spark.sql.session.timeZone", "America/Los_Angeles"):
        _write_both(uri, df, ["at"])
    _assert_same(uri)


# --- strings and binary --------------------------------------------------------------

LONG = "x" * (MAX_STAT_STRING + 1)
HUGE = "y" * 5000  # over 4 KiB: as a chunk's min or max, parquet-mr writes no statistics
WIDE = "é" * MAX_STAT_STRING  # 256 characters, 512 bytes: recorded


def _strings() -> list[tuple[Any, ...]]:
    """Groups 0..5: short, one too long, one over 4 KiB, all null, wide characters, empty."""
    groups = [
        ["a", "é ü 漢字 🎉", "", None, "b"],
        ["a", LONG],
        ["m", HUGE, None, None],
        [None, None],
        [WIDE, "é", "a"],
        ["", ""],
    ]
    rows = []
    for g, values in enumerate(groups):
        for v in values:
            blob = None if v is None else v.encode()[:7]
            rows.append((len(rows), g, v, blob))
    return rows


@pytest.mark.parametrize("partition_by", [None, ["g"]])
def test_long_wide_empty_and_null_strings(spark, uri, partition_by):
    """String min/max: left out over 256 characters or when footers lack them; binary: none."""
    df = spark.createDataFrame(_strings(), "id long, g int, s string, b binary")
    _write_both(uri, df.repartition(1), partition_by)
    _assert_same(uri)
    if partition_by:
        stats = {
            a.partition_values["g"]: a.stats
            for a in mere.connect(uri).snapshot().table("native").files
        }
        assert stats["0"]["minValues"]["s"] == "" and stats["0"]["maxValues"]["s"] == "é ü 漢字 🎉"
        assert "s" not in stats["1"]["minValues"]  # a value longer than 256 characters
        assert "s" not in stats["2"]["minValues"] and stats["2"]["nullCount"]["s"] == 2
        assert stats["4"]["maxValues"]["s"] == WIDE


def test_string_partition_values_non_ascii_and_long(spark, uri):
    """Values that Spark's directory names and ``unquote`` could garble."""
    values = ["é ü", "漢字", "🎉", " lead and trail ", "a+b", "%41", "x" * 200, "\\", "\t"]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "id long, p string")
    _write_both(uri, df, ["p"])
    _assert_same(uri)


def test_string_partition_values_holding_nul(spark, uri):
    """Spark cannot name a directory after them; the Arrow path escapes NUL as %00."""
    values = ["a\x00b", "\x00", "h", "h00", "61", "", None]
    df = spark.createDataFrame(
        [(i, v, v) for i, v in enumerate(values)], "id long, p string, s string"
    )
    _write_both(uri, df, ["p"])
    _assert_same(uri)
    table = mere.connect(uri).table("native")
    assert table.scan(filter="p = 'h'").column("id").to_pylist() == [2]
    assert sorted(table.scan().column("p").to_pylist(), key=repr) == sorted(values, key=repr)


def test_collated_char_and_varchar_strings(spark, uri):
    """Spark refuses to partition by a collated string; mere keeps "a" and "A" apart."""
    df = spark.sql(
        "SELECT id, CAST(s AS STRING COLLATE UTF8_LCASE) AS s,"
        " CAST(s AS STRING COLLATE UTF8_LCASE) AS p, CAST(s AS CHAR(3)) AS c,"
        " CAST(s AS VARCHAR(5)) AS v"
        " FROM VALUES (1L, 'A'), (2L, 'a'), (3L, 'b'), (4L, 'B '), (5L, NULL) AS t(id, s)"
    )
    _write_both(uri, df, ["p"])
    _assert_same(uri)
    files = mere.connect(uri).snapshot().table("native").files
    assert sorted(a.partition_values["p"] or "-" for a in files) == ["-", "A", "B ", "a", "b"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # Footers would hold bounds ("abcd", "efgi"), not the min/max.
        ("parquet.statistics.truncate.length", "4"),
        # Footers would hold no min/max at all, for every column or for one.
        ("parquet.column.statistics.enabled", "false"),
        ("parquet.column.statistics.enabled#s", "false"),
    ],
)
def test_hadoop_settings_that_would_cut_footer_statistics(spark, uri, key, value):
    """A Hadoop configuration must not make footers hold less than mere records."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    df = spark.createDataFrame(
        [(i, letters[i:] * 2, None if i % 2 else i) for i in range(5)],
        "id long, s string, n long",
    )
    with _hadoop_conf(spark, key, value):
        _write_both(uri, df.repartition(1))
    _assert_same(uri)
    (add,) = mere.connect(uri).snapshot().table("native").files
    assert add.stats is not None
    assert add.stats["minValues"] == {"id": 0, "s": letters * 2, "n": 0}


def test_dates_and_timestamps_after_year_9999(spark, uri):
    """Spark holds them; they have no Python value, so their min/max are left out."""
    df = spark.range(0, 3, 1, 1).select(
        "id",
        F.expr("make_date(10000 + cast(id as int), 1, 1)").alias("d"),
        F.expr("timestamp_micros(253402300800000000 + id)").alias("at"),
        F.expr("date'2000-01-01' + cast(id as int)").alias("ok"),
    )
    db = mere.connect(uri)
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "native", method="native") == 3
    data = db.table("native").scan().sort_by("id")
    assert data.column("d").cast(pa.int32()).to_pylist() == [2932897, 2933263, 2933628]
    assert data.column("at").cast(pa.int64()).to_pylist() == [
        253402300800000000 + i for i in range(3)
    ]
    (add,) = db.snapshot().table("native").files
    assert add.stats is not None
    assert add.stats["minValues"] == {"id": 0, "ok": "2000-01-01"}
    assert add.stats["nullCount"] == {"id": 0, "d": 0, "at": 0, "ok": 0}


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_a_partition_value_after_year_9999_is_refused(spark, uri, method):
    """Its text (``10000-01-01``) does not read back: the table would become unreadable."""
    df = spark.range(0, 2, 1, 1).select(
        "id", F.expr("make_date(9999 + cast(id as int), 1, 1)").alias("d")
    )
    db = mere.connect(uri)
    with pytest.raises(Exception, match="10000-01-01"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", partition_by=["d"], method=method)
    assert "t" not in db.tables()
    assert data_files(uri) == []
    _no_staging_left(uri)


# --- empty and null ------------------------------------------------------------------


@pytest.mark.parametrize("partition_by", [None, ["p"]])
def test_an_empty_dataframe(spark, uri, partition_by):
    """No rows: no file (Spark writes an empty one when unpartitioned), the table exists."""
    df = spark.createDataFrame([], "id long, p string, v double")
    db = mere.connect(uri)
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t", partition_by=partition_by, method="native") == 0
    assert db.table("t").scan().num_rows == 0
    assert db.snapshot().table("t").files == []
    assert data_files(uri) == []
    _no_staging_left(uri)


def test_all_null_columns(spark, uri):
    """Footers of all-null columns have null counts and no min/max; partition values null."""
    ddl = "id long, i int, s string, d decimal(30,2), day date, at timestamp, f double, p string"
    df = spark.createDataFrame(
        [(i, None, None, None, None, None, None, None) for i in range(5)], ddl
    )
    _write_both(uri, df.repartition(2, "id"), ["p"])
    _assert_same(uri, floats=["f"])
    for add in mere.connect(uri).snapshot().table("native").files:
        assert add.stats is not None
        assert add.stats["minValues"] == {"id": add.stats["minValues"]["id"]}


# --- partitions ----------------------------------------------------------------------


@pytest.mark.parametrize("tasks", [1, 5])
def test_many_partition_values_in_one_or_many_tasks(spark, uri, tasks):
    """One file per task and partition value, as on the Arrow path."""
    df = spark.range(0, 400).select(
        F.col("id"),
        (F.col("id") % 37).cast("int").alias("p"),
        (F.col("id") * 7 % 101).alias("v"),
        F.concat(F.lit("s"), F.col("id").cast("string")).alias("s"),
    )
    _write_both(uri, df.repartition(tasks), ["p"])
    _assert_same(uri)
    assert len(mere.connect(uri).snapshot().table("native").files) >= 37


def test_boolean_int8_int16_partitions_with_nulls_in_several_columns(spark, uri):
    """Spark's text of these types is Arrow's; nulls in several partition columns at once."""
    rows = [
        (0, True, -128, -32768, "a"),
        (1, False, 127, 32767, ""),
        (2, None, None, None, None),
        (3, None, 0, None, "a"),
        (4, True, None, 1, None),
        (5, None, None, None, None),
    ]
    df = spark.createDataFrame(
        rows, "id long, flag boolean, tiny tinyint, small smallint, s string"
    )
    # The same types as data columns too (footer statistics of INT32 with a width).
    df = df.select("*", *(F.col(c).alias(f"data_{c}") for c in ("flag", "tiny", "small")))
    _write_both(uri, df.repartition(2, "id"), ["flag", "tiny", "small", "s"])
    _assert_same(uri)
    db = mere.connect(uri)
    nulls = db.table("native").scan(filter="flag IS NULL AND tiny IS NULL AND small IS NULL")
    assert sorted(nulls.column("id").to_pylist()) == [2, 5]


# --- column names and schema evolution -----------------------------------------------

ODD_NAMES = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("a b", pa.int64()),
        pa.field("k=v,;{}()", pa.int32()),
        pa.field("Mixed", pa.string()),
        pa.field("p", pa.string()),
    ]
)


def test_column_names_that_need_quoting_and_differ_in_case(spark, uri):
    """Spaces, separators, another case and another order than the table's columns."""
    df = spark.createDataFrame(
        [(f"p{i % 3}", i, i * 10, -i, f"m{i % 2}") for i in range(9)],
        "P string, ID long, `A B` long, `K=V,;{}()` int, mixed string",  # not the table's order
    )
    _write_both(uri, df.repartition(2), ["p"], schema=ODD_NAMES)
    _assert_same(uri)


def test_column_names_with_a_dot_or_a_backtick(spark, uri):
    """Checked against the data only: the Arrow path's mapInArrow cannot take these names."""
    db = mere.connect(uri)
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("we`ird", pa.int64()), pa.field("x.y", pa.string())]
    )
    db.create_table("native", schema)
    df = spark.createDataFrame(
        [(1, -5, "a"), (2, None, "b")], "id long, `WE``IRD` long, `X.Y` string"
    )
    with db.transaction() as tx:
        mere.spark.write(tx, df, "native", method="native")
    assert db.table("native").scan().sort_by("id").to_pylist() == [
        {"id": 1, "we`ird": -5, "x.y": "a"},
        {"id": 2, "we`ird": None, "x.y": "b"},
    ]
    _assert_stats_match_data(uri, "native")
    stats = db.snapshot().table("native").files[0].stats or {}
    assert stats["minValues"] == {"id": 1, "we`ird": -5, "x.y": "a"}


def _evolve(uri: str, table: str) -> None:
    """Rename ``a`` to ``x``, then add a new ``a``: files name the columns ``a`` and ``a__1``."""
    db = mere.connect(uri)
    with db.transaction() as tx:
        tx.alter_table(table).rename_column("a", "x").add_column("a", pa.string())


def test_a_renamed_column_and_a_column_added_later(spark, uri):
    """Files are written under physical names; stats are keyed by them."""
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("a", pa.int64()), pa.field("p", pa.int32())]
    )
    db = mere.connect(uri)
    for table in ("native", "arrow"):
        db.create_table(table, schema, partition_by=["p"])
    old = spark.createDataFrame([(0, 100, 1)], "id long, a long, p int")
    with db.transaction() as tx:
        mere.spark.write(tx, old, "native", method="native")
        mere.spark.write(tx, old, "arrow", method="arrow")
    for table in ("native", "arrow"):
        _evolve(uri, table)
    assert [physical_name(f) for f in db.snapshot().table("native").schema] == [
        "id",
        "a",
        "p",
        "a__1",
    ]
    new = spark.createDataFrame(
        [(1, 200, 1, "new"), (2, None, 2, None)], "id long, x long, p int, a string"
    )
    with db.transaction() as tx:
        mere.spark.write(tx, new, "native", method="native")
        mere.spark.write(tx, new, "arrow", method="arrow")
    _assert_same(uri)
    native = db.table("native").scan().sort_by("id")
    assert native.column("x").to_pylist() == [100, 200, None]
    assert native.column("a").to_pylist() == [None, "new", None]


def test_a_column_added_under_a_renamed_columns_old_name_in_another_case(spark, uri):
    """``a`` renamed to ``x`` then ``A`` added: ``A`` gets its own physical name."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("a", pa.int64())])
    db = mere.connect(uri)
    db.create_table("t", schema)
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("a", "x").add_column("A", pa.int64())
    assert [physical_name(f) for f in db.snapshot().table("t").schema] == ["id", "a", "A__1"]
    df = spark.createDataFrame([(1, 10, 20)], "id long, x long, A long")
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t", method="native") == 1
    assert db.table("t").scan().to_pylist() == [{"id": 1, "x": 10, "A": 20}]
    assert [r.asDict() for r in mere.spark.read(spark, uri, "t").collect()] == [
        {"id": 1, "x": 10, "A": 20}
    ]
    _no_staging_left(uri)


def test_physical_names_that_differ_only_in_case(spark, uri, monkeypatch):
    """Tables from before physical names were compared ignoring case may hold ``a`` and ``A``.

    Spark's writer refuses such a pair, so the native write does not apply
    (``auto`` writes with the Arrow path). The old naming is injected.
    """
    monkeypatch.setattr(mere.schema, "fresh_physical_name", lambda schema, name: name)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("a", pa.int64())])
    db = mere.connect(uri)
    db.create_table("t", schema)
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("a", "x").add_column("A", pa.int64())
    assert [physical_name(f) for f in db.snapshot().table("t").schema] == ["id", "a", "A"]
    df = spark.createDataFrame([(1, 10, 20)], "id long, x long, A long")
    with pytest.raises(ValueError, match="'a' and 'A'"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t", method="native")
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t") == 1
    assert db.table("t").scan().to_pylist() == [{"id": 1, "x": 10, "A": 20}]
    # Reads take the data source, which reads the files with pyarrow.
    assert [r.asDict() for r in mere.spark.read(spark, uri, "t").collect()] == [
        {"id": 1, "x": 10, "A": 20}
    ]
    with pytest.raises(ValueError, match="one column to Spark"):
        mere.spark.read(spark, uri, "t", method="native")
    _no_staging_left(uri)


def test_a_column_named_like_the_staging_partition_column(spark, uri):
    """The encoded partition column's name must not collide with a column, ignoring case."""
    schema = pa.schema(
        [
            pa.field("__MERE_PARTITION_0", pa.int64()),
            pa.field("id", pa.int64()),
            pa.field("p", pa.string()),
        ]
    )
    df = spark.createDataFrame(
        [(i * 2, i, f"p{i % 2}") for i in range(4)], "__MERE_PARTITION_0 long, id long, p string"
    )
    _write_both(uri, df, ["p"], schema=schema)
    _assert_same(uri)


# --- row groups, files, session settings ---------------------------------------------


@contextmanager
def _hadoop_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set one Hadoop setting of the session (what Spark's Parquet writer reads) for a test."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = conf.get(key)
    conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            conf.unset(key)
        else:
            conf.set(key, before)


def test_statistics_merge_over_many_row_groups(spark, uri):
    """Small Parquet blocks: min/max come from several row groups of each file."""
    df = spark.range(0, 3000, 1, 2).select(
        F.col("id"),
        (F.lit(1000) - F.col("id")).alias("down"),
        F.when(F.col("id") == 1500, F.lit(LONG)).otherwise(F.col("id").cast("string")).alias("s"),
        F.when(F.col("id") == 2999, F.lit(HUGE)).otherwise(F.lit("k")).alias("t"),
        (F.col("id") % 3).cast("int").alias("p"),
        F.expr("cast(id - 1500 as decimal(25, 3)) / 7").cast("decimal(25,3)").alias("d"),
        F.expr("date_add(date'1900-01-01', cast(id * 10 as int))").alias("day"),
    )
    with _hadoop_conf(spark, "parquet.block.size", "2048"):
        _write_both(uri, df, ["p"])
    native_files = data_files(uri)
    groups = [pq.read_metadata(p).num_row_groups for p in native_files]
    assert max(groups) > 1
    _assert_same(uri)


def test_a_string_over_4_kib_that_is_neither_min_nor_max(spark, uri):
    """Its row group's footer has no statistics; the file's min/max are still known."""
    df = spark.range(0, 3000, 1, 1).select(
        "id",
        F.when(F.col("id") == 1500, F.lit("n" * 5000))
        .when(F.col("id") == 0, F.lit("a"))
        .when(F.col("id") == 2999, F.lit("z"))
        .otherwise(F.lit("m"))
        .alias("s"),
    )
    with _hadoop_conf(spark, "parquet.block.size", "2048"):
        _write_both(uri, df)
    assert any(pq.read_metadata(p).num_row_groups > 1 for p in data_files(uri))  # native
    _assert_same(uri)
    (add,) = mere.connect(uri).snapshot().table("native").files
    assert add.stats is not None
    assert (add.stats["minValues"]["s"], add.stats["maxValues"]["s"]) == ("a", "z")


def test_many_files_per_task(spark, uri):
    """``maxRecordsPerFile``: a task writes several files of one partition."""
    df = spark.range(0, 100, 1, 1).select(
        "id", (F.col("id") % 2).alias("p"), (-F.col("id")).alias("v")
    )
    db = mere.connect(uri)
    with _session_conf(spark, "spark.sql.files.maxRecordsPerFile", "7"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "native", partition_by=["p"], method="native")
    assert len(db.snapshot().table("native").files) == 2 * 8
    assert sorted(db.table("native").scan().column("id").to_pylist()) == list(range(100))
    _assert_stats_match_data(uri, "native")


def test_legacy_parquet_format_in_the_session(spark, uri):
    """``writeLegacyFormat`` writes every decimal as FIXED_LEN_BYTE_ARRAY."""
    df = spark.createDataFrame(DECIMALS, DECIMAL_DDL)
    with _session_conf(spark, "spark.sql.parquet.writeLegacyFormat", "true"):
        _write_both(uri, df, ["d5"])
    _assert_same(uri)


@pytest.mark.parametrize("folder", ["with space", "pct%41#hash", "br[a]{c}", "colon:x", "é"])
def test_a_database_path_with_odd_characters(spark, tmp_path, folder):
    """Spark must write the staging directory the driver then lists, not another path."""
    uri = str(tmp_path / folder / "db")
    df = spark.createDataFrame([(i, f"p{i % 2}") for i in range(4)], "id long, p string")
    _write_both(uri, df, ["p"])
    _assert_same(uri)


# --- session settings and concurrency ------------------------------------------------


def test_the_settings_survive_overlapping_writes(spark):
    """Two writes at once (threads): the first to end must not unset them under the second."""
    with _session_conf(spark, TIMESTAMP_CONF, None), _session_conf(spark, REBASE_CONF, "LEGACY"):
        first = _write_settings(spark)
        second = _write_settings(spark)
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert spark.conf.get(TIMESTAMP_CONF, None) == "TIMESTAMP_MICROS"
        assert spark.conf.get(REBASE_CONF, None) == "CORRECTED"
        second.__exit__(None, None, None)
        assert spark.conf.get(TIMESTAMP_CONF, None) is None
        assert spark.conf.get(REBASE_CONF, None) == "LEGACY"


@pytest.mark.parametrize("before", [None, "INT96", "TIMESTAMP_MILLIS"])
def test_the_timestamp_setting_is_restored_when_the_write_fails(spark, uri, before):
    """The session's own value comes back after a failed Spark job, and nothing is left."""

    @F.udf("long")
    def boom(x):
        if x == 3:
            raise RuntimeError("boom")
        return x

    df = spark.range(0, 10, 1, 2).select(boom("id").alias("id"), F.current_timestamp().alias("at"))
    with _session_conf(spark, TIMESTAMP_CONF, before):
        with pytest.raises(Exception, match="boom"):
            with mere.connect(uri).transaction() as tx:
                mere.spark.write(tx, df, "t", method="native")
        assert spark.conf.get(TIMESTAMP_CONF, None) == before
    _no_staging_left(uri)


def test_the_timestamp_setting_is_restored_when_a_constraint_fails(spark, uri):
    """The same after a NOT NULL violation found in the footers."""
    db = mere.connect(uri)
    db.create_table(
        "t",
        pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("at", pa.timestamp("us", "UTC"))]
        ),
    )
    df = spark.createDataFrame(
        [(None, dt.datetime(2020, 1, 1, tzinfo=UTC))], "id long, at timestamp"
    )
    with _session_conf(spark, TIMESTAMP_CONF, "INT96"):
        with pytest.raises(ConstraintViolation):
            with db.transaction() as tx:
                mere.spark.write(tx, df, "t", method="native")
        assert spark.conf.get(TIMESTAMP_CONF) == "INT96"
    assert data_files(uri) == []
    _no_staging_left(uri)


def test_two_threads_write_the_same_table_at_once(spark, uri):
    """Both land, every file has INT64 microsecond timestamps, no staging directory is left."""
    db = mere.connect(uri)
    db.create_table(
        "t",
        pa.schema(
            [
                pa.field("id", pa.int64()),
                pa.field("at", pa.timestamp("us", "UTC")),
                pa.field("p", pa.int64()),
            ]
        ),
        partition_by=["p"],
    )
    errors: list[BaseException] = []

    def writer(start: int) -> None:
        try:
            for round_ in range(3):
                base = start + round_ * 100
                df = spark.range(base, base + 50, 1, 2).select(
                    "id", F.timestamp_micros("id").alias("at"), (F.col("id") % 3).alias("p")
                )
                with db.transaction() as tx:
                    mere.spark.write(tx, df, "t", method="native")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    with _session_conf(spark, TIMESTAMP_CONF, None):
        threads = [threading.Thread(target=writer, args=(s,)) for s in (0, 10_000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert spark.conf.get(TIMESTAMP_CONF, None) is None
    assert not errors, errors
    ids = sorted(db.table("t").scan().column("id").to_pylist())
    expected = sorted(s + r * 100 + i for s in (0, 10_000) for r in range(3) for i in range(50))
    assert ids == expected
    for path in data_files(uri):
        assert pq.read_schema(path).field("at").type == pa.timestamp("us", tz="UTC")
    _no_staging_left(uri)
    _assert_stats_match_data(uri, "t")


def test_checks_and_replace_where_on_extreme_values(spark, uri):
    """Constraints settled by statistics and partition values of decimals and far dates."""
    db = mere.connect(uri)
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("d", pa.decimal128(38, 10)),
            pa.field("at", pa.timestamp("us", "UTC")),
            pa.field("s", pa.string()),
            pa.field("day", pa.date32()),
        ]
    )
    checks = {"mere.check.dpos": "d > -1", "mere.check.sok": "s <> 'bad'"}
    db.create_table("t", schema, partition_by=["at", "day"], properties=checks)
    ddl = "id long, d decimal(38,10), at timestamp, s string, day date"
    first, last = INSTANTS[0], INSTANTS[-2]

    def frame(rows: list[tuple[Any, ...]]) -> DataFrame:
        # Columns in another order than the table's.
        return spark.createDataFrame(rows, ddl).select("s", "day", "id", "at", "d")

    rows = [
        (
            i,
            Decimal(i) / 3 - Decimal("0.9999999999"),
            first if i % 2 else last,
            LONG if i == 2 else "ok",
            DAYS[0] if i % 3 else None,
        )
        for i in range(6)
    ]
    with db.transaction() as tx:
        mere.spark.write(tx, frame(rows), "t", method="native")
    assert db.table("t").scan().num_rows == 6
    with pytest.raises(ConstraintViolation, match="dpos"):
        with db.transaction() as tx:
            mere.spark.write(
                tx, frame([(9, Decimal("-1"), first, "x", None)]), "t", method="native"
            )
    bad = [(9, Decimal(1), first, "bad", None), (10, Decimal(1), first, LONG, None)]
    with pytest.raises(ConstraintViolation, match=r"1 row\(s\).*sok"):
        with db.transaction() as tx:
            mere.spark.write(tx, frame(bad), "t", method="native")
    where = "at < TIMESTAMP '1000-01-01 00:00:00' AND day = DATE '0001-01-01'"
    with db.transaction() as tx:
        new = frame([(20, Decimal(1), first, "n", DAYS[0])])
        mere.spark.write(tx, new, "t", mode="overwrite", replace_where=where, method="native")
    assert sorted(db.table("t").scan().column("id").to_pylist()) == [0, 2, 3, 4, 20]
    files = data_files(uri)
    with pytest.raises(ConstraintViolation, match="replaceWhere"):
        with db.transaction() as tx:
            outside = frame([(21, Decimal(1), first, "n", None)])
            mere.spark.write(
                tx, outside, "t", mode="overwrite", replace_where=where, method="native"
            )
    assert sorted(db.table("t").scan().column("id").to_pylist()) == [0, 2, 3, 4, 20]
    assert data_files(uri) == files  # the refused write's files are gone
    _no_staging_left(uri)


def test_a_dataframe_read_from_the_table_it_overwrites(spark, uri):
    """Spark reads the table's live files while writing into its staging directory."""
    db = mere.connect(uri)
    df = spark.createDataFrame([(i, i % 3) for i in range(10)], "id long, p long")
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", partition_by=["p"], method="native")
    back = mere.spark.read(spark, uri, "t").filter("id > 4")
    with db.transaction() as tx:
        mere.spark.write(tx, back, "t", mode="overwrite", method="native")
    assert sorted(db.table("t").scan().column("id").to_pylist()) == [5, 6, 7, 8, 9]
    _no_staging_left(uri)


def test_staging_directory_names_are_distinct_ignoring_case_and_normalization(
    spark, uri, monkeypatch
):
    """On macOS and Windows ``p=va`` and ``p=vA`` are one directory: values would merge.

    Staging names must therefore differ in more than case (and than Unicode
    normalization, which some file systems apply), for every value.
    """
    seen: list[str] = []
    real = _native_write._staged_files

    def recording(staging, table):  # type: ignore[no-untyped-def]
        for _dirpath, dirnames, _ in os.walk(staging):
            seen.extend(d for d in dirnames if "=" in d)
        return real(staging, table)

    monkeypatch.setattr(_native_write, "_staged_files", recording)
    values = ["a", "A", "é", "e\u0301", "É", "ss", "SS", "x-y_z.1"]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "id long, p string")
    db = mere.connect(uri)
    with db.transaction() as tx:
        mere.spark.write(tx, df, "t", partition_by=["p"], method="native")
    assert len(seen) == len(values)
    assert len({unicodedata.normalize("NFC", s).casefold() for s in seen}) == len(values)
    rows = sorted(db.table("t").scan().to_pylist(), key=lambda r: r["id"])
    assert [r["p"] for r in rows] == values


def test_a_running_write_keeps_its_staging_directory_fresh(tmp_path, monkeypatch):
    """Vacuum sweeps temp directories unchanged for its retention; a long job must not look so."""
    monkeypatch.setattr(_native_write, "HEARTBEAT_SECONDS", 0.01)
    staging = tmp_path / ".mere-tmp-spark-0"
    staging.mkdir()
    old = 1_000_000_000
    os.utime(staging, (old, old))
    with _native_write._kept_fresh(str(staging)):
        deadline = time.monotonic() + 5
        while staging.stat().st_mtime == old and time.monotonic() < deadline:
            time.sleep(0.01)
    assert staging.stat().st_mtime > old


def test_counted_rows_catch_files_the_driver_cannot_see(spark, uri, monkeypatch):
    """On a cluster without a shared file system the driver finds no files: never commit that."""
    df = spark.range(0, 10, 1, 2).selectExpr("id", "id % 2 AS p")
    db = mere.connect(uri)
    db.create_table("t", pa.schema([("id", pa.int64()), ("p", pa.int64())]))
    meta = _core.table_meta(db.snapshot().table("t"))
    adds = _native_write.write_natively(df, db.store, meta, count_rows=True)
    assert sum(a.rows for a in adds) == 10
    real = _native_write._staged_files
    monkeypatch.setattr(_native_write, "_staged_files", lambda s, t: real(s, t)[:1])
    with pytest.raises(StorageError, match="share the driver's file system"):
        _native_write.write_natively(df, db.store, meta, count_rows=True)
    assert len(data_files(uri)) == len(adds)  # the first write's files only
    _no_staging_left(uri)
