"""Local tables read by DuckDB's own Parquet reader: the fast path for a LocalStore.

On a local store the live files are real files, so a table can be a view
over ``read_parquet([...its live files...])``: DuckDB reads them in parallel
with its own projection pushdown and row-group skipping (its Parquet
metadata cache makes repeated queries cheap). Partition values come from the
log as typed constants, one ``UNION ALL`` branch per partition value, so a
filter on a partition column drops whole branches; renamed columns are read
under their physical names and renamed back; every column is cast to the
table's type.

The view is only built when it is sure to read exactly what ``scan()``
reads; otherwise :func:`native_view` returns None and the caller registers a
pyarrow dataset instead. It is refused for:

* a column type without an exact DuckDB counterpart, or a floating-point
  column: DuckDB skips Parquet row groups by min/max statistics, which leave
  NaN out, so ``f = 'NaN'`` could miss rows (the pyarrow path knows NaN);
* partition columns other than integers, strings, dates and booleans;
* a file whose statistics do not show it holds every column of the table
  (one written before a column was added, or without statistics);
* file paths with glob characters, a file of another database (an export's
  target may name its source's files, docs/format.md §11.6; DuckDB may read
  under the store's root only), and more than :data:`MAX_BRANCHES`
  partition values.

Inlined files (docs/format.md §2.5) have no file to name: their bytes are in
the log. The caller registers an Arrow table of them under the name it
passes as ``inlined`` (:func:`inlined_files`, :func:`mere.snapshot.dataset.inlined_table`), and the
view reads it as one more ``UNION ALL`` branch, so the stored files keep
DuckDB's reader; without that name a table with inlined files gets no view.

DuckDB's reader opens the footer of every live file when the view is bound
(its metadata cache keeps them), where the pyarrow path opens only the files
a query reads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.types as pat

from mere.data.external import data_file_location
from mere.log.actions import AddFile, TableMeta
from mere.schema import physical_name, widened_from
from mere.snapshot.dataset import local_path
from mere.sql.script import quote_identifier
from mere.storage.local import LocalStore

#: Partition values (UNION ALL branches) above which a table is read as a dataset:
#: DuckDB binds every branch's ``read_parquet`` for every query (a few ms each).
MAX_BRANCHES = 16
_GLOB = set("*?[]{}")

_SIMPLE: dict[pa.DataType, str] = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
    pa.bool_(): "BOOLEAN",
    pa.string(): "VARCHAR",
    pa.large_string(): "VARCHAR",
    pa.binary(): "BLOB",
    pa.large_binary(): "BLOB",
    pa.date32(): "DATE",
    pa.time64("us"): "TIME",
    pa.timestamp("s"): "TIMESTAMP_S",
    pa.timestamp("ms"): "TIMESTAMP_MS",
    pa.timestamp("us"): "TIMESTAMP",
    pa.timestamp("ns"): "TIMESTAMP_NS",
}


def duckdb_type(t: pa.DataType) -> str | None:
    """DuckDB's name for an Arrow type that round-trips exactly, or None."""
    if t in _SIMPLE:
        return _SIMPLE[t]
    if pat.is_decimal(t) and t.precision <= 38:
        return f"DECIMAL({t.precision}, {t.scale})"
    if pat.is_timestamp(t) and t.tz is not None and t.unit == "us":
        return "TIMESTAMPTZ"
    return None


def _literal(text: str | None, t: pa.DataType, sql_type: str) -> str | None:
    """A typed SQL constant for a partition value's canonical text, or None if unsure."""
    if text is None:
        return f"CAST(NULL AS {sql_type})"
    if pat.is_integer(t):
        return f"CAST({int(text)} AS {sql_type})" if text.lstrip("-").isdigit() else None
    if pat.is_boolean(t):
        return {"true": "TRUE", "false": "FALSE"}.get(text)
    if pat.is_string(t) or pat.is_large_string(t):
        return "'" + text.replace("'", "''") + "'"
    if pat.is_date(t) and len(text) == 10:
        return "DATE '" + text.replace("'", "''") + "'"
    return None


