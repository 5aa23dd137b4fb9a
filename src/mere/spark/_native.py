"""The native read: the snapshot's live files, read by Spark's own Parquet reader.

The driver resolves which data files make up a table at a version (and,
with a filter, which of them may hold matching rows); Spark's vectorized
Parquet reader then reads them with column pruning, predicate pushdown into
row groups and file splitting, none of which a Python data source gets.
mere's layout is what Spark expects: Parquet files under hive-style
``<col>=<value>/`` directories, so partition columns are discovered from the
paths (with ``basePath`` at the table's directory) and cast to the table's
types. Columns renamed after files were written are read under their
physical names and renamed back; columns files lack read as nulls.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.types as pat
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from mere.data.external import data_file_location
from mere.data.reader import read_files as read_data_files
from mere.database import connect
from mere.errors import InvalidArgument
from mere.log.actions import AddFile, TableMeta
from mere.names import NULL_PARTITION
from mere.schema import physical_name, physical_names_clashing, widened_from
from mere.snapshot.scan import plan_scan
from mere.spark import _core
from mere.spark._filter import where
from mere.spark._types import spark_arrow_schema, spark_schema, spark_type, to_spark_table
from mere.storage import LocalStore, ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: Partition values read as literals, not from directory names: ``(column, value)``.
Literals = tuple[tuple[str, str], ...]

#: Store URI schemes and the Hadoop file system scheme Spark reads them with.
_HADOOP_SCHEMES = {"s3": "s3a", "s3a": "s3a", "gs": "gs", "abfs": "abfs", "abfss": "abfss"}


def table_location(store: ObjectStore, table: TableMeta) -> str:
    """The URI under which Spark finds the table's files.

    Local stores map to ``file://``; ``s3://`` to ``s3a://`` and ``gs://`` and
    ``abfs[s]://`` stay as they are (Spark needs the matching Hadoop
    connector and credentials).

    Raises:
        ValueError: the store is not one Spark's file systems can read.
    """
    if isinstance(store, LocalStore):
        return "file://" + os.path.join(os.path.abspath(store.root), "tables", table.id)
    scheme, sep, rest = store.uri.partition("://")
    if sep and scheme in _HADOOP_SCHEMES:
        return f"{_HADOOP_SCHEMES[scheme]}://{rest.rstrip('/')}/tables/{table.id}"
    raise InvalidArgument(
        f"Spark cannot read {store.uri} directly; read it through the data source instead "
        "(mere.spark.read(..., method='datasource'))"
    )


def native_read_refusal(schema: pa.Schema) -> str | None:
    """Why Spark's Parquet reader cannot read a table of ``schema`` (None if it can).

    Spark reads no Parquet nanosecond timestamps, durations, half floats or
    null columns as the types the table's Spark schema gives them.
    """

    def unreadable(t: pa.DataType) -> str | None:
        if (pat.is_timestamp(t) or pat.is_time(t)) and t.unit == "ns":
            return "nanoseconds"
        if pat.is_duration(t):
            return "a duration"
        if pat.is_float16(t):
            return "half-precision floats"
        if pat.is_null(t):
            return "a column of the null type"
        for i in range(t.num_fields):
            found = unreadable(t.field(i).type)
            if found is not None:
                return found
        return None

    for f in schema:
        reason = unreadable(f.type)
        if reason is not None:
            return f"column {f.name!r} holds {reason}, which Spark's Parquet reader cannot read"
        for earlier in widened_from(f):
            if not _spark_widens(earlier, f.type):
                return (
                    f"column {f.name!r} was widened from {earlier}, which Spark's Parquet "
                    f"reader does not read as {f.type} (it fails, or reads other values)"
                )
    clash = physical_names_clashing(schema)
    if clash is not None:
        return f"its files hold columns {clash[0]!r} and {clash[1]!r}, one column to Spark"
    return None


#: Signed integers and floats by width: Spark's Parquet reader widens within these.
_SPARK_WIDENS = {
    "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float": 5, "double": 6,
}  # fmt: skip


def _spark_widens(earlier: str, now: pa.DataType) -> bool:
    """Whether Spark's Parquet reader reads files of type ``earlier`` as ``now``, values
    intact: a signed integer as a wider one or as DOUBLE, REAL as DOUBLE, a decimal as a
    wider decimal. Unsigned integers and integers read as REAL fail or change."""
    if earlier.startswith("decimal") and pat.is_decimal(now):
        return True
    before, after = _SPARK_WIDENS.get(earlier), _SPARK_WIDENS.get(str(now))
    if before is None or after is None:
        return False
    return after == 6 or (after <= 4 and before < after)


def _column(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal_partitions(table: TableMeta, add: AddFile) -> Literals:
    """The partition values of ``add`` that its directory names cannot give back.

    Hive-style paths write null, ``''`` and the string
    ``__HIVE_DEFAULT_PARTITION__`` alike, and Spark reads all three as null;
    the log tells them apart, so files with ``''`` or that string read their
    value as a literal.
    """
    found = []
    for c in table.partition_columns:
        value = add.partition_values.get(c)
        if value is not None and value in ("", NULL_PARTITION):
            found.append((c, value))
    return tuple(found)


def _opaque(column: Column) -> Column:
    """A float column whose filters Spark keeps instead of pushing into its Parquet reader.

    Spark's Parquet filter pushdown skips row groups by footer min/max, which
    leave NaN out (files written by pyarrow, older mere versions or Spark's
    own writer): ``f <> 5`` lost the NaN rows of a row group whose other
    values are all 5. ``nanvl(f, f)`` is ``f`` bit for bit (-0.0, NaN and
    infinities included), and a filter over it is not translated into a
    Parquet filter. Column pruning is unaffected.
    """
    return F.nanvl(column, column)


def read_files(
    spark: SparkSession, store: ObjectStore, table: TableMeta, files: Sequence[AddFile]
) -> DataFrame:
    """A DataFrame of the rows of ``files`` (live files of ``table``), in the table's schema."""
    logical = spark_schema(table.schema)
    if not files:
        return spark.createDataFrame([], logical)
    partitions = set(table.partition_columns)
    data_fields = [
        StructField(physical_name(f), spark_type(f.type), True)
        for f in table.schema
        if f.name not in partitions
    ]
    part_fields = [
        StructField(c, spark_type(table.schema.field(c).type), True)
        for c in table.partition_columns
    ]
    reader_schema = StructType(data_fields + part_fields)

    def scan(location: str, paths: Sequence[str], fixed: dict[str, str]) -> DataFrame:
        full = [f"{location}/{path}" for path in paths]
        df = spark.read.schema(reader_schema).option("basePath", location).parquet(*full)
        columns = []
        for f, spark_field in zip(table.schema, logical.fields, strict=True):
            if f.name in fixed:
                column = F.lit(fixed[f.name]).cast(spark_field.dataType)
            elif f.name in partitions:
                column = F.col(_column(f.name))
            else:
                column = F.col(_column(physical_name(f)))
                if pat.is_floating(f.type):
                    column = _opaque(column)
            columns.append(column.alias(f.name))
        return df.select(*columns)

    # Hive-style paths cannot tell an empty string or the string
    # '__HIVE_DEFAULT_PARTITION__' from null (all three are written so); the log
    # can, so such files are read apart, their values as literals.
    # A file of an export's source (an absolute path, docs/format.md §11.6) is read
    # under that table's location there: files are grouped by location too.
    groups: dict[tuple[str, Literals], list[str]] = defaultdict(list)
    inlined = []
    for add in files:
        if add.inline is not None:
            inlined.append(add)
            continue
        blanks = _literal_partitions(table, add)
        holder, key = data_file_location(store, table, add)
        location = table_location(holder, table)
        groups[(location, blanks)].append(key[len(table.prefix) :])
    parts = [scan(location, paths, dict(blanks)) for (location, blanks), paths in groups.items()]
    if inlined:
        parts.append(_inlined_rows(spark, store, table, inlined, logical))
    result = parts[0]
    for part in parts[1:]:
        result = result.unionByName(part)
    return result


