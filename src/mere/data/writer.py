"""Writing a table's rows as Parquet data files of a target size, with statistics.

Rows are split by partition, buffered, and written as row groups into an
in-memory Parquet file per partition; when a file reaches the target size it
is uploaded create-only under a fresh name and becomes an :class:`AddFile`.
Statistics (row count, per-column min/max/null count, and the NaN count of
floating-point columns) are exact: null and NaN counts and the min/max of
non-string columns are computed from the Arrow data as it is written; string
min/max are taken from the row-group statistics the Parquet writer computes
anyway (exact, byte-wise ordered like Python's ``str``; absent when a value
is too long), which saves the most expensive pass over the data.

A write of several row groups' worth of rows is cut into contiguous slices,
one per thread (``WRITE_THREADS``), each encoded into files of its own:
pyarrow's Parquet writer releases the GIL, so a large append uses every core.
Uploads stay on the calling thread, in row order, after each wave of slices.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

from mere.data.values import MAX_STAT_STRING, partition_text, python_text, stat_to_json
from mere.errors import InvalidKey, MereError, ObjectNotFound, StorageError
from mere.log.actions import AddFile, TableMeta
from mere.log.inlined import (
    arrow_stream_head,
    decode_inlined,
    encode_arrow_stream,
    is_arrow_stream,
)
from mere.names import escape_partition_value
from mere.schema import data_columns, has_statistics
from mere.storage.base import ObjectStore

log = logging.getLogger("mere")

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
#: Rows are buffered until this much Arrow memory, then written as one row group.
ROW_GROUP_BYTES = 64 * 1024 * 1024
COMPRESSION = "zstd"
#: A file whose rows take at most this much Arrow memory in all is written
#: uncompressed, without dictionaries (a one-row commit's file; it changes its
#: size by a few bytes either way).
TINY_FILE_BYTES = 8 * 1024
#: Threads encoding one large write (contiguous slices of its rows, a file each).
WRITE_THREADS = max(1, min(8, os.cpu_count() or 1))
#: A write is cut into slices of at least this much Arrow memory: smaller ones
#: would cost more in small files than they save in time.
SLICE_MIN_BYTES = 32 * 1024 * 1024
#: A thread's share of one wave of a large write, in target-sized files of Arrow data.
WAVE_FILES = 4


@dataclass
class _ColumnStats:
    min: Any = None
    max: Any = None
    nulls: int = 0
    nans: int | None = None  # NaN values, for floating-point columns
    exact: bool = True  # False once a min/max could not be recorded
    from_footer: bool = False  # a string column with values: bounds from the Parquet footer


@dataclass
class _OpenFile:
    partition_values: dict[str, str | None]
    schema: pa.Schema
    sink: pa.BufferOutputStream = field(default_factory=pa.BufferOutputStream)
    writer: pq.ParquetWriter | None = None  # opened with the first row group
    pending: list[pa.Table] = field(default_factory=list)
    pending_bytes: int = 0
    rows: int = 0
    stats: dict[str, _ColumnStats] = field(default_factory=dict)


@dataclass
class _Encoded:
    """A closed file's bytes and what its add action says, not uploaded yet."""

    partition_values: dict[str, str | None]
    buffer: pa.Buffer
    rows: int
    stats: dict[str, Any]
    arrow_stream: bool = False  # an Arrow IPC stream to inline, never stored as an object


_Key = tuple[str | None, ...]