def _holds_every_column(add: AddFile, physical: set[str]) -> bool:
    stats = add.stats if isinstance(add.stats, dict) else None
    counts = stats.get("nullCount") if stats else None
    return isinstance(counts, dict) and physical <= set(counts)


def inlined_files(files: Sequence[AddFile]) -> list[AddFile]:
    """The files of ``files`` whose bytes are in the log (the view's dataset branch)."""
    return [add for add in files if add.inline is not None]


def native_view(
    store: LocalStore, meta: TableMeta, files: Sequence[AddFile], inlined: str | None = None
) -> str | None:
    """The ``SELECT`` a view of the table over ``read_parquet`` runs, or None (see above).

    ``inlined``: the name the caller registers a dataset of the inlined files
    under (needed only if there are any); the view reads them from it.
    """
    types: dict[str, str] = {}
    for f in meta.schema:
        sql_type = duckdb_type(f.type)
        if sql_type is None:
            return None
        types[f.name] = sql_type
    data = [f for f in meta.schema if f.name not in meta.partition_columns]
    physical = {physical_name(f) for f in data}
    groups: dict[tuple[str | None, ...], list[str]] = defaultdict(list)
    has_inlined = False
    # DuckDB reads a list of files in its first file's types. After a widening
    # (recorded in the field, format §5) the files' types are unified by name;
    # otherwise newest first, which holds for tables widened before the record
    # existed unless a writer's clock ran ahead.
    widened = any(widened_from(f) for f in data)
    for add in sorted(files, key=lambda a: a.modification_time, reverse=True):
        if add.inline is not None:  # read from the dataset registered as ``inlined``
            if inlined is None:
                return None
            has_inlined = True
            continue
        if not _holds_every_column(add, physical):
            return None
        holder, file_key = data_file_location(store, meta, add)
        if holder is not store:  # DuckDB may read under this store's root only
            return None
        path = local_path(store, file_key)
        if _GLOB & set(path) or "'" in path:
            return None
        key = tuple(add.partition_values.get(c) for c in meta.partition_columns)
        groups[key].append(path)
    if len(groups) > MAX_BRANCHES:
        return None
    if not groups and not has_inlined:
        nulls = ", ".join(
            f"CAST(NULL AS {types[f.name]}) AS {quote_identifier(f.name)}" for f in meta.schema
        )
        return f"SELECT {nulls} WHERE FALSE"
    branches = []
    for key, paths in groups.items():
        values = dict(zip(meta.partition_columns, key, strict=True))
        columns = []
        for f in meta.schema:
            if f.name in values:
                constant = _literal(values[f.name], f.type, types[f.name])
                if constant is None:
                    return None
                columns.append(f"{constant} AS {quote_identifier(f.name)}")
            else:
                source = quote_identifier(physical_name(f))
                columns.append(f"CAST({source} AS {types[f.name]}) AS {quote_identifier(f.name)}")
        listing = ", ".join(f"'{p}'" for p in paths)
        options = "hive_partitioning = false" + (", union_by_name = true" if widened else "")
        branches.append(f"SELECT {', '.join(columns)} FROM read_parquet([{listing}], {options})")
    if has_inlined and inlined is not None:
        columns = []
        for f in meta.schema:  # the dataset's columns: data columns by physical name
            source = quote_identifier(
                f.name if f.name in meta.partition_columns else physical_name(f)
            )
            columns.append(f"CAST({source} AS {types[f.name]}) AS {quote_identifier(f.name)}")
        branches.append(f"SELECT {', '.join(columns)} FROM {quote_identifier(inlined)}")
    return " UNION ALL ".join(branches)


__all__ = ["MAX_BRANCHES", "duckdb_type", "inlined_files", "native_view"]
