"""Reading data files back as Arrow in the table's schema.

A data file holds the table's non-partition columns as they were when it was
written; a reader adds the partition columns from the file's partition values
and fills columns the file does not have with nulls, so every file reads in
the current table schema.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from mere.data.external import data_file_name, open_data_file
from mere.data.values import from_text
from mere.errors import CorruptDataFile, CorruptInlinedFile, DataFileError
from mere.log.actions import AddFile, TableMeta
from mere.log.inlined import decode_inlined
from mere.schema import physical_name
from mere.storage.base import ObjectStore

T = TypeVar("T")
U = TypeVar("U")

READ_BATCH_ROWS = 128 * 1024
#: Files read at once by :func:`read_files` (pyarrow releases the GIL while decoding).
READ_THREADS = 8
#: A file at least this large is decoded by several threads (its columns in
#: parallel); a smaller one costs more in thread hand-offs than it would save
#: (a one-row file: 0.24 ms against 0.08 ms decoded on the calling thread).
THREADED_DECODE_BYTES = 1024 * 1024


def read_file(
    store: ObjectStore,
    table: TableMeta,
    add: AddFile,
    columns: Sequence[str],
    row_filter: RowFilter | None = None,
) -> pa.Table:
    """Read ``columns`` (table column names, in that order) of one data file.

    With ``row_filter``, row groups whose statistics rule the filter out are
    skipped and only matching rows may be returned (the caller still filters:
    the pushdown is used only where the file's columns are exactly the
    table's, and otherwise every row is returned).
    """
    if add.inline is not None:  # decoded once, then from memory
        return _read_inlined(table, [add], columns)
    schema = pa.schema([table.schema.field(c) for c in columns])
    source = open_data_file(store, table, add)
    try:
        with parquet_errors(table, add):
            pf = _open_parquet(table, add, source)
            stored = _stored_columns(table, schema, pf.schema_arrow)
            if row_filter is not None and stored and row_filter.applies_to(table, pf.schema_arrow):
                fragment = ds.ParquetFileFormat().make_fragment(source)
                data = fragment.to_table(columns=stored, filter=row_filter.expression)
                rows = data.num_rows
            else:
                threads = add.size >= THREADED_DECODE_BYTES
                data = pf.read(columns=stored, use_threads=threads) if stored else None
                rows = add.rows
            return _assemble(table, add, schema, data, rows)  # casts: another type fails here
    finally:
        source.close()


def read_files(
    store: ObjectStore,
    table: TableMeta,
    files: Sequence[AddFile],
    columns: Sequence[str],
    row_filter: RowFilter | None = None,
) -> list[pa.Table]:
    """:func:`read_file` for each of ``files``, several at a time, in order."""
    return in_parallel(
        files,
        lambda add: read_file(store, table, add, columns, row_filter),
        lambda add: add.inline is None,
    )


def read_parts(
    store: ObjectStore,
    table: TableMeta,
    files: Sequence[AddFile],
    columns: Sequence[str],
    row_filter: RowFilter | None = None,
    finish: Callable[[pa.Table], pa.Table] = lambda rows: rows,
) -> list[pa.Table]:
    """The rows of ``files``, in order, in parts: ``finish`` of one stored file's
    rows, or of a run of inlined files that share their partition values and
    their columns (one table assembled for the run, not one per file: a
    one-row file costs more to assemble than to read once decoded)."""
    runs: list[list[AddFile]] = []
    run_schema: pa.Schema | None = None  # the columns of the run of inlined files going on
    for add in files:
        file_schema = decoded_inline(table, add).schema if add.inline is not None else None
        last = runs[-1][-1] if runs else None
        if (
            file_schema is not None
            and file_schema == run_schema
            and last is not None
            and add.partition_values == last.partition_values
        ):
            runs[-1].append(add)
        else:
            runs.append([add])
        run_schema = file_schema

    def read(run: list[AddFile]) -> pa.Table:
        if run[0].inline is not None:
            return finish(_read_inlined(table, run, columns))
        return finish(read_file(store, table, run[0], columns, row_filter))

    return in_parallel(runs, read, lambda run: run[0].inline is None)


def _read_inlined(table: TableMeta, run: Sequence[AddFile], columns: Sequence[str]) -> pa.Table:
    """``columns`` of inlined files that share their partition values and columns, as one table."""
    schema = pa.schema([table.schema.field(c) for c in columns])
    decoded = [decoded_inline(table, add) for add in run]
    stored = _stored_columns(table, schema, decoded[0].schema)
    data = None
    if stored:
        data = pa.concat_tables([d.select(stored) for d in decoded])
        if len(decoded) > 1:  # one chunk per column: engines pay per chunk they scan
            data = data.combine_chunks()
    with parquet_errors(table, run[0]):
        return _assemble(table, run[0], schema, data, sum(add.rows for add in run))


def in_parallel(items: Sequence[U], read: Callable[[U], T], stored: Callable[[U], bool]) -> list[T]:
    """``read`` of each of ``items``, in order.

    Stored files are read by up to ``READ_THREADS`` threads (their reads wait
    for the store); inlined ones on the calling thread, meanwhile (their bytes
    are in memory: a thread would only add its hand-off).
    """
    threaded = [i for i, item in enumerate(items) if stored(item)]
    if len(threaded) <= 1:
        return [read(item) for item in items]
    out: list[T | None] = [None] * len(items)
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(threaded))) as pool:
        pending = {i: pool.submit(read, items[i]) for i in threaded}
        for i, item in enumerate(items):
            if not stored(item):
                out[i] = read(item)
        for i, future in pending.items():
            out[i] = future.result()
    return cast(list[T], out)


#: The compressed bytes :func:`iter_read_files` reads ahead at most (beyond one file).
READ_AHEAD_BYTES = 64 * 1024 * 1024


def iter_read_files(
    store: ObjectStore, table: TableMeta, files: Sequence[AddFile], columns: Sequence[str]
) -> Iterator[tuple[AddFile, pa.Table]]:
    """Each of ``files`` with its rows, in order, reading a bounded window at a time.

    A window holds up to :data:`READ_THREADS` files and :data:`READ_AHEAD_BYTES`,
    read together, so a rewrite over many files neither waits for one round
    trip per file nor holds the whole table in memory.
    """
    start = 0
    while start < len(files):
        end, size = start, 0
        while end < len(files) and end - start < READ_THREADS:
            if end > start and size + files[end].size > READ_AHEAD_BYTES:
                break
            size += files[end].size
            end += 1
        window = files[start:end]
        yield from zip(window, read_files(store, table, window, columns), strict=True)
        start = end


@dataclass(frozen=True)
class RowFilter:
    """A row filter a Parquet reader may apply itself, to skip row groups."""

    expression: pc.Expression
    columns: frozenset[str]  # the table columns it references

    def applies_to(self, table: TableMeta, file_schema: pa.Schema) -> bool:
        """Only data columns stored under their own name with the table's type qualify."""
        for name in self.columns:
            if name in table.partition_columns:
                return False
            f = table.schema.field(name)
            i = file_schema.get_field_index(name)
            if physical_name(f) != name or i < 0 or file_schema.field(i).type != f.type:
                return False
        return True


def iter_file(
    store: ObjectStore,
    table: TableMeta,
    add: AddFile,
    columns: Sequence[str],
    batch_rows: int = READ_BATCH_ROWS,
    part: tuple[int, int] = (0, 1),
) -> Iterator[pa.Table]:
    """Read one data file in bounded pieces (for streaming scans).

    ``part`` = (i, n): only the i-th of n contiguous runs of its row groups
    (a large file split across tasks); an inlined file is all in part 0.
    """
    index, parts = part
    schema = pa.schema([table.schema.field(c) for c in columns])
    if add.inline is not None:  # a few rows, decoded once
        if index == 0:
            yield read_file(store, table, add, columns)
        return
    source = open_data_file(store, table, add)
    try:
        with parquet_errors(table, add):
            pf = _open_parquet(table, add, source)
            stored = _stored_columns(table, schema, pf.schema_arrow)
        count = pf.num_row_groups
        groups = [g for g in range(count) if g * parts // count == index]
        if parts > 1 and not groups:
            return
        if not stored:
            rows = sum(pf.metadata.row_group(g).num_rows for g in groups) if parts > 1 else add.rows
            yield _assemble(table, add, schema, None, rows)
            return
        chosen = groups if parts > 1 else None
        batches = pf.iter_batches(batch_size=batch_rows, row_groups=chosen, columns=stored)
        while True:
            with parquet_errors(table, add):
                batch = next(batches, None)
                if batch is None:
                    return
                rows = _assemble(table, add, schema, pa.Table.from_batches([batch]), batch.num_rows)
            yield rows
    finally:
        source.close()


def _open_parquet(table: TableMeta, add: AddFile, source: pa.NativeFile) -> pq.ParquetFile:
    """The stored data file ``source``, once its footer agrees with what the log records.

    A file overwritten by another valid Parquet file would otherwise read as
    rows the table never held (another file's rows, or nulls for columns it
    lacks). Its size and row count must be the log's, and it must store every
    NOT NULL column of the table: such a column was there when the file was
    written (a column added later is nullable) and is never dropped.

    Raises:
        CorruptDataFile: the file is not the one the log describes.
    """
    pf = pq.ParquetFile(source)
    reason = None
    if source.size() != add.size:
        reason = f"it is {source.size():,} bytes; the log records {add.size:,}"
    elif pf.metadata.num_rows != add.rows:
        reason = f"it holds {pf.metadata.num_rows:,} rows; the log records {add.rows:,}"
    else:
        names = set(pf.schema_arrow.names)
        for f in table.schema:
            if not f.nullable and f.name not in table.partition_columns:
                if physical_name(f) not in names:
                    reason = f"it has no column {f.name!r}, which is NOT NULL"
                    break
    if reason is not None:
        raise CorruptDataFile.of(data_file_name(table, add), table.name, reason=reason)
    return pf


@contextmanager
def parquet_errors(table: TableMeta, add: AddFile) -> Iterator[None]:
    """Turn Parquet's errors decoding one data file into :class:`CorruptDataFile` naming it.

    pyarrow names no file ("Parquet magic bytes not found in footer"); it
    raises ``ArrowInvalid``, or a plain ``OSError`` for an undecodable footer
    (subclasses of ``OSError``, such as a dropped connection, are not a damaged file).
    """
    error = CorruptDataFile if add.inline is None else CorruptInlinedFile
    try:
        yield
    except pa.ArrowInvalid as exc:
        raise error.of(data_file_name(table, add), table.name, reason=str(exc)) from exc
    except OSError as exc:
        if type(exc) is not OSError:
            raise
        raise error.of(data_file_name(table, add), table.name, reason=str(exc)) from exc


@contextmanager
def at_version(version: int | None) -> Iterator[None]:
    """Name ``version`` in the data-file errors raised inside (file readers know no version)."""
    try:
        yield
    except DataFileError as exc:
        if version is None:
            raise
        raise exc.at_version(version) from exc.__cause__


#: Decoded inlined files are kept in memory while their inlined bytes add up to
#: at most this, least recently used out first: decoding a one-row Parquet file
#: costs about 0.1 ms, so a query over a table's thousands of inlined files
#: would otherwise pay that for each file, every time. (A table holds at most
#: ``inlineFlushBytes``, 8 MiB by default, before they are flushed to data files.)
INLINED_CACHE_BYTES = 64 * 1024 * 1024
_inlined: OrderedDict[tuple[str, str, bytes], tuple[pa.Table, int]] = OrderedDict()
_inlined_bytes = 0
_inlined_lock = threading.Lock()


def decoded_inline(table: TableMeta, add: AddFile) -> pa.Table:
    """Every column of an inlined data file, as stored (physical names, file types).

    Raises:
        CorruptInlinedFile: the bytes are neither a Parquet file nor an Arrow IPC stream.
    """
    assert add.inline is not None
    global _inlined_bytes
    key = (table.id, add.path, add.inline)  # by content: a damaged copy is decoded afresh
    with _inlined_lock:
        found = _inlined.get(key)
        if found is not None:
            _inlined.move_to_end(key)
            return found[0]
    with parquet_errors(table, add):
        decoded = decode_inlined(add.inline)
    if decoded.num_rows != add.rows:
        reason = f"it holds {decoded.num_rows:,} rows; the log records {add.rows:,}"
        raise CorruptInlinedFile.of(data_file_name(table, add), table.name, reason=reason)
    with _inlined_lock:
        if key not in _inlined:
            _inlined[key] = (decoded, len(add.inline))
            _inlined_bytes += len(add.inline)
        while _inlined_bytes > INLINED_CACHE_BYTES:
            _inlined_bytes -= _inlined.popitem(last=False)[1][1]
    return decoded


def _stored_columns(table: TableMeta, schema: pa.Schema, file_schema: pa.Schema) -> list[str]:
    """Physical names of the requested columns that this file actually holds."""
    present = set(file_schema.names)
    wanted = (physical_name(f) for f in schema if f.name not in table.partition_columns)
    return [name for name in wanted if name in present]


def _assemble(
    table: TableMeta, add: AddFile, schema: pa.Schema, data: pa.Table | None, rows: int
) -> pa.Table:
    arrays = []
    for f in schema:
        if f.name in table.partition_columns:
            value = from_text(add.partition_values.get(f.name), f.type)
            arrays.append(pa.repeat(value, rows))
        elif data is not None and physical_name(f) in data.column_names:
            col = data.column(physical_name(f))
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(rows, f.type))
    if not arrays:  # no columns: keep the row count (a count, or scan(columns=[]))
        return pa.table({"_": pa.nulls(rows)}).select([])
    return pa.Table.from_arrays(arrays, schema=schema)
