"""Planning a scan over a table's columns of files: which files a filter may match.

The statistics of the columns a filter names are read as columns
(:class:`~mere.snapshot.files.LiveFiles`), analysed for every file at once
(:mod:`mere.snapshot.vectorized`), and objects are built only for the files
that may match: a point lookup on a million files builds one.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from mere.data.values import widened_bound_arrays, zoned_bounds_inexact
from mere.expr.ast import referenced_columns
from mere.log.actions import AddFile, TableMeta
from mere.log.columns import (
    ROWS,
    max_column,
    min_column,
    nans_column,
    nulls_column,
    partition_column,
    text_to_values,
)
from mere.schema import physical_name
from mere.snapshot.files import LiveFiles
from mere.snapshot.scan import ScanPlan
from mere.snapshot.state import TableState
from mere.snapshot.vectorized import ColumnFacts, Facts, may_match_all


def table_facts(meta: TableMeta, files: LiveFiles, names: Iterable[str]) -> tuple[Facts, list[str]]:
    """The statistics of columns ``names`` over every live file, and the file columns read.

    Partition columns are their values (min = max, every row NULL or none);
    other columns their min/max/null/NaN counts, as ``file_ranges`` reads them
    one file at a time.
    """
    layout = files.layout
    wanted: list[str] = [ROWS]
    plan: list[tuple[str, pa.Field, tuple[str, ...]]] = []
    for name in names:
        f = meta.schema.field(name)
        if name in meta.partition_columns:
            used: tuple[str, ...] = (partition_column(name),)
        else:
            used = layout.columns_for(physical_name(f))
        plan.append((name, f, used))
        wanted += [c for c in used if c not in wanted]
    table = files.columns(wanted)
    rows = _plain(table.column(ROWS))
    columns: dict[str, ColumnFacts] = {}
    for name, f, used in plan:
        if name in meta.partition_columns:
            text = _plain(table.column(used[0]))
            value = text_to_values(text, f.type)
            value = value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value
            nulls = pc.if_else(pc.is_null(text), rows, pa.scalar(0, pa.int64()))
            columns[name] = ColumnFacts(value, value, nulls)
            continue
        physical = physical_name(f)
        stats = [
            _plain(table.column(c)) if c in used else None
            for c in (
                min_column(physical),
                max_column(physical),
                nulls_column(physical),
                nans_column(physical),
            )
        ]
        if zoned_bounds_inexact(f.type):
            stats[0], stats[1] = widened_bound_arrays(stats[0], stats[1])
        columns[name] = ColumnFacts(*stats)
    return Facts(rows, columns), wanted


def _plain(column: pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def select_files(plan: ScanPlan, table: TableState) -> list[AddFile]:
    """The files of ``table`` that ``plan``'s filter may match, decided for all files at once.

    The objects returned carry the statistics the filter reads (enough to read
    the files, not to commit them). Without a filter, every file; with one the
    vectorized analysis does not cover, the per-file analysis decides over
    objects built from those same columns.
    """
    files = table.files
    if not isinstance(files, LiveFiles):
        return plan.select(files.values())
    if plan.predicate is None:
        return files.take(range(files.num_files), columns=[])
    names = sorted(referenced_columns(plan.predicate))
    found, used = table_facts(plan.table, files, names)
    chosen = may_match_all(plan.predicate, found)
    if chosen is None:
        return plan.select(files.take(range(len(found.rows)), columns=used))
    return files.take(pc.indices_nonzero(chosen), columns=used)
