"""The native write: Spark's own Parquet writer makes the data files, mere publishes them.

A Python writer pays, before encoding a single value, for the JVM to turn
its rows into Arrow and hand them over: measured here, about as much CPU as
Spark's whole Parquet write (``docs/benchmarks.md``). So where Spark's
Parquet files can be mere's data files unchanged, the executors run
``df.write.parquet`` into a staging directory of the table, and the driver

1. reads each file's footer: row count, null counts and min/max statistics
   in mere's form (floating-point columns get no min/max: Parquet's
   statistics leave NaN out, mere's record none when one is present). A
   column the footer says nothing of (parquet-mr leaves out the statistics
   of a column chunk whose min or max is over 4 KiB) is read instead;
2. recovers each file's partition values from the staging directory names.
   The DataFrame is partitioned by *encoded* columns (``"v" || value`` for
   plain lowercase strings, ``"h" || hex(utf8)`` for any other, days for
   dates, microseconds for timestamps), so an empty string stays distinct
   from null and no value depends on Spark's text formatting;
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

import logging
import os
import shutil
import threading
import time
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
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from mere import expr as sqlexpr
from mere.constraints import checks, compile_check
from mere.data.reader import iter_read_files
from mere.data.values import partition_text, stat_to_json
from mere.data.writer import new_data_file_path
from mere.errors import ConstraintViolation, StorageError
from mere.log.actions import AddFile, TableMeta
from mere.names import NULL_PARTITION, name_key
from mere.schema import has_statistics, physical_name, physical_names_clashing
from mere.snapshot.scan import ScanPlan
from mere.spark._files import check_condition, delete_files
from mere.spark._types import spark_arrow_schema
from mere.storage import LocalStore, ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("mere.spark")

#: Parquet compression of native writes: mere's own (zstd), at Spark's default level.
COMPRESSION = "zstd"
#: Spark writes Parquet timestamps as INT96 unless told otherwise; mere's are INT64 micros.
TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"
#: A session may have Spark rebase dates and timestamps before 1582/1900 to the Julian
#: calendar ("LEGACY"), which no other reader undoes: native writes keep them as they are.
REBASE_CONF = "spark.sql.parquet.datetimeRebaseModeInWrite"
#: The session settings every native write runs with (:func:`_write_settings`).
WRITE_SETTINGS = {TIMESTAMP_CONF: "TIMESTAMP_MICROS", REBASE_CONF: "CORRECTED"}
#: parquet-mr settings a Hadoop configuration may change that would make footers hold
#: less than mere's statistics: no statistics at all (for every column, or one: a
#: ``#<column>`` suffix), or string min/max cut to a length (bounds, not the values).
STATISTICS_OPTION = "parquet.column.statistics.enabled"
TRUNCATE_OPTION = "parquet.statistics.truncate.length"
NO_TRUNCATION = 2**31 - 1
#: Footers read at once (local files: a few small reads each).
FOOTER_THREADS = 8

#: Native writes under way per session, and the session's own values of WRITE_SETTINGS.
_overrides: dict[Any, tuple[int, dict[str, str | None]]] = {}
_settings_lock = threading.Lock()


def native_write_refusal(store: ObjectStore, table: TableMeta, df_schema: StructType) -> str | None:
    """Why Spark's Parquet writer cannot write this DataFrame into ``table`` (None if it can).

    ``df_schema`` must already match the table (same columns, by name ignoring case).
    """
    if not isinstance(store, LocalStore):
        return f"the store {store.uri} is not a local directory"
    by_key = {name_key(f.name): f for f in df_schema.fields}
    partitions = set(table.partition_columns)
    clash = physical_names_clashing(f for f in table.schema if f.name not in partitions)
    if clash is not None:
        return (
            f"its data files name columns {clash[0]!r} and {clash[1]!r}, which Spark "
            "takes for the same column (a column was renamed and another added)"
        )
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
        # Directory names must keep every value apart on any file system: macOS and
        # Windows ignore case ("a" and "A"), some normalize Unicode, and Spark does
        # not escape NUL. Only lowercase ASCII letters, digits and "-_." are spelled
        # as they are ("v" prefix); any other string goes by its UTF-8 bytes in hex
        # ("h" prefix). Collations compare values mere keeps apart ("a" = "A" in
        # UTF8_LCASE), and Spark refuses to partition by them: partitions go by bytes.
        column = F.collate(column, "UTF8_BINARY")
        hexed = F.concat(F.lit("h"), F.hex(F.encode(column, "UTF-8")))
        plain = column.rlike("^[a-z0-9_.-]*$")
        return F.when(plain, F.concat(F.lit("v"), column)).otherwise(hexed)
    if kind == "days":
        text = F.unix_date(column).cast("string")
    elif kind == "micros":
        text = F.unix_micros(column).cast("string")
    else:
        text = column.cast("string")
    return F.concat(F.lit("v"), text)


def _decode(segment: str, t: pa.DataType, column: str) -> str | None:
    """The canonical text (log form) of the partition value a staging directory name holds."""
    escaped = segment.partition("=")[2]
    if escaped == NULL_PARTITION:
        return None
    text = unquote(escaped)
    if text.startswith("h"):  # a string spelled in hex (see _encode)
        return bytes.fromhex(text[1:]).decode()
    text = text[1:]  # drop the "v"
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
    return partition_text(value, column)


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
        found = _column_stats(md, index.get(name), field.type)
        if found is None:  # the footer does not tell: from the values, as the Arrow path does
            found = _value_stats(pq.read_table(path, columns=[name]).column(name))
        nulls[name], lo, hi = found
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
) -> tuple[int, Any, Any] | None:
    """Null count and JSON min/max of column ``j`` over every row group.

    None when the footer does not hold them: parquet-mr leaves out every
    statistic of a column chunk whose min or max is over 4 KiB.
    """
    if j is None:
        return md.num_rows, None, None
    nulls = 0
    lo: Any = None
    hi: Any = None
    exact = has_statistics(t) and not pat.is_floating(t)
    for g in range(md.num_row_groups):
        s = md.row_group(g).column(j).statistics
        if s is None or not s.has_null_count:
            return None
        nulls += s.null_count
        if not exact or s.null_count == md.row_group(g).num_rows:
            continue  # no min/max wanted, or none to have: every value is null
        if not s.has_min_max:
            return None
        try:
            chunk_lo, chunk_hi = s.min, s.max
        except (OverflowError, ValueError):  # e.g. a date after 9999: no Python value
            exact = False
            continue
        lo = chunk_lo if lo is None or chunk_lo < lo else lo
        hi = chunk_hi if hi is None or chunk_hi > hi else hi
    if not exact or lo is None or hi is None:
        return nulls, None, None
    return nulls, stat_to_json(pa.scalar(lo, t)), stat_to_json(pa.scalar(hi, t))


def _value_stats(column: pa.ChunkedArray) -> tuple[int, Any, Any]:
    """Null count and JSON min/max of a column's values (floating point: no min/max)."""
    t = column.type
    if column.null_count == len(column) or not has_statistics(t) or pat.is_floating(t):
        return column.null_count, None, None
    mm = pc.min_max(column)
    return column.null_count, stat_to_json(mm["min"]), stat_to_json(mm["max"])


