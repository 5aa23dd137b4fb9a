"""The native write: Spark's own Parquet writer makes the data files, mere publishes them.

A Python writer pays, before encoding a single value, for the JVM to turn
its rows into Arrow and hand them over: measured here, about as much CPU as
Spark's whole Parquet write (``docs/benchmarks.md``). So where Spark's
Parquet files can be mere's data files unchanged, the executors run
``df.write.parquet`` into a staging directory of the table, and the driver

1. reads each file's footer: row count, null counts and min/max statistics
   in mere's form (floating-point columns get no min/max: Parquet's
   statistics leave NaN out, mere's record none when one is present);
2. recovers each file's partition values from the staging directory names.
   The DataFrame is partitioned by *encoded* columns (``"v" || value`` for
   strings, days for dates, microseconds for timestamps), so an empty
   string stays distinct from null and no value depends on Spark's text
   formatting;
3. links each file to its place in mere's layout
   (``<col>=<value>/part-<uuid>.parquet``; :meth:`LocalStore.link_if_absent`:
   no copy, fsynced like every data file mere writes);
4. checks NOT NULL from the null counts, and CHECK constraints and
   ``replaceWhere`` by statistics or, where they do not settle it, by
   reading the columns involved. A violation deletes the files and raises.

It applies when the store is a local directory Spark can write to, the
table's columns are flat types whose Parquet form reads back as exactly the
table's Arrow type, and the DataFrame's columns have exactly the table's
Spark types (:func:`native_write_refusal` says why not otherwise; the Arrow
path then writes, casting what needs a cast).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from mere import expr as sqlexpr
from mere.constraints import checks, compile_check
from mere.data.reader import read_files
from mere.data.values import has_statistics, stat_to_json, to_text
from mere.errors import ConstraintViolation
from mere.log.actions import AddFile, TableMeta
from mere.names import NULL_PARTITION, escape_partition_value, name_key
from mere.schema import physical_name
from mere.snapshot.scan import ScanPlan
from mere.spark._files import check_condition, delete_files
from mere.spark._types import spark_arrow_schema
from mere.storage import LocalStore, ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: Parquet compression of native writes: mere's own (zstd), at Spark's default level.
COMPRESSION = "zstd"
#: Spark writes Parquet timestamps as INT96 unless told otherwise; mere's are INT64 micros.
TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"
#: Footers read at once (local files: a few small reads each).
FOOTER_THREADS = 8


def native_write_refusal(store: ObjectStore, table: TableMeta, df_schema: StructType) -> str | None:
    """Why Spark's Parquet writer cannot write this DataFrame into ``table`` (None if it can).

    ``df_schema`` must already match the table (same columns, by name ignoring case).
    """
    if not isinstance(store, LocalStore):
        return f"the store {store.uri} is not a local directory"
    by_key = {name_key(f.name): f for f in df_schema.fields}
    partitions = set(table.partition_columns)
    for field in table.schema:
        column = by_key.get(name_key(field.name))
        if column is None:
            return f"the DataFrame has no column {field.name!r}"
        t = field.type
        if not _flat(t):
            return f"column {field.name!r} has the nested or unsupported type {t}"
        written = spark_arrow_schema(StructType([StructField("c", column.dataType)])).field(0)
        if written.type != t:
            return (
                f"column {field.name!r} is {column.dataType.simpleString()} in the DataFrame; "
                f"Spark would write {written.type}, the table has {t}"
            )
        if field.name in partitions and _encoding(t) is None:
            return f"partition column {field.name!r} has the type {t}"
    return None


def _flat(t: pa.DataType) -> bool:
    return bool(
        pat.is_boolean(t)
        or pat.is_integer(t)
        or pat.is_floating(t)
        or pat.is_string(t)
        or pat.is_binary(t)
        or pat.is_date32(t)
        or (pat.is_timestamp(t) and t.unit == "us" and t.tz in (None, "UTC"))
        or pat.is_decimal128(t)
    )


# --- partition values through directory names ---------------------------------------


def _encoding(t: pa.DataType) -> str | None:
    """How a partition column of type ``t`` is spelled in staging directory names."""
    if pat.is_string(t):
        return "string"
    if pat.is_integer(t) or pat.is_boolean(t):
        return "text"  # Spark's and Arrow's text of these agree
    if pat.is_date32(t):
        return "days"
    if pat.is_timestamp(t) and t.tz == "UTC":
        return "micros"
    if pat.is_decimal128(t):
        return "decimal"
    return None


def _encode(column: Column, t: pa.DataType) -> Column:
    """A column whose text (never empty) recovers a partition value exactly; null stays null."""
    kind = _encoding(t)
    if kind == "string":
        text = column
    elif kind == "days":
        text = F.unix_date(column).cast("string")
    elif kind == "micros":
        text = F.unix_micros(column).cast("string")
    else:
        text = column.cast("string")
    return F.concat(F.lit("v"), text)


def _decode(segment: str, t: pa.DataType) -> str | None:
    """The canonical text (log form) of the partition value a staging directory name holds."""
    escaped = segment.partition("=")[2]
    if escaped == NULL_PARTITION:
        return None
    text = unquote(escaped)[1:]  # drop the "v"
    kind = _encoding(t)
    if kind == "string":
        return text
    value: Any
    if kind == "days":
        value = pa.scalar(int(text), pa.int32()).cast(t)
    elif kind == "micros":
        value = pa.scalar(int(text), pa.int64()).cast(t)
    elif kind == "decimal":
        value = pa.scalar(Decimal(text), t)
    else:
        value = pc.cast(pa.scalar(text), t)
    return to_text(value)


# --- statistics from footers ---------------------------------------------------------


@dataclass(frozen=True)
class _Written:
    """A file Spark wrote, with what its footer and directory say."""

    source: str
    size: int
    rows: int
    partition_values: dict[str, str | None]
    stats: dict[str, Any]


def _footer_stats(path: str, table: TableMeta) -> tuple[int, dict[str, Any]]:
    """Row count and mere statistics (§7 of the format) of one Parquet file."""
    md = pq.read_metadata(path)
    data = [f for f in table.schema if f.name not in table.partition_columns]
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    index = {}
    if md.num_row_groups:
        first = md.row_group(0)
        index = {first.column(j).path_in_schema: j for j in range(first.num_columns)}
    for field in data:
        name = physical_name(field)
        count, lo, hi = _column_stats(md, index.get(name), field.type)
        if count is None:  # no null count in the footer: count them
            column = pq.read_table(path, columns=[name]).column(name)
            count = column.null_count
        nulls[name] = count
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    return md.num_rows, {
        "numRecords": md.num_rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": nulls,
    }


def _column_stats(
    md: pq.FileMetaData, j: int | None, t: pa.DataType
) -> tuple[int | None, Any, Any]:
    """Null count and JSON min/max of column ``j`` over every row group (None: unknown)."""
    if j is None:
        return md.num_rows, None, None
    nulls: int | None = 0
    lo: Any = None
    hi: Any = None
    exact = has_statistics(t) and not pat.is_floating(t)
    for g in range(md.num_row_groups):
        chunk = md.row_group(g).column(j)
        s = chunk.statistics
        if s is None or not s.has_null_count:
            nulls = None
        elif nulls is not None:
            nulls += s.null_count
        values = md.row_group(g).num_rows - (s.null_count if s is not None else 0)
        if not exact or values == 0:
            continue
        if s is None or not s.has_min_max or not s.has_null_count:
            exact = False
            continue
        lo = s.min if lo is None or s.min < lo else lo
        hi = s.max if hi is None or s.max > hi else hi
    if not exact or lo is None or hi is None:
        return nulls, None, None
    return nulls, stat_to_json(pa.scalar(lo, t)), stat_to_json(pa.scalar(hi, t))


# --- the write -----------------------------------------------------------------------


@contextmanager
def _micros_timestamps(spark: SparkSession) -> Iterator[None]:
    """Spark's Parquet timestamps as INT64 microseconds for the duration of a write."""
    before = spark.conf.get(TIMESTAMP_CONF, None)
    if before == "TIMESTAMP_MICROS":
        yield
        return
    spark.conf.set(TIMESTAMP_CONF, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(TIMESTAMP_CONF)
        else:
            spark.conf.set(TIMESTAMP_CONF, before)


def _projection(df: DataFrame, table: TableMeta) -> tuple[list[Column], list[str]]:
    """The DataFrame's columns as files hold them, and the encoded partition columns."""
    by_key = {name_key(n): n for n in df.columns}
    taken = {physical_name(f) for f in table.schema}
    columns: list[Column] = []
    for field in table.schema:
        if field.name not in table.partition_columns:
            source = F.col(_quoted(by_key[name_key(field.name)]))
            columns.append(source.alias(physical_name(field)))
    encoded = []
    for i, name in enumerate(table.partition_columns):
        alias = f"__mere_partition_{i}"
        while alias in taken:
            alias += "_"
        source = F.col(_quoted(by_key[name_key(name)]))
        columns.append(_encode(source, table.schema.field(name).type).alias(alias))
        encoded.append(alias)
    return columns, encoded


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _staged_files(staging: str, table: TableMeta) -> list[tuple[str, dict[str, str | None]]]:
    """The Parquet files under ``staging`` with the partition values their directories hold."""
    found = []
    for dirpath, dirnames, filenames in os.walk(staging):
        dirnames[:] = [d for d in dirnames if "=" in d]  # partition directories only
        for name in filenames:
            if name.startswith(("_", ".")) or not name.endswith(".parquet"):
                continue
            segments = os.path.relpath(dirpath, staging).split(os.sep)
            segments = [s for s in segments if s != "."]
            values = {
                column: _decode(segment, table.schema.field(column).type)
                for column, segment in zip(table.partition_columns, segments, strict=True)
            }
            found.append((os.path.join(dirpath, name), values))
    return sorted(found, key=lambda f: f[0])


def _inspect(source: str, values: dict[str, str | None], table: TableMeta) -> _Written:
    rows, stats = _footer_stats(source, table)
    return _Written(source, os.path.getsize(source), rows, values, stats)


def _publish(store: LocalStore, table: TableMeta, written: _Written) -> AddFile:
    directory = "".join(
        f"{c}={escape_partition_value(v)}/" for c, v in written.partition_values.items()
    )
    path = f"{directory}part-{uuid.uuid4().hex}.parquet"
    store.link_if_absent(table.prefix + path, written.source)
    return AddFile(
        table_id=table.id,
        path=path,
        size=written.size,
        rows=written.rows,
        partition_values=written.partition_values,
        stats=written.stats,
        modification_time=int(time.time() * 1000),
    )


def write_natively(
    df: DataFrame, store: LocalStore, table: TableMeta, replace_where: str | None = None
) -> list[AddFile]:
    """Write ``df`` as data files of ``table`` with Spark's Parquet writer; return them.

    Nothing is committed. On any failure (the Spark job, a constraint, the
    file system) the files written are deleted and the error propagates.

    Raises:
        ConstraintViolation: a NOT NULL, CHECK or ``replace_where`` condition fails.
    """
    columns, encoded = _projection(df, table)
    staging = store.temp_directory(table.prefix, "spark")
    adds: list[AddFile] = []
    try:
        writer = df.select(*columns).write.mode("append").option("compression", COMPRESSION)
        if encoded:
            writer = writer.partitionBy(*encoded)
        with _micros_timestamps(df.sparkSession):
            writer.parquet("file://" + staging)
        staged = _staged_files(staging, table)
        with ThreadPoolExecutor(max_workers=FOOTER_THREADS) as pool:
            inspected = list(pool.map(lambda f: _inspect(f[0], f[1], table), staged))
        for written in inspected:
            if written.rows:
                adds.append(_publish(store, table, written))
        check_written(store, table, adds, replace_where)
        return adds
    except BaseException:
        delete_files(store, table, [a.path for a in adds])
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- constraints ---------------------------------------------------------------------


def check_written(
    store: ObjectStore, table: TableMeta, adds: Sequence[AddFile], replace_where: str | None
) -> None:
    """Raise ConstraintViolation if a row of ``adds`` breaks a constraint of ``table``.

    NOT NULL is settled by null counts and partition values; CHECK
    constraints and ``replace_where`` by statistics where they prove every
    row matches, otherwise by reading the columns they name.
    """
    for field in table.schema:
        if field.nullable:
            continue
        for add in adds:
            if field.name in table.partition_columns:
                broken = add.rows if add.partition_values.get(field.name) is None else 0
            else:
                broken = (add.stats or {}).get("nullCount", {}).get(physical_name(field), 0)
            if broken:
                raise ConstraintViolation(
                    f"{broken} row(s) written to {table.name!r} have nulls in "
                    f"the NOT NULL column {field.name!r}"
                )
    conditions = [
        (f"CHECK constraint {name!r} ({sql})", compile_check(name, sql, table.schema), True)
        for name, sql in checks(table.properties).items()
    ]
    if replace_where is not None:
        conditions.append(
            (f"replaceWhere {replace_where!r}", check_condition(table, replace_where), False)
        )
    for what, predicate, null_passes in conditions:
        _check_rows(store, table, adds, what, predicate, null_passes)


def _check_rows(
    store: ObjectStore,
    table: TableMeta,
    adds: Sequence[AddFile],
    what: str,
    predicate: sqlexpr.Expr,
    null_passes: bool,
) -> None:
    """Every row of ``adds`` satisfies ``predicate`` (NULL counts as passing for CHECK)."""
    plan = ScanPlan(table, [], predicate, [])
    unsettled = [add for add in adds if not plan.covers(add)]
    names = table.schema.names
    columns = sorted(sqlexpr.referenced_columns(predicate), key=names.index) or names[:1]
    failed = 0
    for rows in read_files(store, table, unsettled, columns):
        passed = pc.fill_null(sqlexpr.evaluate(predicate, rows), null_passes)
        failed += rows.num_rows - (pc.sum(passed).as_py() or 0)
    if failed:
        raise ConstraintViolation(
            f"{failed} row(s) written to {table.name!r} do not satisfy {what}"
        )