def _inlined_rows(
    spark: SparkSession,
    store: ObjectStore,
    table: TableMeta,
    files: Sequence[AddFile],
    logical: StructType,
) -> DataFrame:
    """The rows of inlined files (docs/format.md §2.5), decoded here and handed to Spark.

    Their bytes are in the log, where Spark's Parquet reader cannot see them;
    they are small by definition (at most the database's ``inlineLimit`` each,
    and a checkpoint moves them to ordinary files past ``inlineFlushBytes``).
    """
    rows = pa.concat_tables(read_data_files(store, table, files, table.schema.names))
    # With the schema: without it Spark takes a naive timestamp as one in its session zone.
    return spark.createDataFrame(to_spark_table(rows, spark_arrow_schema(logical)), logical)


def native_read(
    spark: SparkSession,
    uri: str,
    table: str,
    *,
    version: int | None = None,
    timestamp: datetime | int | None = None,
    filter: str | None = None,
) -> DataFrame:
    """Read a table at a version with Spark's Parquet reader (see :func:`mere.spark.read`).

    The database is opened (never created) for planning only and closed
    before the DataFrame is returned: Spark reads the files by their paths.
    """
    with connect(uri, create=False) as db:
        snapshot = db.snapshot(version=version, timestamp=timestamp)
        meta = _core.table_meta(snapshot.table(table))
        refusal = native_read_refusal(meta.schema)
        if refusal is not None:
            raise InvalidArgument(f"the native read cannot read {table!r}: {refusal}")
        files = snapshot.table(table).files
        if filter is not None:
            files = plan_scan(meta, [], filter).select(files)
        df = read_files(spark, db.store, meta, files)
    return df if filter is None else where(df, meta.schema, filter)