# --- the write -----------------------------------------------------------------------


def _session_key(spark: SparkSession) -> Any:
    """What identifies a session's settings: its JVM session (Python wrappers come and go)."""
    jvm_session = getattr(spark, "_jsparkSession", None)
    return spark if jvm_session is None else jvm_session


def _set_all(spark: SparkSession, settings: dict[str, str | None]) -> None:
    for key, value in settings.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@contextmanager
def _write_settings(spark: SparkSession) -> Iterator[None]:
    """:data:`WRITE_SETTINGS` in the session for the duration of a write.

    Spark reads them from the session when a job plans its write, so they
    hold session-wide: writes that overlap (threads) share one override, and
    the session's own values come back when the last of them ends, failed or
    not. (Each restoring its own "before" would unset them under a write
    still planning.)
    """
    key = _session_key(spark)
    with _settings_lock:
        count, before = _overrides.get(key, (0, {}))
        if not count:
            before = {name: spark.conf.get(name, None) for name in WRITE_SETTINGS}
            try:
                _set_all(spark, dict(WRITE_SETTINGS))
            except BaseException:
                _set_all(spark, before)
                raise
        _overrides[key] = (count + 1, before)
    try:
        yield
    finally:
        with _settings_lock:
            count, before = _overrides.pop(key)
            if count > 1:
                _overrides[key] = (count - 1, before)
            else:
                try:
                    _set_all(spark, before)
                except Exception as exc:  # must not hide the write's own outcome
                    log.warning("could not restore the session's Parquet settings: %s", exc)


def _projection(df: DataFrame, table: TableMeta) -> tuple[list[Column], list[str]]:
    """The DataFrame's columns as files hold them, and the encoded partition columns."""
    by_key = {name_key(n): n for n in df.columns}
    taken = {name_key(physical_name(f)) for f in table.schema}  # Spark ignores case
    columns: list[Column] = []
    for field in table.schema:
        if field.name not in table.partition_columns:
            source = F.col(_quoted(by_key[name_key(field.name)]))
            columns.append(source.alias(physical_name(field)))
    encoded = []
    for i, name in enumerate(table.partition_columns):
        alias = f"__mere_partition_{i}"
        while name_key(alias) in taken:
            alias += "_"
        source = F.col(_quoted(by_key[name_key(name)]))
        columns.append(_encode(source, table.schema.field(name).type).alias(alias))
        encoded.append(alias)
    return columns, encoded