class DataFileWriter:
    """Buffers rows of one table and writes them as Parquet data files.

    ``write`` takes data already conformed to the table schema. Files are
    uploaded as they fill up; ``finish`` writes what is left and returns
    every file written, as add actions. Nothing is visible until a commit
    references them. A file of at most ``inline_limit`` bytes is not uploaded:
    its add carries the bytes, to be inlined in the commit (docs/format.md §2.5).
    With ``inline_arrow`` (a database at format version 4), a file whose rows
    were all still buffered when it closed is inlined as an Arrow IPC stream,
    if that fits the limit, instead of being encoded as Parquet.
    """

    def __init__(
        self,
        store: ObjectStore,
        table: TableMeta,
        *,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        inline_limit: int = 0,
        inline_arrow: bool = False,
    ) -> None:
        self.store = store
        self.table = table
        self.target_file_size = target_file_size
        self.inline_limit = inline_limit
        self.inline_arrow = inline_arrow and inline_limit > 0
        self._layout = _layout_of(table)
        self.file_schema = self._layout.file_schema
        self._open: dict[tuple[str | None, ...], _OpenFile] = {}
        self.written: list[AddFile] = []

    def write(self, data: pa.Table) -> None:
        if data.num_rows == 0:
            return
        layout = self._layout
        for values, part in self._split(data):
            if not (layout.as_stored and part.column_names == layout.logical):
                part = part.select(layout.logical).rename_columns(self.file_schema.names)
            self._append(values, part)

    def finish(self) -> list[AddFile]:
        """Flush every open file and return all files written so far."""
        for key in list(self._open):
            self._close(key)
        return list(self.written)

    def absorb(self, other: DataFileWriter) -> list[AddFile]:
        """Take over the rows ``other`` (same table) still holds in memory.

        A statement writes through a writer of its own, so that a failed
        statement can drop its rows; when it succeeds, its buffered rows join
        the enclosing writer instead of becoming a small file. Files ``other``
        already started are closed. Returns every file ``other`` wrote.
        """
        group_bytes = min(ROW_GROUP_BYTES, self.target_file_size)
        for key in list(other._open):
            f = other._open[key]
            if f.rows != sum(p.num_rows for p in f.pending):
                other._close(key)  # a row group is already encoded: finish that file
                continue
            del other._open[key]
            for piece in f.pending:
                self._append_piece(key, piece, group_bytes)
        return list(other.written)

    def _split(self, data: pa.Table) -> list[tuple[tuple[str | None, ...], pa.Table]]:
        cols = list(self.table.partition_columns)
        if not cols:
            return [((), data)]
        indexed = data.append_column("__mere_row", pa.array(range(data.num_rows), pa.int64()))
        groups = indexed.group_by(cols, use_threads=False).aggregate([("__mere_row", "list")])
        out = []
        for i in range(groups.num_rows):
            values = tuple(partition_text(groups.column(c)[i], c) for c in cols)
            rows = groups.column("__mere_row_list")[i].values
            out.append((values, data.take(rows)))
        return out

    def _append(self, key: _Key, part: pa.Table) -> None:
        """Add rows of one partition, a row group's worth at a time.

        Rows for several row groups are encoded in parallel, in waves of at
        most ``WAVE_FILES`` target-sized files' worth of Arrow data per thread
        (so encoded files wait for their upload in bounded memory): the file
        open for ``key`` is finished first (files keep the rows' order), then
        each of up to ``WRITE_THREADS`` contiguous slices of equal size (at
        least ``SLICE_MIN_BYTES``) is written into files of its own, closed
        when the slice ends.
        """
        group_bytes = min(ROW_GROUP_BYTES, self.target_file_size)
        if part.num_rows <= SMALL_PIECE_ROWS:  # a small commit's rows: no slicing to plan
            self._append_piece(key, part, group_bytes)
            return
        row_bytes = max(1, part.nbytes // max(1, part.num_rows))
        step = max(1, group_bytes // row_bytes)
        wave = max(step, WAVE_FILES * self.target_file_size // row_bytes) * WRITE_THREADS
        for start in range(0, part.num_rows, wave):
            self._append_wave(key, part.slice(start, wave), group_bytes, step)

    def _append_wave(self, key: _Key, part: pa.Table, group_bytes: int, step: int) -> None:
        lanes = min(WRITE_THREADS, -(-part.num_rows // step), part.nbytes // SLICE_MIN_BYTES)
        if lanes <= 1:
            for start in range(0, part.num_rows, step):
                self._append_piece(key, part.slice(start, step), group_bytes)
            return
        if key in self._open:
            self._upload(_finish_file(self._open.pop(key)))
        per_lane = -(-part.num_rows // lanes)
        slices = [part.slice(start, per_lane) for start in range(0, part.num_rows, per_lane)]

        def lane(rows: pa.Table) -> list[_Encoded]:
            files: dict[_Key, _OpenFile] = {}
            done: list[_Encoded] = []
            groups = -(-rows.num_rows // step)
            even = -(-rows.num_rows // groups)  # row groups of equal size
            for start in range(0, rows.num_rows, even):
                self._add_rows(files, key, rows.slice(start, even), 0, done)
            for f in files.values():
                done.extend(_finish_file(f))
            return done

        with ThreadPoolExecutor(len(slices), thread_name_prefix="mere-write") as pool:
            for done in list(pool.map(lane, slices)):
                self._upload(done)

    def _append_piece(self, key: _Key, piece: pa.Table, group_bytes: int) -> None:
        encoded: list[_Encoded] = []
        self._add_rows(self._open, key, piece, group_bytes, encoded)
        self._upload(encoded)

    def _add_rows(
        self,
        files: dict[_Key, _OpenFile],
        key: _Key,
        piece: pa.Table,
        group_bytes: int,
        encoded: list[_Encoded],
    ) -> None:
        """Buffer ``piece`` in ``files[key]``, encoded as a row group once ``group_bytes``
        are buffered (0: now); a file that reached the target size is closed and
        appended to ``encoded``. Touches nothing but its arguments (lanes run it in
        threads)."""
        f = files.get(key)
        if f is None:
            f = _OpenFile(
                partition_values=dict(zip(self.table.partition_columns, key, strict=True)),
                schema=self.file_schema,
                stats={name: _ColumnStats() for name in self.file_schema.names},
            )
            files[key] = f
        _update_stats(f.stats, piece, self._layout.small_stats)
        f.pending.append(piece)
        f.pending_bytes += _arrow_bytes(piece)
        f.rows += piece.num_rows
        if f.pending_bytes >= group_bytes:
            _write_row_group(f)
            if f.sink.tell() >= self.target_file_size:
                encoded.extend(_finish_file(files.pop(key)))

    def _close(self, key: _Key) -> None:
        f = self._open.pop(key)
        inlined = self._as_arrow_stream(f) if self.inline_arrow else None
        self._upload([inlined] if inlined is not None else _finish_file(f))

    def _as_arrow_stream(self, f: _OpenFile) -> _Encoded | None:
        """``f``'s rows as an Arrow IPC stream to inline, or None: some are already
        encoded as Parquet, or the stream would pass the inline limit."""
        if f.writer is not None or f.rows == 0 or f.pending_bytes > self.inline_limit:
            return None
        rows = f.pending[0] if len(f.pending) == 1 else pa.concat_tables(f.pending)
        if not rows.schema.equals(f.schema):
            return None  # the Parquet writer refuses such rows, naming the difference
        head = self._layout.stream_head
        if head is None:  # the stream writer takes the file's schema from the rows
            rows = pa.Table.from_arrays(rows.columns, schema=f.schema)
        buffer = encode_arrow_stream(rows, head)
        if buffer.size > self.inline_limit:
            return None
        _text_bounds(f.stats, rows)
        return _Encoded(
            f.partition_values, buffer, f.rows, _stats_json(f.rows, f.stats), arrow_stream=True
        )

    def _upload(self, encoded: list[_Encoded]) -> None:
        """Upload closed files, in order, and record them as add actions."""
        for e in encoded:
            path = new_data_file_path(e.partition_values)
            small = e.arrow_stream or e.buffer.size <= self.inline_limit
            inline = e.buffer.to_pybytes() if small else None
            if inline is None:
                upload(self.store, self.table.prefix + path, e.buffer)
            self.written.append(
                AddFile(
                    table_id=self.table.id,
                    path=path,
                    size=e.buffer.size,
                    rows=e.rows,
                    partition_values=e.partition_values,
                    stats=e.stats,
                    modification_time=int(time.time() * 1000),
                    inline=inline,
                )
            )


def _arrow_bytes(piece: pa.Table) -> int:
    """The Arrow memory of ``piece``'s rows. ``nbytes`` (exact, also for a slice of
    larger buffers) costs 15 us a call; the buffers' total size, an upper bound of
    it, is 50 times cheaper and exact enough for a small piece."""
    size = piece.get_total_buffer_size()
    return size if size <= TINY_FILE_BYTES else piece.nbytes


def _write_row_group(f: _OpenFile, *, last: bool = False) -> None:
    """Encode the buffered rows as a row group (``last``: the file's last one)."""
    if not f.pending:
        return
    if f.writer is None:
        # A whole file of a few rows (a small commit) is not worth compressing
        # or dictionary-encoding: zstd's setup alone doubled its encoding time.
        tiny = last and f.pending_bytes <= TINY_FILE_BYTES
        # Footer statistics let other engines skip row groups: not worth their
        # cost in a tiny file, unless mere's own string bounds come from them.
        footer = not tiny or any(s.from_footer for s in f.stats.values())
        f.writer = pq.ParquetWriter(
            f.sink,
            f.schema,
            compression="none" if tiny else COMPRESSION,
            # the columns worth dictionary-encoding, judged from the first rows
            use_dictionary=[] if tiny else dictionary_columns(f.schema, f.pending[0]),
            write_statistics=footer_statistics_columns(f.schema) if footer else False,
        )
    # Not combined into contiguous arrays: the Parquet writer encodes the
    # chunks in place (a copy would cost a row group's memory and time).
    batch = pa.concat_tables(f.pending)
    f.writer.write_table(batch, row_group_size=max(batch.num_rows, 1))
    f.pending, f.pending_bytes = [], 0


def _finish_file(f: _OpenFile) -> list[_Encoded]:
    """Encode what ``f`` still buffers and close it: [] if it holds no rows."""
    _write_row_group(f, last=True)
    if f.writer is None or f.rows == 0:
        return []
    f.writer.close()
    _footer_string_bounds(f.writer.writer.metadata, f.stats)
    return [_Encoded(f.partition_values, f.sink.getvalue(), f.rows, _stats_json(f.rows, f.stats))]


def _text_bounds(stats: dict[str, _ColumnStats], rows: pa.Table) -> None:
    """Set the min/max of string columns left to the Parquet footer from ``rows``
    themselves (a file inlined as an Arrow stream has no footer). Arrow orders
    strings byte-wise, as the footer does (``_stats_json`` drops a bound too
    long to record)."""
    for name, s in stats.items():
        if not (s.from_footer and s.exact):
            continue
        bounds = pc.min_max(rows.column(name))
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo is not None and hi is not None:
            s.min, s.max = (lo, lo), (hi, hi)


def _footer_string_bounds(metadata: pq.FileMetaData, stats: dict[str, _ColumnStats]) -> None:
    """Set string columns' min/max from the Parquet writer's row-group statistics.

    Parquet orders UTF-8 byte-wise, as Python orders ``str`` (code points), and
    Arrow's writer records exact values, leaving a row group's min/max out when
    a value is too long (more than 4096 bytes, so past ``MAX_STAT_STRING``
    characters too): such a row group with a non-null value makes the bounds
    unknown.
    """
    if not any(s.from_footer for s in stats.values()):
        return
    index = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    for name, s in stats.items():
        if not s.from_footer or not s.exact:
            continue
        if name not in index:
            s.exact = False
            continue
        lo: str | None = None
        hi: str | None = None
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            st = group.column(index[name]).statistics
            if st is None or not st.has_min_max:
                if st is None or st.null_count != group.num_rows:
                    s.exact = False
                    break
                continue
            if lo is None or st.min < lo:
                lo = st.min
            if hi is None or st.max > hi:
                hi = st.max
        if s.exact and lo is not None and hi is not None:
            s.min, s.max = (lo, lo), (hi, hi)  # too long to record: _stats_json drops them


#: Rows of a file's first piece looked at to choose its dictionary-encoded columns.
DICTIONARY_SAMPLE_ROWS = 64 * 1024


def dictionary_columns(schema: pa.Schema, first: pa.Table) -> list[str]:
    """The Parquet column paths worth dictionary-encoding in a file starting with ``first``.

    A flat column whose sample of rows is mostly distinct values (ids, free
    text, measurements) is left out: its dictionary would overflow the
    writer's page limit and fall back to plain encoding after the work of
    building it (a third of a write's CPU on the throughput table), and
    plain pages read faster. Nested columns keep their dictionaries.
    """
    sample = first.slice(0, DICTIONARY_SAMPLE_ROWS)
    out = []
    for path, name in _parquet_paths(schema):
        if path == name and sample.num_rows >= 1024:
            col = sample.column(name)
            t = col.type
            if pa.types.is_primitive(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
                values = len(col) - col.null_count
                if values and pc.count_distinct(col).as_py() > values // 2:
                    continue
        out.append(path)
    return out


@functools.lru_cache(maxsize=128)
def _parquet_paths(schema: pa.Schema) -> list[tuple[str, str]]:
    """(Parquet column path, top-level Arrow field name) of each leaf column."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    parquet = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    paths = [parquet.column(i).path for i in range(len(parquet))]
    flat = {f.name for f in schema if not pa.types.is_nested(f.type)}
    return [(p, p if p in flat else "") for p in paths]


def inlined_as_parquet(data: bytes) -> bytes:
    """Inlined bytes as a Parquet data file, for whatever reads them as one (a copy
    out of the log, a Parquet reader): Parquet bytes as they are, an Arrow stream
    encoded with a data file's footer statistics (``footer_statistics_columns``)."""
    return parquet_data_file(decode_inlined(data)) if is_arrow_stream(data) else data


def parquet_data_file(rows: pa.Table) -> bytes:
    """``rows`` as the bytes of one Parquet data file (zstd, footer statistics for
    every column but floating-point ones: ``footer_statistics_columns``)."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        rows, sink, compression=COMPRESSION, write_statistics=footer_statistics_columns(rows.schema)
    )
    return sink.getvalue().to_pybytes()


@functools.lru_cache(maxsize=128)
def footer_statistics_columns(schema: pa.Schema) -> list[str]:
    """The Parquet column paths whose footer statistics a data file may carry.

    Every column but the floating-point ones: Parquet min/max leave NaN out, and
    readers that skip row groups by them (pyarrow, Spark, deltalake) would drop
    rows holding NaN, which sorts above every number. mere's own statistics (the
    log's, with a NaN count) are unaffected.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    parquet = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    out = []
    for i in range(len(parquet)):
        column = parquet.column(i)
        floating = column.physical_type in ("FLOAT", "DOUBLE") or (
            str(column.logical_type.type).upper() == "FLOAT16"
        )
        if not floating:
            out.append(column.path)
    return out


@dataclass(frozen=True)
class _SmallStats:
    """How a column's statistics come from a few rows' Python values (``_update_small_column``)."""

    floating: bool = False
    text: bool = False
    temporal: bool = False
    to_text: Callable[[Any], str] | None = None  # a temporal value's text; None: Arrow's cast


@dataclass(frozen=True)
class _Layout:
    """What writing a table's rows takes from its metadata, worked out once per TableMeta."""

    file_schema: pa.Schema  # the files' columns: physical names, no partition columns
    logical: list[str]  # the table's names of those columns, in that order
    as_stored: bool  # whether rows already have the files' columns, under the files' names
    small_stats: tuple[_SmallStats | None, ...]  # per file column; None: compute kernels only
    stream_head: bytes | None  # arrow_stream_head(file_schema)


#: Layouts by ``id`` of their TableMeta, which each entry keeps alive: a state's
#: TableMeta objects last as long as the table is unchanged, so a client that keeps
#: committing to a table works its layout out once.
_layouts: dict[int, tuple[TableMeta, _Layout]] = {}
_LAYOUTS_KEPT = 256


def _layout_of(table: TableMeta) -> _Layout:
    found = _layouts.get(id(table))
    if found is not None and found[0] is table:
        return found[1]
    file_schema = data_columns(table.schema, tuple(table.partition_columns))
    logical = [f.name for f in table.schema if f.name not in table.partition_columns]
    layout = _Layout(
        file_schema,
        logical,
        logical == file_schema.names == table.schema.names,
        tuple(_small_stats(f.type) for f in file_schema),
        arrow_stream_head(file_schema),
    )
    if len(_layouts) >= _LAYOUTS_KEPT:
        _layouts.clear()
    _layouts[id(table)] = (table, layout)
    return layout


def _small_stats(t: pa.DataType) -> _SmallStats | None:
    """How ``_update_small_column`` treats a column of type ``t``; None for the types
    whose Python values are not exact (float16, nanosecond timestamps) or that have
    no statistics."""
    if pat.is_float16(t) or (pat.is_timestamp(t) and t.unit == "ns"):
        return None
    if pat.is_floating(t):
        return _SmallStats(floating=True)
    if _is_text(t):
        return _SmallStats(text=True)
    if pat.is_date(t) or pat.is_timestamp(t) or pat.is_decimal(t):
        return _SmallStats(temporal=True, to_text=python_text(t))
    if pat.is_integer(t) or pat.is_boolean(t):
        return _SmallStats()
    return None


def new_data_file_path(partition_values: Mapping[str, str | None]) -> str:
    """A fresh data file path (relative to the table) in mere's layout (format §6)."""
    directory = "".join(f"{c}={escape_partition_value(v)}/" for c, v in partition_values.items())
    return f"{directory}part-{uuid.uuid4().hex}.parquet"


#: A piece of at most this many rows gets its statistics from Python values
#: (one conversion per column) rather than from compute kernels, whose fixed
#: cost per call is most of a small commit's statistics time.
SMALL_PIECE_ROWS = 16


def _update_stats(
    stats: dict[str, _ColumnStats], part: pa.Table, small_stats: tuple[_SmallStats | None, ...]
) -> None:
    """Widen ``stats`` (the file's columns, in order) by ``part``'s rows (the same columns)."""
    small = part.num_rows <= SMALL_PIECE_ROWS
    for i, (s, how) in enumerate(zip(stats.values(), small_stats, strict=True)):
        col = part.column(i)
        if not (small and how is not None and _update_small_column(s, col, how)):
            _update_column(s, col)


def _update_column(s: _ColumnStats, col: pa.ChunkedArray) -> None:
    s.nulls += col.null_count
    if pa.types.is_float16(col.type):  # no compute kernels for half floats; float32 is exact
        col = pc.cast(col, pa.float32())
    if pa.types.is_floating(col.type):
        # min/max leave NaN out; the count tells readers whether NaN (which
        # sorts above every number) may be there.
        s.nans = (s.nans or 0) + (pc.sum(pc.is_nan(col)).as_py() or 0)
    if not s.exact or not has_statistics(col.type) or col.null_count == len(col):
        return
    if _is_text(col.type):
        s.from_footer = True  # see _footer_string_bounds
        return
    mm = pc.min_max(col)
    lo, hi = stat_to_json(mm["min"]), stat_to_json(mm["max"])
    if lo is None or hi is None:
        s.exact = False
        return
    try:
        lo_v, hi_v = mm["min"].as_py(), mm["max"].as_py()
    except (OverflowError, ValueError):  # beyond Python's dates (year 9999)
        s.exact = False
        return
    _widen(s, lo_v, lo, hi_v, hi)


def _widen(s: _ColumnStats, lo_v: Any, lo: Any, hi_v: Any, hi: Any) -> None:
    if s.min is None or lo_v < s.min[0]:
        s.min = (lo_v, lo)
    if s.max is None or hi_v > s.max[0]:
        s.max = (hi_v, hi)


def _update_small_column(s: _ColumnStats, col: pa.ChunkedArray, how: _SmallStats) -> bool:
    """``_update_column`` for a few rows, from Python values: False if it cannot.

    The results are the same as the kernels': min/max of the non-null values,
    NaN left out of them (values that are all NaN leave the file without
    bounds, as a NaN bound would), the first of equal
    values kept (``-0.0`` and ``0.0``), and no bounds once one is infinite.
    It declines values beyond Python's dates before changing ``s``.
    """
    try:
        values = col.to_pylist()
    except (OverflowError, ValueError):  # beyond Python's dates: the kernels decide
        return False
    s.nulls += col.null_count
    present = [v for v in values if v is not None] if col.null_count else values
    floating = how.floating
    if floating:
        numbers = [v for v in present if v == v]
        s.nans = (s.nans or 0) + len(present) - len(numbers)
        if present and not numbers:  # only NaN: the kernels' bounds would be NaN
            s.exact = False
        present = numbers
    if not s.exact or not present:
        return True
    lo_v, hi_v = min(present), max(present)
    if how.text:
        # Python orders ``str`` as Parquet orders UTF-8. A value too long to be a
        # bound may still lie between the file's bounds: _stats_json decides.
        _widen(s, lo_v, lo_v, hi_v, hi_v)
        return True
    lo: Any
    hi: Any
    if floating:
        if not (math.isfinite(lo_v) and math.isfinite(hi_v)):
            s.exact = False
            return True
        lo, hi = float(lo_v), float(hi_v)
    elif how.temporal and how.to_text is not None:
        lo, hi = how.to_text(lo_v), how.to_text(hi_v)
    elif how.temporal:
        texts = pc.cast(col, pa.string()).to_pylist()  # the canonical text (values.to_text)
        lo, hi = texts[values.index(lo_v)], texts[values.index(hi_v)]
    else:
        lo, hi = lo_v, hi_v
    _widen(s, lo_v, lo, hi_v, hi)
    return True


def _is_text(t: pa.DataType) -> bool:
    return bool(pat.is_string(t) or pat.is_large_string(t))


def _stats_json(rows: int, stats: dict[str, _ColumnStats]) -> dict[str, Any]:
    bounded = {n: s for n, s in stats.items() if _recordable_bounds(s)}
    mins = {n: s.min[1] for n, s in bounded.items()}
    maxs = {n: s.max[1] for n, s in bounded.items()}
    out: dict[str, Any] = {
        "numRecords": rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": {n: s.nulls for n, s in stats.items()},
    }
    nans = {n: s.nans for n, s in stats.items() if s.nans is not None}
    if nans:
        out["nanCount"] = nans
    return out


def _recordable_bounds(s: _ColumnStats) -> bool:
    """Whether ``s`` has exact bounds the log records: a string bound longer than
    ``MAX_STAT_STRING`` is not (nor would the footer keep one past 4 KiB)."""
    if not s.exact or s.min is None or s.max is None:
        return False
    return not any(isinstance(b, str) and len(b) > MAX_STAT_STRING for b in (s.min[1], s.max[1]))


UPLOAD_ATTEMPTS = 3


def upload(store: ObjectStore, key: str, data: pa.Buffer) -> None:
    """Create a data file, settling an unknown outcome by reading it back.

    Data files have fresh unique names, so an object holding exactly our bytes
    is our upload that landed although its answer was lost; a missing one is
    sent again. Only a definite failure or an unreadable object raises.
    """
    error: StorageError | None = None
    for _ in range(UPLOAD_ATTEMPTS):
        try:
            store.put_if_absent(key, data)
            return
        except InvalidKey:
            raise
        except StorageError as exc:  # AlreadyExists included: maybe our own earlier attempt
            error = exc
        try:
            if store.get(key) == data.to_pybytes():
                return
        except ObjectNotFound:
            continue
        raise error
    assert error is not None
    raise error


def delete_orphans(store: ObjectStore, keys: Iterable[str]) -> None:
    """Delete data files no commit references, best effort.

    A file left behind (a failed delete) is an orphan that vacuum reclaims,
    so a failure is logged, never raised into the work that wrote it.
    """
    for key in keys:
        try:
            store.delete(key)
        except MereError as exc:
            log.warning("could not delete orphan data file %s: %s", key, exc)
