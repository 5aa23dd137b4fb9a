"""Scanning a table: choose the files a filter may match, read them, filter the rows.

One parsed expression serves both steps: partition values and per-file
min/max/null-count statistics rule files out without opening them, and the
same expression, compiled to pyarrow compute, filters the rows that remain.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from mere import expr as sqlexpr
from mere.data.reader import RowFilter, at_version, iter_file, read_parts
from mere.data.values import (
    from_text,
    stat_from_json,
    widened_bounds,
    zoned_bounds_inexact,
)
from mere.errors import InvalidExpression, SchemaMismatch
from mere.log.actions import AddFile, TableMeta
from mere.names import name_key
from mere.schema import physical_name
from mere.storage.base import ObjectStore

#: Files read concurrently by a scan (pyarrow releases the GIL while decoding).
READ_THREADS = 8


@dataclass(frozen=True)
class ScanPlan:
    """What a scan reads: the output columns, the bound filter, and the columns both need."""

    table: TableMeta
    columns: list[str]
    predicate: sqlexpr.Expr | None
    read_columns: list[str]
    #: The filter as the user wrote it (named in errors), if there is one.
    filter: str | None = None

    def matches(self, add: AddFile) -> bool:
        """False when the file cannot hold a row matching the filter."""
        if self.predicate is None:
            return True
        ranges = file_ranges(self.table, add, self._skip_columns)
        return sqlexpr.may_match(self.predicate, ranges, add.rows)

    def covers(self, add: AddFile) -> bool:
        """True when every row of the file matches the filter (False without a filter)."""
        if self.predicate is None:
            return False
        ranges = file_ranges(self.table, add, self._skip_columns)
        return sqlexpr.must_match(self.predicate, ranges, add.rows)

    @cached_property
    def _skip_columns(self) -> frozenset[str]:
        """The columns the filter names: the only statistics skipping decodes."""
        if self.predicate is None:
            return frozenset()
        return frozenset(sqlexpr.referenced_columns(self.predicate))

    def select(self, files: Iterable[AddFile]) -> list[AddFile]:
        return [f for f in files if self.matches(f)]

    def row_filter(self) -> RowFilter | None:
        """The filter for the Parquet reader to skip row groups with (None if none is safe).

        Only the conjuncts :func:`~mere.expr.row_group_pushdown` deems safe are handed
        over (never one on a floating-point column: Parquet statistics leave NaN out);
        the rows read are filtered with the whole predicate afterwards.
        """
        if self.predicate is None:
            return None
        pushed = sqlexpr.row_group_pushdown(self.predicate, frozenset(self.table.partition_columns))
        if pushed is None:
            return None
        columns = frozenset(sqlexpr.referenced_columns(pushed))
        return RowFilter(sqlexpr.to_arrow(pushed), columns)


def plan_scan(table: TableMeta, columns: Sequence[str] | None, filter: str | None) -> ScanPlan:
    """Resolve the requested columns and parse and bind the filter.

    Raises:
        SchemaMismatch: a requested column does not exist.
        InvalidExpression: the filter cannot be parsed, is not boolean, or
            names an unknown column.
    """
    names = table.schema.names
    if columns is None:
        out = list(names)
    else:
        if isinstance(columns, str):
            raise SchemaMismatch("columns must be a list of column names, not a string")
        # Names match as in filters and appends: exactly, else ignoring case (column
        # names are unique ignoring case); the output uses the table's spelling.
        by_key = {name_key(n): n for n in names}
        out = [
            by_key.get(name_key(c), c) if isinstance(c, str) and c not in names else c
            for c in columns
        ]
        unknown = [c for c, resolved in zip(columns, out, strict=True) if resolved not in names]
        if unknown:
            raise SchemaMismatch(
                f"unknown column(s) {unknown} in table {table.name!r}; it has {names}"
            )
    predicate = None
    if filter is not None:
        predicate = sqlexpr.bind(sqlexpr.parse(filter), table.schema)
        if not sqlexpr.is_boolean(predicate):
            raise InvalidExpression(f"filter {filter!r} is not a boolean expression")
    needed = set(out) | (sqlexpr.referenced_columns(predicate) if predicate is not None else set())
    read_columns = [n for n in names if n in needed]
    return ScanPlan(table, out, predicate, read_columns, filter)


def file_ranges(
    table: TableMeta, add: AddFile, columns: frozenset[str] | None = None
) -> dict[str, sqlexpr.ColumnRange]:
    """What the log knows about each column of one file (or of ``columns``), for data skipping."""
    ranges: dict[str, sqlexpr.ColumnRange] = {}
    for col in table.partition_columns:
        if columns is not None and col not in columns:
            continue
        text = add.partition_values.get(col)
        value = None if text is None else from_text(text, table.schema.field(col).type).as_py()
        ranges[col] = sqlexpr.ColumnRange(value, value, add.rows if value is None else 0, add.rows)
    stats = add.stats if isinstance(add.stats, dict) else {}
    # Statistics are only hints: anything malformed counts as unknown.
    mins, maxs, nulls, nans = (
        _mapping(stats.get(k)) for k in ("minValues", "maxValues", "nullCount", "nanCount")
    )
    for f in table.schema:
        if f.name in ranges or (columns is not None and f.name not in columns):
            continue
        stored = physical_name(f)
        lo, hi = stat_from_json(mins.get(stored), f.type), stat_from_json(maxs.get(stored), f.type)
        if zoned_bounds_inexact(f.type):
            lo, hi = widened_bounds(lo, hi)
        ranges[f.name] = sqlexpr.ColumnRange(
            lo,
            hi,
            _count(nulls.get(stored)),
            add.rows,
            _count(nans.get(stored)),  # floats: without it, NaN counts as possible
        )
    return ranges


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _finish(plan: ScanPlan, data: pa.Table) -> pa.Table:
    if plan.predicate is not None:
        data = sqlexpr.filter_table(plan.predicate, data, text=plan.filter)
    return data.select(plan.columns)


def output_schema(plan: ScanPlan) -> pa.Schema:
    return pa.schema([plan.table.schema.field(c) for c in plan.columns])


def scan_files(
    store: ObjectStore, plan: ScanPlan, files: Sequence[AddFile], *, version: int | None = None
) -> pa.Table:
    """Read and filter ``files`` (already selected by the plan) into one table.

    ``version``: the version read, named by an error about a missing or
    damaged data file (:class:`~mere.errors.DataFileError`).
    """

    row_filter = plan.row_filter()
    if not files:
        return output_schema(plan).empty_table()
    with at_version(version):
        columns = plan.read_columns
        finish = functools.partial(_finish, plan)
        parts = read_parts(store, plan.table, files, columns, row_filter, finish)
    if not plan.columns:  # concat_tables drops the row count of tables without columns
        return pa.table({"_": pa.nulls(sum(p.num_rows for p in parts))}).select([])
    return pa.concat_tables(parts)


def scan_batches(
    store: ObjectStore, plan: ScanPlan, files: Sequence[AddFile], *, version: int | None = None
) -> pa.RecordBatchReader:
    """Stream ``files`` as record batches, one bounded piece at a time (``version``: as above)."""
    schema = output_schema(plan)

    def batches() -> Iterator[pa.RecordBatch]:
        with at_version(version):
            for add in files:
                for piece in iter_file(store, plan.table, add, plan.read_columns):
                    yield from _finish(plan, piece).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())