def _writer_options(table: TableMeta) -> dict[str, str]:
    """Spark write options: mere's compression, and complete, exact footer statistics.

    Floating-point columns get no footer statistics at all: Parquet's min/max
    leave NaN out, and a reader that skips row groups by them (Spark's filter
    pushdown) drops NaN rows (``f <> 5``). parquet-mr
    cannot keep only the null count, so the driver counts a float column's
    nulls from its values (:func:`_footer_stats`), as mere's own writer does.
    """
    options = {
        "compression": COMPRESSION,
        STATISTICS_OPTION: "true",
        TRUNCATE_OPTION: str(NO_TRUNCATION),
    }
    for field in table.schema:
        if field.name not in table.partition_columns:
            enabled = "false" if pat.is_floating(field.type) else "true"
            options[f"{STATISTICS_OPTION}#{physical_name(field)}"] = enabled
    return options


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
                column: _decode(segment, table.schema.field(column).type, column)
                for column, segment in zip(table.partition_columns, segments, strict=True)
            }
            found.append((os.path.join(dirpath, name), values))
    return sorted(found, key=lambda f: f[0])


def _inspect(source: str, values: dict[str, str | None], table: TableMeta) -> _Written:
    rows, stats = _footer_stats(source, table)
    return _Written(source, os.path.getsize(source), rows, values, stats)


def _publish(store: LocalStore, table: TableMeta, written: _Written) -> AddFile:
    path = new_data_file_path(written.partition_values)
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
    df: DataFrame,
    store: LocalStore,
    table: TableMeta,
    replace_where: str | None = None,
    *,
    count_rows: bool = False,
) -> list[AddFile]:
    """Write ``df`` as data files of ``table`` with Spark's Parquet writer; return them.

    Nothing is committed. On any failure (the Spark job, a constraint, the
    file system) the files written are deleted and the error propagates.
    With ``count_rows`` the job also counts its rows (a few percent more
    work), and the files the driver finds must hold them all: on a cluster
    whose executors do not share the driver's file system they would not.

    Raises:
        ConstraintViolation: a NOT NULL, CHECK or ``replace_where`` condition fails.
        StorageError: ``count_rows`` and the files hold fewer rows than the job wrote.
    """
    columns, encoded = _projection(df, table)
    staging = store.temp_directory(table.prefix, "spark")
    adds: list[AddFile] = []
    try:
        projected = df.select(*columns)
        counted = Observation("mere_native_write") if count_rows else None
        if counted is not None:
            projected = projected.observe(counted, F.count(F.lit(1)).alias("rows"))
        writer = projected.write.mode("append").options(**_writer_options(table))
        if encoded:
            writer = writer.partitionBy(*encoded)
        with _write_settings(df.sparkSession), _kept_fresh(staging):
            writer.parquet("file://" + staging)  # Hadoop paths take the characters raw
        staged = _staged_files(staging, table)
        with ThreadPoolExecutor(max_workers=FOOTER_THREADS) as pool:
            inspected = list(pool.map(lambda f: _inspect(f[0], f[1], table), staged))
        found = sum(w.rows for w in inspected)
        if counted is not None and found != counted.get["rows"]:
            raise StorageError(
                f"Spark wrote {counted.get['rows']} row(s) but the driver finds {found} in "
                f"{staging}: the executors must share the driver's file system"
            )
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


#: How often a running write touches its staging directory (see :func:`_kept_fresh`).
HEARTBEAT_SECONDS = 60.0


@contextmanager
def _kept_fresh(staging: str) -> Iterator[None]:
    """Touch ``staging`` every :data:`HEARTBEAT_SECONDS` while the Spark job runs.

    Vacuum sweeps a temp directory whose newest entry is older than its
    retention; a long job can leave its staging directory unchanged that
    long (tasks still computing), and must not lose it.
    """
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(staging)
            except OSError:
                return

    thread = threading.Thread(target=beat, name="mere-staging-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


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
    for _, rows in iter_read_files(store, table, unsettled, columns):  # a window at a time
        passed = pc.fill_null(sqlexpr.evaluate(predicate, rows), null_passes)
        failed += rows.num_rows - (pc.sum(passed).as_py() or 0)
    if failed:
        raise ConstraintViolation(
            f"{failed} row(s) written to {table.name!r} do not satisfy {what}"
        )
