"""Exporting one table as a Delta Lake table, readable by Spark, delta-rs and friends.

The result is a fresh Delta table at version 0: ``_delta_log/0000...0.json``
holds ``commitInfo``, ``protocol`` (reader 1 / writer 2; reader 3 / writer 7
with the ``timestampNtz`` feature when a column is a timestamp without time
zone), ``metaData`` (the Spark JSON schema, partition columns) and one ``add``
per data file, with partition values and statistics in Delta's encodings.

Data files are copied as they are when their Parquet schema is already what
Delta readers expect: the logical column names (mere files use physical names
after a column rename), every column of the table, in Delta's types
(microsecond timestamps, signed integers, ``string`` not ``large_string``...).
Otherwise the file is rewritten with those names and types. Like mere's,
Delta's data files do not hold partition columns: partition values live in
the log. The log is written last, create-only: until it exists the target
is not a table.

Delta ``add.path`` is a URI reference, so the file's relative key (whose
partition directories already hold ``%XX`` escapes, docs/format.md §6) is
percent-encoded once more in the log.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

import mere
from mere.data.external import data_file_location, data_file_name
from mere.data.reader import parquet_errors, read_file
from mere.data.values import (
    from_text,
    stat_from_json,
    widened_bounds,
    zoned_bounds_inexact,
)
from mere.data.writer import inlined_as_parquet, parquet_data_file
from mere.errors import (
    AlreadyExists,
    CorruptDataFile,
    DeltaExportError,
    ObjectNotFound,
)
from mere.log.actions import AddFile, TableMeta
from mere.maintain.common import DataFileMissing
from mere.maintain.export import locate_target
from mere.maintain.progress import progress
from mere.schema import physical_name
from mere.storage import ObjectStore, open_store

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

DELTA_LOG_0 = "_delta_log/00000000000000000000.json"
COPY_THREADS = 8
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class DeltaExportResult:
    """What a Delta export wrote."""

    target: str
    table: str
    source_version: int
    files: int
    files_rewritten: int
    bytes: int
    rows: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return asdict(self)


# --- types -------------------------------------------------------------------------


def delta_type(t: pa.DataType, where: str) -> tuple[Any, pa.DataType]:
    """(Spark JSON type, the Arrow type Delta readers expect) for an Arrow type.

    Raises:
        DeltaExportError: the type has no Delta Lake equivalent.
    """
    simple: list[tuple[Any, str, pa.DataType]] = [
        (pat.is_boolean, "boolean", pa.bool_()),
        (pat.is_int8, "byte", pa.int8()),
        (pat.is_int16, "short", pa.int16()),
        (pat.is_int32, "integer", pa.int32()),
        (pat.is_int64, "long", pa.int64()),
        (pat.is_uint8, "short", pa.int16()),
        (pat.is_uint16, "integer", pa.int32()),
        (pat.is_uint32, "long", pa.int64()),
        (pat.is_uint64, "decimal(20,0)", pa.decimal128(20, 0)),
        (pat.is_float16, "float", pa.float32()),
        (pat.is_float32, "float", pa.float32()),
        (pat.is_float64, "double", pa.float64()),
        (lambda x: pat.is_string(x) or pat.is_large_string(x), "string", pa.string()),
        (
            lambda x: pat.is_binary(x) or pat.is_large_binary(x) or pat.is_fixed_size_binary(x),
            "binary",
            pa.binary(),
        ),
        (pat.is_date, "date", pa.date32()),
    ]
    for test, name, arrow in simple:
        if test(t):
            return name, arrow
    if pat.is_timestamp(t):
        if t.tz is None:
            return "timestamp_ntz", pa.timestamp("us")
        return "timestamp", pa.timestamp("us", tz="UTC")
    if pat.is_decimal(t) and t.precision <= 38:
        return f"decimal({t.precision},{t.scale})", pa.decimal128(t.precision, t.scale)
    if pat.is_list(t) or pat.is_large_list(t):
        item = t.value_field
        spark, arrow = delta_type(item.type, where)
        return (
            {"type": "array", "elementType": spark, "containsNull": item.nullable},
            pa.list_(pa.field("element", arrow, item.nullable)),
        )
    if pat.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        converted = [(f, *delta_type(f.type, f"{where}.{f.name}")) for f in fields]
        return (
            {
                "type": "struct",
                "fields": [
                    {"name": f.name, "type": s, "nullable": f.nullable, "metadata": {}}
                    for f, s, _ in converted
                ],
            },
            pa.struct([pa.field(f.name, a, f.nullable) for f, _, a in converted]),
        )
    if pat.is_map(t):
        key_spark, key_arrow = delta_type(t.key_type, where)
        value_spark, value_arrow = delta_type(t.item_type, where)
        return (
            {
                "type": "map",
                "keyType": key_spark,
                "valueType": value_spark,
                "valueContainsNull": t.item_field.nullable,
            },
            pa.map_(key_arrow, pa.field("value", value_arrow, t.item_field.nullable)),
        )
    raise DeltaExportError(f"column {where!r} of type {t} has no Delta Lake type")


def _uses_ntz(spark: Any) -> bool:
    if spark == "timestamp_ntz":
        return True
    if isinstance(spark, dict):
        return any(_uses_ntz(v) for v in spark.values()) or any(
            _uses_ntz(f["type"]) for f in spark.get("fields", [])
        )
    return False


# --- values --------------------------------------------------------------------------


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _partition_value(text: str | None, t: pa.DataType, delta_arrow: pa.DataType) -> str | None:
    """A mere partition value's canonical text (§6) in Delta's partition-value encoding."""
    if text is None:
        return None
    if pat.is_string(t) or pat.is_large_string(t):
        if text == "":
            # Delta's protocol reads an empty partition value as NULL: exporting it
            # would turn mere's '' into NULL for every Delta reader.
            raise DeltaExportError(
                "an empty-string partition value cannot be exported: Delta Lake reads an "
                "empty partition value as NULL",
                help="update the rows to another value first, or export a table not "
                "partitioned by that column",
            )
        return text
    value = pc.cast(from_text(text, t), delta_arrow)
    if pat.is_timestamp(delta_arrow):
        micros = pc.cast(value, pa.int64()).as_py()
        moment = _EPOCH + timedelta(microseconds=micros)
        # ISO 8601 in UTC for instants; Delta's plain form for timestamps without zone.
        # (Years are padded to four digits: strftime("%Y") writes year 1 as "1".)
        if delta_arrow.tz is not None:
            return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S.%f}Z"
        return f"{moment.year:04d}-{moment:%m-%d %H:%M:%S.%f}"
    return str(pc.cast(value, pa.string()).as_py())


def _stat_value(value: Any, t: pa.DataType, upper: bool) -> Any:
    """A mere statistic (§7) as a Delta statistic, or None to leave it out.

    Only types whose Delta encoding is unambiguous are kept: integers,
    strings, dates, and timestamps with a time zone (as ISO 8601 in UTC at
    millisecond precision: minimums rounded down, maximums up, so the
    statistics stay sound for skipping). Floats are left out: Delta readers
    skip by min/max that leave NaN out, which drops NaN rows mere keeps.
    """
    decoded = stat_from_json(value, t)
    if decoded is not None and zoned_bounds_inexact(t):  # an older mere's may be a minute off
        decoded = widened_bounds(None, decoded)[1] if upper else widened_bounds(decoded, None)[0]
    if decoded is None:
        return None
    if pat.is_integer(t) and not pat.is_uint64(t):
        return int(decoded)
    if pat.is_string(t) or pat.is_large_string(t):
        return str(decoded)
    if pat.is_date(t):
        return str(pc.cast(pc.cast(from_text(value, t), pa.date32()), pa.string()).as_py())
    if pat.is_timestamp(t) and t.tz is not None:
        scalar = from_text(value, t)
        ticks = pc.cast(scalar, pa.int64()).as_py()
        per_ms = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        if per_ms == 0:
            ms = ticks * 1000
        else:
            ms = -((-ticks) // per_ms) if upper else ticks // per_ms
        try:
            moment = _EPOCH + timedelta(milliseconds=ms)
        except OverflowError:  # rounded past year 9999 (or before year 1): no sound bound
            return None
        return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"
    return None


def _stats(meta: TableMeta, add: AddFile) -> dict[str, Any]:
    """The Delta ``stats`` of one file (serialized into the add action as JSON)."""
    stats = add.stats or {}
    mins, maxs, nulls = (
        stats.get("minValues") or {},
        stats.get("maxValues") or {},
        stats.get("nullCount") or {},
    )
    out: dict[str, Any] = {
        "numRecords": add.rows,
        "minValues": {},
        "maxValues": {},
        "nullCount": {},
    }
    for f in meta.schema:
        if f.name in meta.partition_columns or pat.is_nested(f.type):
            continue
        stored = physical_name(f)
        count = nulls.get(stored)
        if isinstance(count, int) and not isinstance(count, bool):
            out["nullCount"][f.name] = count
        low = _stat_value(mins.get(stored), f.type, upper=False)
        high = _stat_value(maxs.get(stored), f.type, upper=True)
        if low is not None and high is not None:
            out["minValues"][f.name] = low
            out["maxValues"][f.name] = high
    return out


def _skipping_columns(meta: TableMeta, stats: list[dict[str, Any]]) -> str:
    """The ``delta.dataSkippingStatsColumns`` value: columns every file has min/max for.

    A Delta reader that finds no min/max for a column in a file's statistics
    may treat them as NULL and skip the file (deltalake 1.x does), so only
    columns whose statistics are complete in every file are offered.
    """
    columns = []
    for f in meta.schema:
        if f.name in meta.partition_columns or pat.is_nested(f.type):
            continue
        if all(
            f.name in s["minValues"] or s["nullCount"].get(f.name) == s["numRecords"] for s in stats
        ):
            columns.append(f.name if _PLAIN_NAME.match(f.name) else f"`{f.name}`")
    return ",".join(columns)


# --- the export ----------------------------------------------------------------------------


def export_delta(
    db: DatabaseContext,
    name: str,
    target: str | os.PathLike[str] | ObjectStore,
    *,
    version: int | None = None,
) -> DeltaExportResult:
    """Write table ``name`` as of ``version`` (default: latest) as a Delta Lake table at ``target``.

    Raises:
        DeltaExportError: a column has no Delta type, or ``target`` holds a Delta table.
        TableNotFound: no such table at that version.
        DataFileMissing: a data file of that version was deleted by vacuum.
    """
    snapshot = db.snapshot(version=version)
    table = snapshot.table(name)
    state = db.state_at(snapshot.version).tables[table.id]
    meta = state.meta
    locate_target(target, db.store.uri)  # not the source, nor inside or around it

    fields = []
    arrow_fields = []
    for f in meta.schema:
        spark, arrow = delta_type(f.type, f.name)
        fields.append({"name": f.name, "type": spark, "nullable": f.nullable, "metadata": {}})
        if f.name not in meta.partition_columns:
            arrow_fields.append(pa.field(f.name, arrow, f.nullable))
    spark_schema = {"type": "struct", "fields": fields}
    file_schema = pa.schema(arrow_fields)
    partition_types = {
        c: (meta.schema.field(c).type, delta_type(meta.schema.field(c).type, c)[1])
        for c in meta.partition_columns
    }

    files = list(state.files.values())
    for add in files:  # refuse before writing anything
        for column in meta.partition_columns:
            _partition_value(add.partition_values.get(column), *partition_types[column])
    # Opened only now: a local target directory is created by it, and a refusal above
    # leaves none behind.
    store = target if isinstance(target, ObjectStore) else open_store(target)
    if store.exists(DELTA_LOG_0):
        raise DeltaExportError(f"{store.uri} already holds a Delta table")
    with progress(f"exporting {meta.name} to Delta Lake", len(files)) as advance:
        results: list[tuple[AddFile, int, bool]] = []
        if files:
            with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(files))) as pool:
                for done in pool.map(lambda a: _write_file(db, store, meta, a, file_schema), files):
                    results.append(done)
                    advance(1)

    now = int(time.time() * 1000)
    protocol: dict[str, Any] = {"minReaderVersion": 1, "minWriterVersion": 2}
    if _uses_ntz(spark_schema):
        protocol = {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz"],
        }
    table_id = str(uuid.UUID(meta.id))
    lines: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "CREATE TABLE AS SELECT",
                "operationParameters": {
                    "mode": "ErrorIfExists",
                    "partitionBy": json.dumps(list(meta.partition_columns)),
                },
                "engineInfo": f"mere/{mere.__version__}",
                "isBlindAppend": True,
                "operationMetrics": {
                    "numFiles": str(len(results)),
                    "numOutputRows": str(sum(a.rows for a, _, _ in results)),
                    "numOutputBytes": str(sum(size for _, size, _ in results)),
                },
            }
        },
        {"protocol": protocol},
        {
            "metaData": {
                "id": table_id,
                "name": meta.name,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(spark_schema, ensure_ascii=False),
                "partitionColumns": list(meta.partition_columns),
                "configuration": {},
                "createdTime": meta.created_time,
            }
        },
    ]
    file_stats = [_stats(meta, add) for add, _, _ in results]
    indexed = _skipping_columns(meta, file_stats)
    configuration = (
        {"delta.dataSkippingStatsColumns": indexed}
        if indexed
        else {"delta.dataSkippingNumIndexedCols": "0"}
    )
    lines[-1]["metaData"]["configuration"] = configuration
    for (add, size, _), stats in zip(results, file_stats, strict=True):
        lines.append(
            {
                "add": {
                    "path": quote(add.path, safe="/="),
                    "partitionValues": {
                        c: _partition_value(add.partition_values.get(c), *partition_types[c])
                        for c in meta.partition_columns
                    },
                    "size": size,
                    "modificationTime": add.modification_time,
                    "dataChange": True,
                    "stats": json.dumps(stats, ensure_ascii=False, allow_nan=False),
                }
            }
        )
    body = "".join(
        json.dumps(line, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n"
        for line in lines
    )
    try:
        store.put_if_absent(DELTA_LOG_0, body.encode())
    except AlreadyExists:
        raise DeltaExportError(
            f"a Delta table was created at {store.uri} while exporting to it"
        ) from None
    return DeltaExportResult(
        target=store.uri,
        table=meta.name,
        source_version=snapshot.version,
        files=len(results),
        files_rewritten=sum(1 for _, _, rewritten in results if rewritten),
        bytes=sum(size for _, size, _ in results),
        rows=sum(a.rows for a, _, _ in results),
    )


def _write_file(
    db: DatabaseContext, target: ObjectStore, meta: TableMeta, add: AddFile, file_schema: pa.Schema
) -> tuple[AddFile, int, bool]:
    """Copy (or rewrite in Delta's names and types) one data file; (add, size, rewritten)."""
    key = data_file_name(meta, add)
    if add.inline is not None:  # its bytes are in the log: written as a file of its own
        with parquet_errors(meta, add):
            stored_key, data = meta.prefix + add.path, inlined_as_parquet(add.inline)
    else:
        holder, stored_key = data_file_location(db.store, meta, add)  # an export's: its source's
        data = _get(holder, stored_key, meta, key)
        if len(data) != add.size:  # changed after it was written: not passed on
            reason = f"it is {len(data):,} bytes; the log records {add.size:,}"
            raise CorruptDataFile.of(key, meta.name, reason=reason)
    with parquet_errors(meta, add):
        stored = pq.read_schema(pa.BufferReader(data))
    same = stored.names == file_schema.names and all(
        stored.field(f.name).type == f.type for f in file_schema
    )
    rewritten = not same
    if rewritten:
        rows = read_file(db.store, meta, add, file_schema.names)
        try:
            arrays = [rows.column(f.name).cast(f.type) for f in file_schema]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DeltaExportError(
                f"data file {key} of table {meta.name!r} cannot be converted to Delta Lake's "
                f"types without losing data (e.g. nanoseconds): {exc}"
            ) from None
        data = parquet_data_file(pa.Table.from_arrays(arrays, schema=file_schema))
    add = replace(add, path=stored_key[len(meta.prefix) :])  # relative in the Delta table
    try:
        target.put_if_absent(add.path, data)
    except AlreadyExists:
        if target.head(add.path).size != len(data):
            raise DeltaExportError(
                f"{target.uri} already holds a different object at {add.path}"
            ) from None
    return add, len(data), rewritten


def _get(holder: ObjectStore, stored_key: str, meta: TableMeta, key: str) -> bytes:
    try:
        return holder.get(stored_key)
    except ObjectNotFound:
        raise DataFileMissing(
            f"data file {key} of table {meta.name!r} no longer exists (deleted by vacuum)"
        ) from None


__all__ = ["DeltaExportError", "DeltaExportResult", "delta_type", "export_delta"]
